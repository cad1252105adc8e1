"""Run retention's statements: find the root runs that ended before a cutoff and delete each
with its whole tree (child runs at any depth, and every run's steps, log lines and payload
chunks), in bounded batches. Part of `engine.store` (`RunRetentionStore` calls it);
docs/architecture.md, 'Run retention'.

A tree goes children first and its root last, across as many transactions as it takes: a
batch that stops midway (a crash, the pass's bound) leaves a root that is still there and
still ended, which the next batch finds again and goes on with. A child run is never chosen
alone: only below a due root. Audit events are never deleted (they name runs as history).

A batch deletes only below marked roots: the first batch that takes a due root with runs
below it locks it (`FOR UPDATE SKIP LOCKED`) and marks it (`purge_started_at`), in its own
transaction and only while it is still ended with nothing under it running (a root alone is
locked and deleted in one transaction: nothing to mark). The operator actions that would
reopen a run refuse one whose root is marked (`engine.store.past_retention`), so a tree
partly deleted is never reopened, whatever the settings of the process that serves the
action. On PostgreSQL (READ COMMITTED) an action that read the root unmarked locks it after
its writes and reads the mark again (`restarts.lock_roots`, FOR KEY SHARE, which the batch's
FOR UPDATE conflicts with): either the batch locked the root first, and the action waits for
its commit, finds the mark and rolls back; or the action did, and the batch passes over the
root (SKIP LOCKED) and finds it reopened next time (the mark's conditions). SQLite runs one
writer at a time.

The runs a batch deletes are locked `FOR UPDATE SKIP LOCKED` too, so two workers purging at
once take different runs; a marked root is not locked until it is deleted, so they share a
large tree (its first batch, which marks it, takes it alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Exists, Select, delete, exists, func, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.children import ENDED_RUN_STATUSES
from engine.store.dialect import dialect_of
from engine.store.models import (
    Deployment,
    DeploymentStatus,
    Payload,
    Run,
    RunLog,
    RunStatus,
    Step,
)
from engine.store.records import RunsPurged

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]
payloads = Payload.__table__  # type: ignore[attr-defined]
deployments = Deployment.__table__  # type: ignore[attr-defined]
tree = runs.alias("tree")


def _tree_of(root_id: Any) -> list[Any]:
    """The conditions of the descendant runs (`tree`) of root `root_id`, as `ix_run_tree`
    holds them (its predicate spelled out, so SQLite uses the partial index)."""
    return [tree.c.parent_run_id.is_not(None), tree.c.root_run_id == root_id]


def _still_running_below(root_id: Any) -> Exists:
    """A descendant of `root_id` is RUNNING: its tree is not finished, and keeps every run."""
    return exists().where(*_tree_of(root_id), tree.c.status == RunStatus.RUNNING.value)


def _in_running_deployment() -> Exists:
    """The run (`run`) was created while a deployment of its workflow runs: that deployment's
    checks count it (`deployment_rows.version_counts`), so it stays until the deployment ends
    (a probe per root of the deployments of its workflow: SQLite's plan reads
    `ix_deployment_workflow_created`)."""
    return exists().where(
        deployments.c.status == DeploymentStatus.RUNNING.value,
        deployments.c.workflow_name == runs.c.workflow_name,
        deployments.c.created_at <= runs.c.created_at,
    )


def due_roots(ended_before: float) -> Select[Any]:
    """The root runs that ended (SUCCEEDED, FAILED, CANCELLED) before `ended_before`, with
    nothing of their tree still running and outside every running deployment's window.

    A run is created before it ends, so `created_at < ended_before` selects nothing the end
    would not; it lets the read walk an index of the roots by creation up to the cutoff
    (`ix_run_roots_created` in PostgreSQL's plan of the one-row probe, `any_due`;
    `ix_run_roots_status_created` in its plan of a batch and in SQLite's), the roots created
    before it that are still there: the due ones, and long or reopened runs that ended later
    (passed over; they are few)."""
    return select(runs.c.id).where(
        runs.c.parent_run_id.is_(None),
        runs.c.status.in_(ENDED_RUN_STATUSES),
        runs.c.created_at < ended_before,
        runs.c.ended_at < ended_before,
        ~_still_running_below(runs.c.id),
        ~_in_running_deployment(),
    )


async def any_due(conn: AsyncConnection, ended_before: float) -> bool:
    """Whether a root is due (a read: a pass with nothing to do writes nothing, and on SQLite
    takes no write lock)."""
    return (await conn.execute(due_roots(ended_before).limit(1))).first() is not None


async def _locked(conn: AsyncConnection, query: Select[Any], params: dict[str, Any]) -> list[str]:
    rows = await conn.execute(query, params)
    return [str(run_id) for run_id in rows.scalars()]


@dataclass(frozen=True)
class PurgeMark:
    """What marks the roots a batch takes: when (`at`, the store's clock) and by whose
    retention (`retention_s`; None: an operator's purge)."""

    at: float
    retention_s: float | None


def _still_ended_before(ended_before: float) -> list[Any]:
    """A root run (`run`) still ended before `ended_before`."""
    return [
        runs.c.parent_run_id.is_(None),
        runs.c.status.in_(ENDED_RUN_STATUSES),
        runs.c.ended_at < ended_before,
    ]


async def _take_roots(
    conn: AsyncConnection, due: Sequence[Any], ended_before: float, mark: PurgeMark
) -> list[str]:
    """Of the roots `due` (rows of `id` and `purge_started_at`, as the due read found them),
    those this batch deletes below: the ones already marked (a mark stays, and nothing
    reopens them, so they need no lock: two workers share their trees), and the others
    locked now (SKIP LOCKED: a root an action or another batch holds waits for a later
    batch) while still ended. Of those, a root with runs below is marked, only while nothing
    of its tree runs and no running deployment counts it (read under the lock, at
    PostgreSQL's latest commit: an action that reopened the tree since the due read keeps
    it); a root alone goes in this transaction or stays whole, and needs no mark."""
    one_of = dialect_of(conn).one_of
    still = _still_ended_before(ended_before)
    taken = [str(row.id) for row in due if row.purge_started_at is not None]
    fresh = [str(row.id) for row in due if row.purge_started_at is None]
    if not fresh:
        return taken
    unmarked = [one_of(runs.c.id, "b_fresh"), runs.c.purge_started_at.is_(None), *still]
    below = exists().where(*_tree_of(runs.c.id))
    locking = (
        select(runs.c.id, below.label("below"))
        .where(*unmarked)
        .order_by(runs.c.id)
        .with_for_update(of=runs, skip_locked=True)
    )
    locked = (await conn.execute(locking, {"b_fresh": fresh})).all()
    taken += [str(row.id) for row in locked if not row.below]
    trees = [str(row.id) for row in locked if row.below]
    if not trees:
        return taken
    marking = (
        update(runs)
        .where(*unmarked, ~_still_running_below(runs.c.id), ~_in_running_deployment())
        .values(purge_started_at=mark.at, purge_retention_s=mark.retention_s)
        .returning(runs.c.id)
    )
    marked = await conn.execute(marking, {"b_fresh": trees})
    return taken + [str(run_id) for run_id in marked.scalars()]


async def purge_batch(
    conn: AsyncConnection, ended_before: float, limit: int, mark: PurgeMark
) -> RunsPurged:
    """Delete, in the caller's transaction, up to `limit` runs of the due trees with their
    steps, log lines and payload chunks: descendants first, then the roots left without any.
    Only below roots this batch holds marked (`_take_roots`)."""
    dialect = dialect_of(conn)
    due_read = due_roots(ended_before).add_columns(runs.c.purge_started_at).limit(limit)
    due = (await conn.execute(due_read)).all()
    if not due:
        return RunsPurged()
    taken = await _take_roots(conn, due, ended_before, mark)
    if not taken:
        return RunsPurged()
    children = select(tree.c.id).where(
        tree.c.parent_run_id.is_not(None),
        dialect.one_of(tree.c.root_run_id, "b_roots"),
        tree.c.status.in_(ENDED_RUN_STATUSES),
    )
    child_ids = await _locked(
        conn,
        children.limit(limit).with_for_update(of=tree, skip_locked=True),
        {"b_roots": taken},
    )
    purged = await _delete_runs(conn, child_ids)
    left = limit - len(child_ids)
    if left <= 0:
        return purged
    # Our own deletions above are visible here: a small tree goes whole in one batch. Locked
    # again (a root marked earlier is not): two workers' batches take different roots.
    bare = select(runs.c.id).where(
        dialect.one_of(runs.c.id, "b_roots"), ~exists().where(*_tree_of(runs.c.id))
    )
    root_ids = await _locked(
        conn, bare.limit(left).with_for_update(of=runs, skip_locked=True), {"b_roots": taken}
    )
    return purged + await _delete_runs(conn, root_ids, roots=True)


async def _delete_runs(
    conn: AsyncConnection, run_ids: Sequence[str], *, roots: bool = False
) -> RunsPurged:
    """Delete the (locked) runs `run_ids` that are still ended, then every row keyed by the
    ids deleted. The run rows go first so that the check is the DELETE's own: a run it keeps
    keeps its steps and logs. (They are in trees whose root is marked, which nothing
    reopens: the check is a guard.)"""
    if not run_ids:
        return RunsPurged()
    one_of = dialect_of(conn).one_of
    still = [one_of(runs.c.id, "b_ids"), runs.c.status.in_(ENDED_RUN_STATUSES)]
    deleted = delete(runs).where(*still).returning(runs.c.id)
    gone = [str(i) for i in (await conn.execute(deleted, {"b_ids": list(run_ids)})).scalars()]
    if not gone:
        return RunsPurged()
    params = {"b_ids": gone}
    counts = [
        (await conn.execute(delete(table).where(one_of(table.c.run_id, "b_ids")), params)).rowcount
        for table in (steps, logs, payloads)
    ]
    return RunsPurged(
        roots=len(gone) if roots else 0,
        children=0 if roots else len(gone),
        steps=counts[0],
        log_lines=counts[1],
        payload_chunks=counts[2],
    )


async def count_due(conn: AsyncConnection, ended_before: float) -> RunsPurged:
    """What purging every tree due before `ended_before` would delete (a dry run: reads
    only, and as many rows as the trees hold)."""
    due = due_roots(ended_before).subquery("due")
    below = select(tree.c.id).where(
        tree.c.parent_run_id.is_not(None), tree.c.root_run_id.in_(select(due.c.id))
    )
    every = union_all(select(due.c.id), below).subquery("every_run")

    async def count(query: Select[Any]) -> int:
        return int((await conn.execute(query)).scalar_one())

    def rows_of(table: Any) -> Select[Any]:
        return select(func.count()).where(table.c.run_id.in_(select(every.c.id)))

    return RunsPurged(
        roots=await count(select(func.count()).select_from(due)),
        children=await count(select(func.count()).select_from(below.subquery())),
        steps=await count(rows_of(steps)),
        log_lines=await count(rows_of(logs)),
        payload_chunks=await count(rows_of(payloads)),
    )


async def runs_gone(conn: AsyncConnection, run_ids: Sequence[str]) -> set[str]:
    """Those of `run_ids` that no run row has."""
    if not run_ids:
        return set()
    query = select(runs.c.id).where(dialect_of(conn).one_of(runs.c.id, "b_ids"))
    found = {str(i) for i in (await conn.execute(query, {"b_ids": list(run_ids)})).scalars()}
    return set(run_ids) - found
