"""Run retention's statements: find the root runs that ended before a cutoff and delete each
with its whole tree (child runs at any depth, and every run's steps, log lines and payload
chunks), in bounded batches. Part of `engine.store` (`RunRetentionStore` calls it);
docs/architecture.md, 'Run retention'.

A tree goes children first and its root last, across as many transactions as it takes: a
batch that stops midway (a crash, the pass's bound) leaves a root that is still there and
still ended, which the next batch finds again and goes on with. A child run is never chosen
alone: only below a due root. Audit events are never deleted (they name runs as history).

Concurrency, as for payloads (`children.choose_expired_payloads`): the runs a batch deletes
are locked `FOR UPDATE SKIP LOCKED`, so two workers purging at once take different runs (on
SQLite writers take turns), and at that lock PostgreSQL reads each run's latest row: a run an
operator reopened (Retry, Resolve, Reprocess set it RUNNING) after the due read is passed over,
and a child is taken only while its root is still ended before the cutoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Exists, Select, delete, exists, func, select, union_all
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
root = runs.alias("root")


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


def _root_still_due(root_id: Any, ended_before: float) -> Exists:
    """The root `root_id` (a child's `root_run_id`) is still ended before `ended_before`."""
    return exists().where(
        root.c.id == root_id,
        root.c.status.in_(ENDED_RUN_STATUSES),
        root.c.ended_at < ended_before,
    )


async def _locked(conn: AsyncConnection, query: Select[Any], params: dict[str, Any]) -> list[str]:
    rows = await conn.execute(query, params)
    return [str(run_id) for run_id in rows.scalars()]


async def purge_batch(conn: AsyncConnection, ended_before: float, limit: int) -> RunsPurged:
    """Delete, in the caller's transaction, up to `limit` runs of the due trees with their
    steps, log lines and payload chunks: descendants first, then the roots left without any."""
    dialect = dialect_of(conn)
    due = (await conn.execute(due_roots(ended_before).limit(limit))).scalars().all()
    if not due:
        return RunsPurged()
    children = select(tree.c.id).where(
        tree.c.parent_run_id.is_not(None),
        dialect.one_of(tree.c.root_run_id, "b_roots"),
        tree.c.status.in_(ENDED_RUN_STATUSES),
        _root_still_due(tree.c.root_run_id, ended_before),
    )
    child_ids = await _locked(
        conn,
        children.limit(limit).with_for_update(of=tree, skip_locked=True),
        {"b_roots": list(due)},
    )
    purged = await _delete_runs(conn, child_ids, ended_before, roots=False)
    left = limit - len(child_ids)
    if left <= 0:
        return purged
    # Our own deletions above are visible here: a small tree goes whole in one batch.
    bare = select(runs.c.id).where(
        dialect.one_of(runs.c.id, "b_roots"),
        runs.c.parent_run_id.is_(None),
        runs.c.status.in_(ENDED_RUN_STATUSES),
        runs.c.ended_at < ended_before,
        ~exists().where(*_tree_of(runs.c.id)),
    )
    root_ids = await _locked(
        conn, bare.limit(left).with_for_update(of=runs, skip_locked=True), {"b_roots": list(due)}
    )
    return purged + await _delete_runs(conn, root_ids, ended_before, roots=True)


async def _delete_runs(
    conn: AsyncConnection, run_ids: Sequence[str], ended_before: float, *, roots: bool
) -> RunsPurged:
    """Delete the (locked) runs `run_ids` that are still ended (a child: with its root still
    due), then every row keyed by the ids deleted. The run rows go first so that the check is
    the DELETE's own: a run it keeps keeps its steps and logs."""
    if not run_ids:
        return RunsPurged()
    one_of = dialect_of(conn).one_of
    still = [one_of(runs.c.id, "b_ids"), runs.c.status.in_(ENDED_RUN_STATUSES)]
    if roots:
        still.append(runs.c.ended_at < ended_before)
    else:
        still.append(_root_still_due(runs.c.root_run_id, ended_before))
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
