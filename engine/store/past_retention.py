"""Runs past run retention, and why a retry, resolve or reprocess of them is refused: part of
`engine.store` (the operator actions read these in their transactions; docs/architecture.md,
'Run retention').

With `SCHEMABRIDGE_RUN_RETENTION_S` set, the workers' passes delete a root run that ended
before the cutoff (`cutoff`, the store's clock less the retention) with its whole tree,
children first and the root last, in bounded batches: a large tree goes across several
passes, a minute apart, and between them its root is still there, still ended, with only part
of its children. Reopening such a run (a retry, resolve or reprocess of the root or of a run
under it) would reopen a partial tree whose spawners count children that are gone, or race
the pass: so while retention is on, those actions refuse a run whose root ended before the
cutoff (409 `run_past_retention`). A start over makes a new run and stays allowed.

The check is a read in the action's own transaction, before it writes: a root past the
cutoff stays so until it is deleted (an action that would reopen it is refused by the same
check), so a later read could only find the same, or the root gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, false, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.children import ENDED_RUN_STATUSES
from engine.store.models import Run
from engine.store.operator_actions import chunks
from engine.store.restarts import root_of
from schemas.durations import duration
from schemas.errors import WrongState

runs = Run.__table__  # type: ignore[attr-defined]

PAST_RETENTION = "run_past_retention"
"""The code of the refusal (and a batch retry's skip reason)."""

RETENTION_SETTING = "SCHEMABRIDGE_RUN_RETENTION_S"


def cutoff(now: float, retention_s: float) -> float:
    """The end before which a root run is past `retention_s` at `now` (the store's clock):
    the workers' passes delete the trees of the roots that ended before it."""
    return now - retention_s


@dataclass(frozen=True)
class PastRetention:
    """The root `root_id` of a run (the run itself, or the root above it) ended at `ended_at`,
    before the cutoff of `retention_s` at `now`."""

    root_id: str
    ended_at: float
    now: float
    retention_s: float


async def past_retention(
    conn: AsyncConnection, rows: Iterable[Any], now: float, retention_s: float
) -> dict[str, PastRetention]:
    """For each run of `rows` (with `id` and `root_run_id`) whose root ended before the
    cutoff of `retention_s` at `now`, that root and when it ended; nothing while retention is
    off (`retention_s` 0). One read by primary key per `ID_CHUNK` roots."""
    if retention_s <= 0:
        return {}
    roots = {row.id: root_of(row) for row in rows}
    ended_before = cutoff(now, retention_s)
    ended: dict[str, float] = {}
    for chunk in chunks(sorted(set(roots.values()))):
        query = select(runs.c.id, runs.c.ended_at).where(
            runs.c.id.in_(chunk),
            runs.c.status.in_(ENDED_RUN_STATUSES),
            runs.c.ended_at < ended_before,
        )
        ended.update((str(row.id), float(row.ended_at)) for row in (await conn.execute(query)))
    return {
        run_id: PastRetention(root, ended[root], now, retention_s)
        for run_id, root in roots.items()
        if root in ended
    }


def past_retention_refusal(
    run_id: str, state: str, found: PastRetention, action: str
) -> WrongState:
    """The refusal of `action` ("retry", "resolve", "reprocess") on `run_id` (in `state`),
    whose root `found` names ended before run retention's cutoff. 409 `run_past_retention`,
    `details`: `state`, `rootRunId`, `endedAt`, `retentionS`."""
    ago = duration(found.now - found.ended_at)
    kept = f"past {RETENTION_SETTING} ({duration(found.retention_s)})"
    if found.root_id == run_id:
        which = f"run {run_id} ended {ago} ago, {kept}, and is being deleted"
        fix = "start it over to run its input again"
    else:
        which = (
            f"run {run_id} is under run {found.root_id}, which ended {ago} ago, {kept}, and "
            "is being deleted with its tree"
        )
        fix = f"start over run {found.root_id} to run its input again"
    refusal = WrongState(
        f"{which}: a {action} would reopen a tree that retention is deleting; {fix}",
        state=state,
        code=PAST_RETENTION,
    )
    refusal.details.update(
        rootRunId=found.root_id, endedAt=found.ended_at, retentionS=found.retention_s
    )
    return refusal


async def refuse_past_retention(
    conn: AsyncConnection, row: Any, now: float, retention_s: float, action: str
) -> None:
    """Refuse `action` on the run of `row` (`id`, `status`, `root_run_id`) when its root ended
    before retention's cutoff (nothing while retention is off)."""
    found = (await past_retention(conn, [row], now, retention_s)).get(row.id)
    if found is not None:
        raise past_retention_refusal(row.id, row.status, found, action)


def root_past_retention(
    run_id: ColumnElement[Any], root_run_id: ColumnElement[Any], ended_before: float | None
) -> ColumnElement[bool]:
    """True for a run (by its `id` and `root_run_id` columns) whose root ended before
    `ended_before` (None: retention off, never): an EXISTS on the runs' primary key, so a batch
    preview counts them in the statement that counts its runs."""
    if ended_before is None:
        return false()
    root = runs.alias()
    return (
        select(root.c.id)
        .where(
            root.c.id == func.coalesce(root_run_id, run_id),
            root.c.status.in_(ENDED_RUN_STATUSES),
            root.c.ended_at < ended_before,
        )
        .exists()
    )
