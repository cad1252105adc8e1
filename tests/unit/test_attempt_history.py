"""A step's attempt history as the run views assemble it from its log lines
(`run_views.histories`): attempts numbered by the execution (claim) their lines name, an
execution lost with its worker shown as an entry of its own, and lines written before lines
named their execution numbered as they were (a new execution where the attempt number starts
again)."""

from __future__ import annotations

from typing import Any

from engine.operations.run_views import histories
from engine.store.listing import LogRecord

LEASE_EXPIRED = "lease expired; step requeued"


def line(n: int, data: dict[str, Any] | None, message: str = "POST … → 200") -> LogRecord:
    return LogRecord(n, "r1", "call", float(n), "info", message, data)


def attempt(n: int, number: int, execution: int | None, status: int = 200) -> LogRecord:
    data: dict[str, Any] = {"attempt": number, "maxAttempts": 3, "status": status, "worker": "w1"}
    if execution is not None:
        data["execution"] = execution
    return line(n, data)


def lost(n: int, execution: int, why: str = "lease_expired") -> LogRecord:
    return line(n, {"lost": why, "execution": execution, "worker": "w1"}, LEASE_EXPIRED)


def entries(lines: list[LogRecord], show_worker: bool = True) -> list[tuple[Any, ...]]:
    history = histories(lines, show_worker=show_worker)["call"]
    return [(a.execution, a.attempt, a.http_status, a.lost, a.worker) for a in history]


def test_a_call_lost_with_its_worker_is_the_first_execution_not_hidden() -> None:
    """The tour's case: the first execution's worker was killed mid-call (no line), the
    lease expired, the second execution read 200."""
    assert entries([lost(1, 1), attempt(2, 1, 2)]) == [
        (1, 1, None, "lease_expired", "w1"),
        (2, 1, 200, None, "w1"),
    ]


def test_a_lost_execution_that_had_logged_attempts_continues_them() -> None:
    """Attempt 1 answered 503 and its retry was under way when the worker died: the lost
    entry is that execution's attempt 2, and the next execution starts at 1."""
    lines = [attempt(1, 1, 1, 503), lost(2, 1), attempt(3, 1, 2)]
    assert entries(lines) == [
        (1, 1, 503, None, "w1"),
        (1, 2, None, "lease_expired", "w1"),
        (2, 1, 200, None, "w1"),
    ]


def test_a_late_line_of_a_stalled_worker_keeps_its_execution() -> None:
    """A worker that hung past its lease and came back logs its attempt after the next
    execution's: the line names the execution that made it."""
    lines = [lost(1, 1), attempt(2, 1, 2), attempt(3, 1, 1, 504)]
    assert [(e[0], e[2]) for e in entries(lines)] == [(1, None), (2, 200), (1, 504)]


def test_lines_written_before_they_named_their_execution_are_numbered_as_before() -> None:
    lines = [attempt(1, 1, None, 503), attempt(2, 2, None, 503), attempt(3, 1, None)]
    assert [e[:2] for e in entries(lines)] == [(1, 1), (1, 2), (2, 1)]
    # After a lost execution, such a line starts the next one.
    assert [
        e[:2] for e in entries([attempt(1, 1, None, 503), lost(2, 1), attempt(3, 2, None)])
    ] == [
        (1, 1),
        (1, 2),
        (2, 2),
    ]


def test_a_tenant_is_not_told_which_worker_lost_it() -> None:
    assert entries([lost(1, 1, "worker_stopped")], show_worker=False) == [
        (1, 1, None, "worker_stopped", None)
    ]


def test_requeue_lines_that_say_no_lost_execution_are_not_attempts() -> None:
    """A requeue's line without data (a held step released) or with a `lost` this release does
    not know is not an entry."""
    lines = [line(1, None, LEASE_EXPIRED), line(2, {"lost": "eaten", "execution": 1})]
    assert histories([*lines, attempt(3, 1, 2)], show_worker=True)["call"][0].execution == 2
    assert len(histories(lines, show_worker=True)) == 0
