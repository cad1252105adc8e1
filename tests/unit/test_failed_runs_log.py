"""The worker's log of runs a flush failed (`worker._log_failed_runs`): a root run gets its own
line; the children of one parent that failed in one flush share one line, so a fan-out against a
failing destination does not write a line per child."""

from __future__ import annotations

import logging

import pytest

from engine.execution.worker import _log_failed_runs
from engine.store.records import CompletionReport, StepFailed
from tests.unit.test_step_stops import step


def failed(run_id: str, parent: str | None, kind: str = "http_error") -> StepFailed:
    message = f"POST /charge/{run_id}: 503"
    return StepFailed(step(f"b:{run_id}", run_id, parent), {"kind": kind, "message": message})


def test_a_root_gets_a_line_and_a_parents_children_share_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    results = [
        failed("root", None),
        *(failed(f"c{i}", "p1") for i in range(5)),
        failed("t0", "p1", kind="timeout"),
        failed("solo", "p2"),
        failed("later", "p3"),  # its run did not end in this flush: no line
    ]
    ended = [r.step.run_id for r in results if r.step.run_id != "later"]
    report = CompletionReport(finished_runs=[(run, "FAILED") for run in ended])
    with caplog.at_level(logging.WARNING, logger="engine.execution.worker"):
        _log_failed_runs(results, report)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "run root failed at call: http_error: POST /charge/root: 503",
        "6 child runs of run p1 failed (5 http_error, 1 timeout); the first at call: "
        "POST /charge/c0: 503",
        "child run solo of run p2 failed (1 http_error); the first at call: POST /charge/solo: 503",
    ]
    grouped = caplog.records[1]
    assert grouped.__dict__["children_failed"] == 6 and grouped.__dict__["parent_run_id"] == "p1"
