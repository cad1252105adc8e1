"""Runs whose tree is being deleted, and why a retry, resolve or reprocess of them is
refused: part of `engine.store` (the operator actions read these in their transactions;
docs/architecture.md, 'Run retention').

Run retention's passes (and `schemabridge runs purge`) delete a root run with its whole tree,
children first and the root last, in bounded batches: a large tree goes across several
transactions, and between them its root is still there, still ended, with only part of its
children. The first batch that takes a tree marks its root (`run.purge_started_at`, in its
own transaction, `engine.store.run_purge`). Reopening a run of a marked tree (a retry,
resolve or reprocess of the root or of a run under it) would reopen a partial tree whose
spawners count children that are gone: so those actions refuse it (409
`run_past_retention`), whatever the settings of the process that serves them. A start over
makes a new run and stays allowed.

Each action checks before it writes, and again once it has written, in the statement that
locks the root (`restarts.lock_roots`): a batch that marked the root meanwhile
either committed before that lock (the read finds its mark; the action rolls back and its
next try is refused) or finds the root locked and passes it over. A root not yet marked
may be reopened, however long ago it ended: the batch that would take it reads it under its
lock and leaves a reopened tree alone (it is no longer due).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

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
    """The root `root_id` of a run (the run itself, or the root above it), which ended at
    `ended_at`, is being deleted, by a worker's pass of run retention `retention_s` or by an
    operator's purge (None); `now` is the action's clock."""

    root_id: str
    ended_at: float
    now: float
    retention_s: float | None


async def _marked_roots(conn: AsyncConnection, roots: Iterable[str]) -> dict[str, Any]:
    """Of `roots`, those marked as being deleted, with `ended_at` and `purge_retention_s`.
    One read by primary key per `ID_CHUNK` roots."""
    marked: dict[str, Any] = {}
    for chunk in chunks(sorted(set(roots))):
        query = select(runs.c.id, runs.c.ended_at, runs.c.purge_retention_s).where(
            runs.c.id.in_(chunk), runs.c.purge_started_at.is_not(None)
        )
        marked.update((str(row.id), row) for row in await conn.execute(query))
    return marked


async def past_retention(
    conn: AsyncConnection, rows: Iterable[Any], now: float
) -> dict[str, PastRetention]:
    """For each run of `rows` (with `id` and `root_run_id`) whose root is marked as being
    deleted (`purge_started_at`), that root and when it ended. Read before the action
    writes: a marked root is still ended (nothing reopens it)."""
    roots = {row.id: root_of(row) for row in rows}
    marked = await _marked_roots(conn, roots.values())
    return {
        run_id: PastRetention(
            root, float(marked[root].ended_at), now, marked[root].purge_retention_s
        )
        for run_id, root in roots.items()
        if root in marked
    }


def finishing_purge(ended_at: float) -> str:
    """The `runs purge` that finishes deleting a tree whose root ended at `ended_at`: its
    cutoff is the next whole second, so it takes no root the stopped purge (whose cutoff was
    later still) would not have taken. Nothing else finishes a tree an operator's purge
    marked when the workers keep no retention, or a longer one."""
    cutoff = datetime.fromtimestamp(math.floor(ended_at) + 1, UTC)
    return f"`schemabridge runs purge --ended-before {cutoff:%Y-%m-%dT%H:%M:%SZ}`"


def past_retention_refusal(
    run_id: str, state: str, found: PastRetention, action: str
) -> WrongState:
    """The refusal of `action` ("retry", "resolve", "reprocess") on `run_id` (in `state`),
    whose root `found` names is being deleted. 409 `run_past_retention`, `details`: `state`,
    `rootRunId`, `endedAt`, `retentionS` (None: an operator's `schemabridge runs purge` is
    deleting it)."""
    ago = duration(found.now - found.ended_at)
    finish = ""
    if found.retention_s is None:
        kept, deleting = "purged by an operator (`schemabridge runs purge`)", "a purge is"
        finish = (
            f" (if that purge stopped before the end, {finishing_purge(found.ended_at)} ends it)"
        )
    else:
        kept = f"past {RETENTION_SETTING} ({duration(found.retention_s)})"
        deleting = "retention is"
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
        f"{which}: a {action} would reopen a tree that {deleting} deleting; {fix}{finish}",
        state=state,
        code=PAST_RETENTION,
        run_id=run_id,
    )
    refusal.details.update(
        rootRunId=found.root_id, endedAt=found.ended_at, retentionS=found.retention_s
    )
    return refusal


async def refuse_past_retention(conn: AsyncConnection, row: Any, now: float, action: str) -> None:
    """Refuse `action` on the run of `row` (`id`, `status`, `root_run_id`) when its root is
    being deleted. Called before the action writes (`restarts.lock_roots` reads the mark
    again at its end)."""
    found = (await past_retention(conn, [row], now)).get(row.id)
    if found is not None:
        raise past_retention_refusal(row.id, row.status, found, action)


def root_past_retention(
    run_id: ColumnElement[Any], root_run_id: ColumnElement[Any]
) -> ColumnElement[bool]:
    """True for a run (by its `id` and `root_run_id` columns) whose root is being deleted: an
    EXISTS on the runs' primary key, so a batch preview counts them in the statement that
    counts its runs."""
    root = runs.alias()
    return (
        select(root.c.id)
        .where(
            root.c.id == func.coalesce(root_run_id, run_id),
            root.c.purge_started_at.is_not(None),
        )
        .exists()
    )
