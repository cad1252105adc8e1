"""Paths into the outputs whose shape the engine fixes (engine.validation.output_paths)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.validation import parse_document
from engine.validation.output_paths import GATEWAY_OUTPUT, MERGE_COUNTS
from schemas.errors import DefinitionError
from vertices.merge import ChildCounts

URL = "http://127.0.0.1:8765/x"


def document(body: str) -> list[dict[str, Any]]:
    """call (GATEWAY) and fan → join (MERGE), both read by `use`'s body."""
    parent = {
        "name": "parent",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": URL}},
            "fan": {"type": "SPAWNER", "config": {"items": [1], "workflow": "child"}},
            "join": {"type": "MERGE", "dependsOn": ["fan"]},
            "use": {
                "type": "GATEWAY",
                "dependsOn": ["call", "join"],
                "config": {"url": URL, "body": body},
            },
        },
    }
    child = {"name": "child", "vertices": {"c": {"type": "GATEWAY", "config": {"url": URL}}}}
    return [parent, child]


def problems(body: str) -> list[tuple[str, str]]:
    try:
        parse_document(json.dumps(document(body)))
    except DefinitionError as error:
        return [(p.code, p.message) for p in error.problems]
    return []


@pytest.mark.parametrize(
    "body",
    [
        "{{ vertices.call.output }}",
        "{{ vertices.call.output.status }}",
        "{{ vertices.call.output.bodyTruncated }}",
        "{{ vertices.call.output.body.anything.Deep }}",
        "{{ vertices.call.output.headers.location }}",
        '{{ vertices.call.output.headers."content-type" }}',
        "{{ vertices.call.output.headers }}",
        "{{ vertices.join.output.counts.succeeded }}",
        "{{ vertices.join.output.counts.pending }}",
        "{{ vertices.join.output.outputs[].c.body.sku }}",
        "{{ vertices.join.output.outputsRef.payloadRef }}",
        "{{ vertices.fan.output.whatever }}",
        "{{ vertices.call.output.body[?status == 'x'].headers.Location }}",
    ],
)
def test_paths_inside_the_known_shapes_or_under_unknown_ones_pass(body: str) -> None:
    assert problems(body) == []


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "{{ vertices.call.output.bdy.id }}",
            'reads vertices.call.output.bdy, but a GATEWAY\'s output has no "bdy" (it has '
            '"status", "headers", "body" and "bodyTruncated"), so it is null in every run. '
            "Did you mean vertices.call.output.body.id?",
        ),
        (
            "{{ vertices.join.output.count.succeeded }}",
            'but a MERGE\'s output has no "count" (it has "counts", "outputs" and '
            '"outputsRef"), so it is null in every run. Did you mean '
            "vertices.join.output.counts.succeeded?",
        ),
        (
            "{{ vertices.join.output.counts.success }}",
            "Did you mean vertices.join.output.counts.succeeded?",
        ),
        (
            "{{ vertices.call.output.headers.Location }}",
            "which is always null: response header names are stored in lower case. Write "
            "vertices.call.output.headers.location.",
        ),
        (
            '{{ vertices.call.output.headers."Content-Type" }}',
            'Write vertices.call.output.headers."content-type".',
        ),
        (
            "{{ vertices.call.output.status.code }}",
            "but status is a number, which has no fields: read vertices.call.output.status.",
        ),
        (
            "{{ vertices.join.output.counts.failed.n }}",
            "but each count is a number, which has no fields: read "
            "vertices.join.output.counts.failed.",
        ),
        ("{{ length(vertices.call.output.Body) }}", "Did you mean vertices.call.output.body?"),
    ],
)
def test_a_path_that_leaves_a_known_shape_is_refused_with_the_fix(body: str, said: str) -> None:
    [(code, message)] = problems(body)
    assert code == "unknown_output_field"
    assert message.endswith(said)


def test_a_path_nothing_is_close_to_lists_the_fields_without_a_guess() -> None:
    [(_, message)] = problems("{{ vertices.call.output.zzzzzz }}")
    assert message.endswith("so it is null in every run.")


def test_the_counts_checked_are_the_counts_a_merge_records() -> None:
    assert tuple(ChildCounts(total=3).as_dict()) == MERGE_COUNTS


async def test_the_gateway_fields_checked_are_the_fields_a_gateway_records() -> None:
    from tests.integration.test_gateway import gateway_ctx
    from vertices.gateway import _output
    from vertices.gateway_response import Answer

    answer = Answer(200, "OK", {"location": "/x"}, b"cut", None, truncated=True)
    assert tuple(await _output(gateway_ctx(), answer, "cut")) == GATEWAY_OUTPUT


def test_the_quoting_hint_writes_a_response_header_name_in_lower_case() -> None:
    """The fix offered for an unquoted `Content-Type` is one this check accepts."""
    ((code, message),) = problems("{{ vertices.call.output.headers.Content-Type }}")
    assert code == "expression_syntax"
    fixed = '{{ vertices.call.output.headers."content-type" }}'
    assert f"write {fixed} (response header names are stored in lower case)" in message
    assert problems(fixed) == []
    # Only a GATEWAY's response headers: a body's names are the destination's own.
    ((_, message),) = problems("{{ vertices.call.output.body.Content-Type }}")
    assert 'write {{ vertices.call.output.body."Content-Type" }}.' in message
