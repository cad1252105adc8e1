"""Which steps load a MERGE's outputs for their expressions (engine.execution.merge_outputs)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from engine.execution import merge_outputs
from schemas.definitions import Vertex

URL = "http://127.0.0.1:8765/x"


def gateway(body: Any, url: str = URL) -> Vertex:
    document = {"type": "GATEWAY", "dependsOn": ["join"], "config": {"url": url, "body": body}}
    return TypeAdapter(Vertex).validate_python(document)


@pytest.mark.parametrize(
    "body",
    [
        "{{ length(vertices.join.output.outputs) }}",
        {"first": ["{{ vertices.join.output.outputs[0].call.body }}"]},
        "n={{ vertices.join.output.outputs[?x].y | length(@) }}",
        "{{ vertices.join.output }}",  # the whole output holds the list
        "{{ vertices }}",
        "{{ values(vertices)[0] }}",
        "{{ @ }}",  # the whole context
        "{{ *.join.output.outputs }}",
    ],
)
def test_a_step_that_may_read_the_outputs_loads_them(body: Any) -> None:
    assert merge_outputs.outputs_read(gateway(body), "join")


@pytest.mark.parametrize(
    "body",
    [
        "{{ vertices.join.output.counts.succeeded }}",
        "{{ vertices.join.output.outputsRef }}",
        "{{ vertices.other.output.outputs }}",
        "{{ input.outputs }}",
        "{{ input.items[?vertices.join.output.outputs] }}",  # per element, not the root
        "no expression",
        None,
    ],
)
def test_a_step_that_cannot_read_the_outputs_loads_nothing(body: Any) -> None:
    assert not merge_outputs.outputs_read(gateway(body), "join")


def test_every_config_field_counts() -> None:
    vertex = gateway(None, url=f"{URL}/{{{{ vertices.join.output.outputs[0] }}}}")
    assert merge_outputs.outputs_read(vertex, "join")


def test_the_failure_says_what_stays_readable() -> None:
    message = merge_outputs.too_large("join", 70_000_000, 67_108_864)
    assert message == (
        "the outputs of MERGE 'join' are 70,000,000 bytes, over the 67,108,864 an expression "
        "may load (SCHEMABRIDGE_MERGE_OUTPUTS_READ_MAX_BYTES); raise it, or read "
        "vertices.join.output.counts and .outputsRef, which stay readable"
    )
