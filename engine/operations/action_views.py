"""What operator actions answer: small views saying what was done (camelCase on the wire)."""

from __future__ import annotations

from engine.operations.views import View


class ActionResult(View):
    """One action on one run. `changed` is False when the action found nothing to do (it is
    idempotent there); `status` is the run's status after it."""

    run_id: str
    action: str
    """retry, resolve, start_over, reprocess or cancel (as in the run's log)."""
    changed: bool
    message: str
    status: str


class RetryResult(ActionResult):
    steps_retried: int
    """FAILED steps that run again."""


class ResolveResult(ActionResult):
    vertex_id: str


class StartOverResult(ActionResult):
    new_run_id: str
    """The run that starts the old one over (the same one for every start over of it)."""


class ReprocessResult(ActionResult):
    revived: int
    """Dead-lettered child runs that run again, nested ones included."""


class CancelResult(ActionResult):
    runs_cancelled: int
    """The run and its descendants that were still going (0: it was already CANCELLED)."""
    steps_cancelled: int


class SkippedRun(View):
    """A run a batch action left alone, and why: `reason` is the code the single action
    would have refused it with (`run_not_found`, `run_not_failed`); `state` its status."""

    run_id: str
    reason: str
    state: str | None = None


class BatchRetryResult(View):
    """A batch retry: the runs retried and those skipped, in the order asked (a filter's
    runs newest first). `truncated`: the filter matched more runs than `limit`, and only the
    first `limit` were considered."""

    retried: list[str]
    skipped: list[SkippedRun]
    truncated: bool = False
