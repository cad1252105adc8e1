"""What a retry would set off beyond the runs it names: part of `engine.store` (the retry of
`actions_store` reads these in its transaction, before it changes anything).

* A FAILED child run that is retried comes back into its parent's join (`recovery.
  reopen_parents`): a parent that had ended runs again from that join, and so on up. When the
  ancestor that reopens had ended SUCCEEDED (its MERGE tolerated the failure), its finished
  work after the join runs a second time: `succeeded_ancestors` finds that ancestor, so a
  batch can leave such children alone and a single retry can say what it reopened.
* A run whose MERGE failed because children FAILED fails again at once when retried, since
  those children are still FAILED: `stuck_joins` finds such joins, so the answer can say to
  reprocess the run instead; and so does one whose MERGE failed on children an operator
  CANCELLED, which nothing runs again (the join's error counts them, `childrenCancelled`):
  the answer then says to resolve the join or start the run over. `stuck_runs` reads the
  same rule as one grouped statement over a batch's runs, so its preview can say how many of
  them would be stuck.
* A run that failed for a cause the workflow or its input makes (`FIX_FIRST_KINDS`) fails the
  same way when retried, the same version running on the same input: `fix_first_runs` finds
  such runs among a batch's, so its preview can say to fix the workflow first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Exists, Subquery, case, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.models import Run, RunStatus, Step, StepStatus
from engine.store.operator_actions import JoinBlock, StuckJoins, chunks, run_states
from engine.store.recovery import MAX_DEPTH
from schemas.definitions import MergeVertex, Workflow
from schemas.errors import FIX_FIRST_KINDS, FailureKind

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]


async def succeeded_ancestors(conn: AsyncConnection, rows: Sequence[Any]) -> dict[str, Any]:
    """For each run of `rows` (as `run_states` reads them) that a retry would carry up to an
    ancestor that had ended SUCCEEDED: (that ancestor's id, the spawner of it the chain comes
    through). A retried child reopens its parent's join when the parent has ended; a parent
    that ended FAILED passes the reopening up to its own parent, one still running stops it.
    One query per level of nesting, whatever the number of runs."""
    found: dict[str, Any] = {}
    # run retried -> (the spawner the chain enters the ancestor by, the ancestor)
    frontier = {row.id: (row.parent_vertex_id, row.parent_run_id) for row in rows}
    frontier = {run_id: up for run_id, up in frontier.items() if up[1] is not None}
    for _ in range(MAX_DEPTH):
        if not frontier:
            break
        states = await run_states(conn, sorted({ancestor for _, ancestor in frontier.values()}))
        above: dict[str, tuple[str, str]] = {}
        for run_id, (spawner, ancestor) in frontier.items():
            row = states.get(ancestor)
            if row is None:
                continue
            if row.status == RunStatus.SUCCEEDED.value:
                found[run_id] = (ancestor, spawner)
            elif row.status == RunStatus.FAILED.value and row.parent_run_id is not None:
                above[run_id] = (row.parent_vertex_id, row.parent_run_id)
        frontier = above
    return found


def under_succeeded(parent_run_id: ColumnElement[Any]) -> Exists:
    """True for a run (by its `parent_run_id` column) whose parent has ended SUCCEEDED: its
    retry would reopen that run's join (`succeeded_ancestors`' first level). One EXISTS on
    the parent's row, a primary-key read, so a preview counts the children a batch would
    skip in the statement that counts its runs. The walk's further levels (a FAILED parent
    under a SUCCEEDED run, only under a join that tolerated a nested failure) are not
    followed: nesting the test per level makes a statement PostgreSQL plans out of memory
    and SQLite cannot parse."""
    parent = runs.alias()
    return exists().where(
        parent.c.id == parent_run_id, parent.c.status == RunStatus.SUCCEEDED.value
    )


def join_of(workflow: Workflow, spawner_id: str) -> str:
    """The MERGE that joins `spawner_id`'s children (the spawner itself when none does)."""
    merges = [
        vertex
        for vertex in workflow.dependants(spawner_id)
        if isinstance(workflow.vertices[vertex], MergeVertex)
    ]
    return merges[0] if merges else spawner_id


