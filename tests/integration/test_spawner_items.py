"""What a SPAWNER step says when its `items` is not an array: JSON names and the pointer."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.definitions import SpawnerConfig
from schemas.errors import FailureKind, StepFailure
from tests.integration.test_gateway import gateway_ctx
from vertices.spawner import items_of


@pytest.mark.parametrize(
    ("value", "kind"),
    [({"a": 1}, "object"), ("x", "string"), (3, "number"), (True, "boolean"), (None, "null")],
)
def test_items_that_are_no_array_are_named_as_json_types(value: Any, kind: str) -> None:
    config = SpawnerConfig.model_validate({"items": "{{ input.v }}", "workflow": "child"})
    with pytest.raises(StepFailure) as caught:
        items_of(config, gateway_ctx(v=value))
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert caught.value.message.startswith(f"/config/items must evaluate to an array, got {kind}: ")


def test_an_expression_error_in_items_names_its_pointer() -> None:
    config = SpawnerConfig.model_validate({"items": "{{ sum(input.v) }}", "workflow": "child"})
    with pytest.raises(StepFailure) as caught:
        items_of(config, gateway_ctx(v=["a"]))
    assert caught.value.kind is FailureKind.EXPRESSION_ERROR
    assert caught.value.message.startswith("/config/items: expression {{ sum(input.v) }}")
    assert caught.value.message.endswith("received: string")


@pytest.mark.parametrize(
    ("fetched", "said"),
    [
        (
            {"status": 200, "body": "<!doctype html><p>maintenance</p>"},
            "(vertices.fetch.output.body is a string, not an object)",
        ),
        (
            {"status": 200, "body": {"rows": [], "total": 0}},
            "(vertices.fetch.output.body has no field 'orders'; its fields are: rows, total)",
        ),
    ],
    ids=["html-answer", "misspelt-field"],
)
def test_items_that_are_null_say_where_their_path_stops(fetched: Any, said: str) -> None:
    """The tour: a downstream answered HTML, and the run failed "items must evaluate to an
    array, got null", which reads as a wrong expression. Where the path stops says whether
    the data (a string where an object was read) or the expression (a field the answer does
    not have) is wrong."""
    config = SpawnerConfig.model_validate(
        {"items": "{{ vertices.fetch.output.body.orders }}", "workflow": "child"}
    )
    ctx = gateway_ctx()
    ctx.context["vertices"] = {"fetch": {"output": fetched}}
    with pytest.raises(StepFailure) as caught:
        items_of(config, ctx)
    assert caught.value.message == (
        f"/config/items must evaluate to an array, got null {said}: check the expression "
        "'{{ vertices.fetch.output.body.orders }}'"
    )
