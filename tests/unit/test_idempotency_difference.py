"""What an idempotency conflict names of the request that differs
(`engine.operations.submission.difference`): pure, on run rows built here."""

from __future__ import annotations

from typing import Any

import pytest

from engine.operations.submission import (
    MAX_POINTER_CHARS,
    Request,
    difference,
    input_difference,
    request_hash,
)
from engine.store.records import RunRecord


def run_of(run_input: Any, *, named: int | None, request_hash_: str | None = None) -> RunRecord:
    """A run of `one` v3 for tenant acme, created by a request that named version `named`."""
    digest = request_hash("one", named, run_input, "acme")
    return RunRecord(
        id="r1",
        workflow_name="one",
        workflow_version=3,
        tenant_id="acme",
        status="RUNNING",
        input=run_input,
        output=None,
        error=None,
        created_at=0.0,
        started_at=None,
        ended_at=None,
        timeout_tier="process",
        request_hash=request_hash_ or digest,
    )


@pytest.mark.parametrize(
    ("first", "second", "pointer"),
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}, "/a/c"),
        ({"a": 1}, {"a": 1, "b": 2}, "/b"),  # a key one of them lacks
        ({"a": [1, 2]}, {"a": [1, 2, 3]}, "/a/2"),  # past the end of the shorter list
        ({"a": 1}, {"a": 1.0}, "/a"),  # another JSON text
        ({"a/b": 1, "m~n": 1}, {"a/b": 2, "m~n": 1}, "/a~1b"),
        ({"a": 1}, [1], ""),  # another type: the input as a whole
    ],
)
def test_the_pointer_is_where_the_inputs_first_differ(
    first: Any, second: Any, pointer: str
) -> None:
    assert input_difference(first, second) == pointer


def test_a_long_pointer_is_cut() -> None:
    key = "k" * (MAX_POINTER_CHARS * 2)
    found = input_difference({key: 1}, {key: 2})
    assert found == "/" + "k" * (MAX_POINTER_CHARS - 1) + "…"


def test_the_same_request_differs_in_nothing() -> None:
    run = run_of({"a": 1}, named=None)
    assert difference(run, Request("one", None, {"a": 1}, "acme")).parts == ()


def test_the_version_named_is_read_from_the_stored_hash() -> None:
    left_out = run_of({"a": 1}, named=None)
    pinned = run_of({"a": 1}, named=3)
    assert difference(left_out, Request("one", 3, {"a": 1}, "acme")).parts == ("version",)
    assert difference(pinned, Request("one", None, {"a": 1}, "acme")).parts == ("version",)
    assert difference(pinned, Request("one", 3, {"a": 2}, "acme")).parts == ("input",)


def test_a_hash_the_row_cannot_explain_leaves_the_version() -> None:
    """A row whose hash neither version reproduces: the request differs, and nothing else
    the row tells does, so the version is what differs."""
    run = run_of({"a": 1}, named=None, request_hash_="0" * 64)
    found = difference(run, Request("one", None, {"a": 1}, "acme"))
    assert found.parts == ("version",)
    found = difference(run, Request("one", None, {"a": 2}, "acme"))
    assert found.parts == ("input",) and found.input_pointer == "/a"