async def stuck_joins(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, StuckJoins]:
    """The runs among `run_ids` with a FAILED MERGE that failed because children FAILED (with
    those joins and how many of the run's children are FAILED: its spawners' count) or were
    CANCELLED (as many as the joins' errors counted)."""
    joins: dict[str, list[str]] = {}
    failed_children: dict[str, int] = {}
    cancelled_children: dict[str, int] = {}
    fix_first: dict[str, str] = {}
    for chunk in chunks(run_ids):
        rows = await conn.execute(
            select(
                steps.c.run_id,
                steps.c.vertex_id,
                steps.c.status,
                steps.c.error,
                steps.c.children_failed,
            )
            .where(
                steps.c.run_id.in_(chunk),
                or_(steps.c.status == StepStatus.FAILED.value, steps.c.children_failed > 0),
            )
            .order_by(steps.c.run_id, steps.c.vertex_id)
        )
        for row in rows.all():
            failed_children[row.run_id] = failed_children.get(row.run_id, 0) + (
                row.children_failed or 0
            )
            error = row.error or {}
            failed_join = error.get("kind") == FailureKind.CHILD_FAILURES
            if row.status == StepStatus.FAILED.value and failed_join:
                joins.setdefault(row.run_id, []).append(row.vertex_id)
                cancelled = error.get("childrenCancelled")
                if isinstance(cancelled, int) and cancelled > 0:
                    cancelled_children[row.run_id] = (
                        cancelled_children.get(row.run_id, 0) + cancelled
                    )
                cause = error.get("childCause") or {}
                if cause.get("kind") in FIX_FIRST_KINDS:
                    fix_first[row.run_id] = str(cause["kind"])
    return {
        run_id: StuckJoins(
            vertices,
            failed_children.get(run_id, 0),
            fix_first.get(run_id),
            cancelled_children.get(run_id, 0),
        )
        for run_id, vertices in joins.items()
        if failed_children.get(run_id, 0) > 0 or cancelled_children.get(run_id, 0) > 0
    }


async def stuck_runs(conn: AsyncConnection, newest: Subquery) -> dict[str, JoinBlock]:
    """The runs of `newest` (`listing.newest_matching`'s rows) whose joins would fail again
    at once if retried, by `stuck_joins`' rule: a FAILED step that failed on children
    (`child_failures`), and FAILED children counted on the run's spawners or CANCELLED ones
    counted in that error. Run id to what keeps the join failing (CANCELLED children first,
    which nothing runs again; then a failed join's `childCause` in `FIX_FIRST_KINDS`, which a
    reprocess repeats), newest run first. One grouped statement over those runs' FAILED
    steps and spawners, so a preview of 10,000 runs reads no run alone."""
    error = steps.c.error
    failed_join = (steps.c.status == StepStatus.FAILED.value) & (
        error["kind"].as_string() == FailureKind.CHILD_FAILURES.value
    )
    repeated = failed_join & error[("childCause", "kind")].as_string().in_(sorted(FIX_FIRST_KINDS))
    cancelled = failed_join & (func.coalesce(error["childrenCancelled"].as_integer(), 0) > 0)
    rows = await conn.execute(
        select(
            newest.c.id,
            func.max(case((repeated, 1), else_=0)).label("repeated"),
            func.max(case((cancelled, 1), else_=0)).label("cancelled"),
        )
        .select_from(newest.join(steps, steps.c.run_id == newest.c.id))
        .where(or_(failed_join, steps.c.children_failed > 0))
        .group_by(newest.c.id, newest.c.created_at)
        .having(
            func.max(case((failed_join, 1), else_=0)) == 1,
            or_(
                func.sum(func.coalesce(steps.c.children_failed, 0)) > 0,
                func.max(case((cancelled, 1), else_=0)) == 1,
            ),
        )
        .order_by(newest.c.created_at.desc(), newest.c.id.desc())
    )
    return {row.id: _block(row.cancelled, row.repeated) for row in rows.all()}


def _block(cancelled: int, repeated: int) -> JoinBlock:
    if cancelled:
        return JoinBlock.CANCELLED_CHILDREN
    return JoinBlock.FIX_FIRST if repeated else JoinBlock.FAILED_CHILDREN


async def fix_first_runs(conn: AsyncConnection, newest: Subquery) -> dict[str, str]:
    """The runs of `newest` (`listing.newest_matching`'s rows) with a FAILED step whose error
    kind the workflow or the input causes (`FIX_FIRST_KINDS`): its own kind, or, for a join
    that failed on children, their commonest one (`childCause`, which `runs show` and the
    monitor lead with too). Run id to that kind (a run's first such step by vertex id),
    newest run first. One statement over those runs' FAILED steps, the kinds read in the
    database rather than every error loaded."""
    error = steps.c.error
    kind = error["kind"].as_string()
    cause = error[("childCause", "kind")].as_string()
    fix_first = sorted(FIX_FIRST_KINDS)
    rows = await conn.execute(
        select(newest.c.id, kind.label("kind"), cause.label("cause"))
        .select_from(newest.join(steps, steps.c.run_id == newest.c.id))
        .where(
            steps.c.status == StepStatus.FAILED.value,
            or_(kind.in_(fix_first), cause.in_(fix_first)),
        )
        .order_by(newest.c.created_at.desc(), newest.c.id.desc(), steps.c.vertex_id)
    )
    found: dict[str, str] = {}
    for row in rows.all():
        if row.id not in found:
            found[row.id] = row.kind if row.kind in FIX_FIRST_KINDS else row.cause
    return found
