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


RUN_ID = "472b5d71-ca72-44f0-9a1e-3c5b7d2e8f10"
JOIN_FAILED = (
    "12 of 40 children failed, more than the join tolerates (0) (of the first 1,000 failed: "
    "12 http_status: POST http://billing:8080/charge answered 503 Service Unavailable: "
    + "upstream overloaded, " * 6
    + f"retry later); see `schemabridge runs children {RUN_ID} --status FAILED`"
)


def test_a_long_message_keeps_its_closing_hint_whole(caplog: pytest.LogCaptureFixture) -> None:
    """The worker's line once cut the message at 200 characters, mid-id: "see `schemabridge
    runs children 472b5d71-ca72-44". The hint stays whole; the cause before it is cut."""
    result = StepFailed(
        step("join", "r1", None), {"kind": "child_failures", "message": JOIN_FAILED}
    )
    report = CompletionReport(finished_runs=[("r1", "FAILED")])
    with caplog.at_level(logging.WARNING, logger="engine.execution.worker"):
        _log_failed_runs([result], report)
    line = caplog.records[0].getMessage()
    quoted = line.split("child_failures: ", 1)[1]
    assert len(quoted) <= 200, quoted
    # The cut falls inside "(of the first …": what it opened is closed after the "…".
    assert quoted.endswith(f"…); see `schemabridge runs children {RUN_ID} --status FAILED`")
    assert quoted.startswith("12 of 40 children failed")
    assert quoted.count("(") == quoted.count(")"), quoted


def test_a_cut_closes_the_brackets_it_leaves_open() -> None:
    """A fan-out's failure once read "(3 http_error, e.g. POST…; see …": the parenthesis the
    cut fell in was never closed, in the worker's line and in `runs list`."""
    from schemas.message_excerpt import message_excerpt

    cause = "(3 http_error, e.g. POST http://crm:8080/tickets answered 500: " + "boom " * 30 + ")"
    message = f"3 of 3 children failed {cause}; see `schemabridge runs children {RUN_ID}`"
    cut = message_excerpt(message, limit=160)
    assert len(cut) <= 160, cut
    assert cut.startswith("3 of 3 children failed (3 http_error, e.g. POST http://crm:8080/")
    assert cut.endswith(f"…); see `schemabridge runs children {RUN_ID}`"), cut
    assert message_excerpt("a (b [c d e f g h i j k", limit=12) == "a (b [c d…])"
    assert message_excerpt("a (b) c d e f g h i j k", limit=10) == "a (b) c d…"
    # Brackets in a quoted command are not the sentence's.
    assert message_excerpt("run `a (b` then c d e f g h i j", limit=16) == "run `a (b` then…"
    assert message_excerpt("(" * 20, limit=5) == "…"


def test_a_cut_never_falls_inside_a_quoted_command() -> None:
    from schemas.message_excerpt import message_excerpt

    command = f"`schemabridge runs children {RUN_ID} --status FAILED`"
    text = f"the children failed; see {command} and then {'more words ' * 20}"
    cut = message_excerpt(text, limit=60)
    assert cut == "the children failed; see…", cut
    assert message_excerpt("short; see `x`") == "short; see `x`"
    assert message_excerpt("a " * 150, limit=10) == "a a a a a…"
    assert message_excerpt("alpha beta gamma", limit=12) == "alpha beta…"
