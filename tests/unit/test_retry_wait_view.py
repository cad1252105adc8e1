"""A RUNNING step's retry wait as the run views show it (`run_views.waiting_view`): due at the
`not_before` written with it, over once that time has passed, as other waits are shown."""

from __future__ import annotations

from engine.operations.run_views import waiting_view
from engine.store.records import StepRecord


def step(reason: str | None, status: str = "RUNNING") -> StepRecord:
    return StepRecord(
        id=1,
        run_id="run-1",
        vertex_id="call",
        status=status,
        attempts=1,
        auto_retries=0,
        output=None,
        error=None,
        not_before=50.0,
        created_at=50.0,
        started_at=60.0,
        ended_at=None,
        wait_reason=reason,
        wait_message="retrying GET http://x after 503 (attempt 2/3)",
    )


def test_a_retry_wait_is_due_at_its_not_before() -> None:
    view = waiting_view(step("retry_backoff"), now=49.0)
    assert view is not None and view.reason == "retry_backoff"
    assert view.until == 50.0
    assert view.message.endswith("(attempt 2/3)")


def test_a_retry_wait_whose_time_passed_is_over() -> None:
    assert waiting_view(step("retry_backoff"), now=50.0) is None


def test_other_waits_keep_their_until() -> None:
    ready = waiting_view(step("redispatch", "READY"), now=1000.0)
    assert ready is not None and ready.until == 50.0
    admission = waiting_view(step("admission_wait"), now=1000.0)
    assert admission is not None and admission.until is None
    assert waiting_view(step("retry_backoff", "SUCCEEDED"), now=49.0) is None
