"""The fix-first warning after a resolve: a start over is offered only for a resolved step a
FAILED one depends on (a start over sends every call of the run again), named in the
singular or the plural."""

from __future__ import annotations

from engine.operations.fix_first import (
    FailedCause,
    fix_first_words,
    resolved_upstream,
    run_fix_first_words,
)
from engine.store.records import StepRecord
from schemas.definitions import Workflow

URL = "http://127.0.0.1:9/x"
GRAPH = Workflow.model_validate(
    {
        "name": "graph",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": URL}},
            "b": {"type": "GATEWAY", "dependsOn": ["a"], "config": {"url": URL}},
            "c": {"type": "GATEWAY", "dependsOn": ["b"], "config": {"url": URL}},
            "side": {"type": "GATEWAY", "config": {"url": URL}},
        },
    }
)


def test_only_resolved_steps_upstream_of_a_failure_are_named() -> None:
    assert resolved_upstream(GRAPH, ["c"], ["a", "side"]) == ["a"]  # two levels up
    assert resolved_upstream(GRAPH, ["b"], ["side"]) == []  # a resolve beside the failure
    assert resolved_upstream(GRAPH, ["a"], ["a", "b"]) == []  # itself, and downstream
    assert resolved_upstream(GRAPH, ["c", "side"], ["b", "a"]) == ["a", "b"]
    assert resolved_upstream(GRAPH, ["gone"], ["a"]) == []  # a vertex the version lacks


def test_the_words_name_one_resolved_step_or_several() -> None:
    causes = [FailedCause("c", "invalid_config")]
    common = {"workflow": "graph", "version": 2, "tenant_id": None, "child_run": False}
    one = fix_first_words(causes, **common, run_id="r1", resolved=["a"])
    two = fix_first_words(causes, **common, run_id="r1", resolved=["a", "b"])
    none = fix_first_words(causes, **common, run_id="r1")
    assert one is not None and "or the output step a was resolved with:" in one
    assert two is not None and "or the outputs that steps a, b were resolved with:" in two
    assert "`schemabridge runs start-over r1`" in one and "`schemabridge runs start-over r1`" in two
    assert none is not None and "start-over" not in none
    assert "retrying, reprocessing or starting over runs v2" in none


def _step(vertex_id: str, status: str, error: dict[str, str] | None = None) -> StepRecord:
    return StepRecord(0, "r1", vertex_id, status, 1, 0, None, error, 0.0, 0.0, None, None)


def test_a_run_started_over_or_a_child_is_offered_no_start_over() -> None:
    """A resolve upstream of the failure offers a start over only to a root run that has not
    been started over: the one started over already has its new run, and a child's start is
    its root's."""
    steps = [_step("a", "RESOLVED"), _step("c", "FAILED", {"kind": "invalid_config"})]
    common = {"version": 2, "tenant_id": None, "run_id": "r1"}
    root = run_fix_first_words(steps, GRAPH, **common, child_run=False, started_over=False)
    again = run_fix_first_words(steps, GRAPH, **common, child_run=False, started_over=True)
    child = run_fix_first_words(steps, GRAPH, **common, child_run=True, started_over=False)
    assert root is not None and "`schemabridge runs start-over r1`" in root
    assert again is not None and "start-over" not in again
    assert "retrying, reprocessing or starting over runs v2" in again
    assert child is not None and "start-over" not in child
