"""Reprocess the dead letters of many runs at once: what a batch retry's `stuck` runs need
(their joins fail again at once, their children still FAILED), which the operator otherwise
reprocessed one run page at a time.

Each run is reprocessed as `OperatorActions.reprocess` does it alone, in its own transaction
(a run's reprocess locks its root; one transaction for a thousand trees would hold them all),
after its preview: a run whose reprocess would reopen a SUCCEEDED run's join (itself or one
above it), running the steps after that join a second time, is left with the reason
(`reopens_succeeded`), as a batch retry leaves such a child; so is a run with nothing to
revive (`no_dead_letters`). Every other refusal is the single action's (`run_not_found`,
`run_cancelled`, `deployment_run`, `started_over`, `run_past_retention`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from engine.operations.action_views import (
    BatchReprocessResult,
    BreakerWarning,
    ReprocessedRun,
    ReprocessPreview,
    ReprocessResult,
    SkippedRun,
    SkipReason,
)
from schemas.batch_limits import DEFAULT_BATCH
from schemas.errors import InvalidRequest, NotFound, WrongState

MAX_REPROCESS_BATCH = DEFAULT_BATCH
"""The most runs one batch reprocess takes: each is its own transaction and its own reads."""
_REFUSALS = {
    reason.value: reason
    for reason in (
        SkipReason.RUN_CANCELLED,
        SkipReason.DEPLOYMENT_RUN,
        SkipReason.STARTED_OVER,
        SkipReason.RUN_PAST_RETENTION,
    )
}


def batch_ids(ids: Sequence[str]) -> list[str]:
    """`ids`, each once, in the order given; refused when none or more than
    `MAX_REPROCESS_BATCH` (`invalid_batch`, `too_many_runs`)."""
    if not ids:
        raise InvalidRequest("give the ids of the runs to reprocess", code="invalid_batch")
    if len(ids) > MAX_REPROCESS_BATCH:
        raise InvalidRequest(
            f"{len(ids):,} runs asked for, more than the {MAX_REPROCESS_BATCH:,} one batch "
            "reprocess takes; send them in several",
            code="too_many_runs",
        )
    return list(dict.fromkeys(ids))


async def batch_reprocess(
    ids: Sequence[str],
    *,
    preview: Callable[[str], Awaitable[ReprocessPreview]],
    reprocess: Callable[[str], Awaitable[ReprocessResult]],
) -> BatchReprocessResult:
    """Reprocess each of `ids` (see the module's docstring) with the single action's
    `preview` and `reprocess` of one run, bound to the caller's actor and tenant (another
    tenant's run is skipped as `run_not_found`, as the single action refuses it)."""
    reprocessed: list[ReprocessedRun] = []
    skipped: list[SkippedRun] = []
    warnings: dict[str, None] = {}
    breakers: dict[str, BreakerWarning] = {}
    for run_id in batch_ids(ids):
        try:
            seen = await preview(run_id)
            if seen.reprocessable and not seen.revived:
                skipped.append(_nothing_to_revive(run_id, seen.status))
                continue
            if seen.reprocessable and seen.reopened_run is not None:
                reopened, join = seen.reopened_run, seen.reopened_join
                skipped.append(
                    SkippedRun(
                        run_id=run_id,
                        reason=SkipReason.REOPENS_SUCCEEDED,
                        state=seen.status,
                        message=(
                            f"run {reopened} has SUCCEEDED: reprocessing would reopen its join "
                            f"{join!r} and run the steps after it again; reprocess run "
                            f"{run_id} alone if that is really wanted"
                        ),
                    )
                )
                continue
            done = await reprocess(run_id)
        except NotFound as missing:
            skipped.append(
                SkippedRun(run_id=run_id, reason=SkipReason.RUN_NOT_FOUND, message=missing.message)
            )
            continue
        except WrongState as refused:
            reason = _REFUSALS.get(refused.code)
            if reason is None:
                raise
            skipped.append(
                SkippedRun(
                    run_id=run_id, reason=reason, state=refused.state, message=refused.message
                )
            )
            continue
        if not done.changed:  # its dead letters were revived by someone else meanwhile
            skipped.append(_nothing_to_revive(run_id, done.status))
            continue
        reprocessed.append(ReprocessedRun(run_id=run_id, revived=done.revived, status=done.status))
        warnings.update(dict.fromkeys(done.warnings))
        for breaker in done.breakers:
            breakers.setdefault(breaker.message, breaker)
    return BatchReprocessResult(
        reprocessed=reprocessed,
        skipped=skipped,
        revived=sum(run.revived for run in reprocessed),
        warnings=list(warnings),
        breakers=list(breakers.values()),
    )


def _nothing_to_revive(run_id: str, status: str) -> SkippedRun:
    return SkippedRun(
        run_id=run_id,
        reason=SkipReason.NO_DEAD_LETTERS,
        state=status,
        message=f"run {run_id} has no dead-lettered children to run again",
    )
