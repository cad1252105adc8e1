"""Dead letters and reprocessing: part of `engine.store` (called only from there).

A child run that ends FAILED is a dead letter (`dlq_at`). Reprocessing a run revives its dead
letters as new attempts of the same child runs (ids and keys unchanged), and then, in the same
transaction, puts everything they affect back in a consistent state:

* down the tree — a revived child that failed because its own children failed (a nested
  fan-out) would only fail again, so its dead letters are revived too, recursively;
* the join — the revived children are taken off their spawner's counters; a join that had
  closed opens again (the spawner PARKED, everything after it PENDING) and a run that had
  ended at it runs again;
* up the tree — when the reprocessed run was itself a child that had ended (FAILED, or
  SUCCEEDED with tolerated failures), its parent's counters no longer count it, the parent's
  join reopens and the parent resumes, and so on up to the root, so no ancestor counts a child
  twice when it ends again.

An operator's retry or resolve of a dead letter itself comes back the same way from below
(`reopen_parents`), one counter update per spawner for a whole batch of its children.

A join that reopens after it had closed runs the steps after it again, calls included, and a
run that had SUCCEEDED runs again: `reprocess` answers each join it reopened
(`JoinReopened`), and `engine.store.reprocess_plan` tells the same before anything is done,
by the rules below (`join_reopens`, `ran_before`, `resumes`) applied to what it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.models import DONE_STEP_STATUSES, Run, RunStatus, Step, StepStatus
from schemas.counts import plural
from schemas.definitions import SpawnerVertex, Workflow

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]

MAX_DEPTH = 16
"""How deep reprocessing follows nested fan-outs, down and up."""

WorkflowOfRun = Callable[[str], Awaitable[Workflow]]
WorkflowOfVersion = Callable[[str, int], Awaitable[Workflow]]
_DONE = frozenset(s.value for s in DONE_STEP_STATUSES)
_ENDED = frozenset({RunStatus.FAILED.value, RunStatus.SUCCEEDED.value})


@dataclass(frozen=True)
class JoinReopened:
    """A spawner whose join a reprocess reopens (or would): the run, and what runs again."""

    run_id: str
    spawner: str
    workflow: Workflow
    """The run's workflow (what the steps of `again` are)."""
    again: tuple[str, ...] = ()
    """The steps after the spawner that had ended and run again (the join itself included):
    a GATEWAY among them sends its call a second time."""
    ended: str | None = None
    """The status the run had ended with when it runs again because of this (SUCCEEDED: a
    finished run reopens); None when it was still going, or stays ended."""
    ancestor: bool = False
    """An ancestor's join, reopened because the reprocessed run below it runs again (else
    the reprocessed run's own, or a nested fan-out's under it)."""


@dataclass(frozen=True)
class Reprocessed:
    revived: int
    """Child runs that run again, nested ones included."""
    reopened: tuple[JoinReopened, ...] = ()
    """The joins reopened: under the run first (nested fan-outs after their parent's), then
    up the tree, the run's parent first."""
    children: tuple[str, ...] = ()
    """The ids of the `revived` child runs (each gets a line in its log); a plan's
    (`reprocess_plan`) leaves it empty."""


def revived_words(count: int) -> str:
    """`count` dead-lettered children with their verb, as every reprocess says them ("1
    dead-lettered child runs", "2,001 dead-lettered children run"); "again" follows."""
    return plural(count, "dead-lettered child runs", "dead-lettered children run")


async def reprocess(
    conn: AsyncConnection,
    run_id: str,
    now: float,
    workflow_of: WorkflowOfRun,
    version_of: WorkflowOfVersion,
) -> Reprocessed:
    """Revive the dead letters under `run_id` and reopen what they affect (see the module
    docstring). Answers how many child runs run again and the joins that reopened.
    `workflow_of` reads a run's workflow; `version_of` a published version's (cached: children
    share a few versions)."""
    tree = _Tree(conn, now, workflow_of, version_of)
    revived, previous = await tree.revive_below(run_id, depth=0)
    if revived:
        await _reopen_ancestors(conn, run_id, previous, now, workflow_of, found=tree.reopened)
    return Reprocessed(revived, tuple(tree.reopened), tuple(tree.children))


def passes_up(previous: str | None) -> bool:
    """Whether a run that runs again, having ended as `previous` (None: it was going), makes
    its parent's spawner stop counting it, which may reopen that join in turn."""
    return previous in _ENDED


def join_reopens(spawner_status: str) -> bool:
    """Whether children coming back reopen their spawner's join: one that had closed
    (SUCCEEDED) opens again, one that FAILED runs again; one still going only counts."""
    return spawner_status in {StepStatus.SUCCEEDED.value, StepStatus.FAILED.value}


def ran_before(workflow: Workflow, spawner_id: str, statuses: Mapping[str, str]) -> tuple[str, ...]:
    """The steps after `spawner_id` that had ended (`statuses`: vertex → status before) and
    run again when its closed join reopens."""
    return tuple(v for v in descendants(workflow, spawner_id) if statuses.get(v) in _DONE)


def resumes(status: str, failed_at: str | None, reopened: Sequence[str]) -> bool:
    """Whether a run that was `status` (FAILED at `failed_at`) runs again once the vertices
    `reopened` are open again: one that SUCCEEDED does, one that FAILED at one of them does."""
    return status == RunStatus.SUCCEEDED.value or (
        status == RunStatus.FAILED.value and failed_at in reopened
    )


@dataclass
class _Tree:
    conn: AsyncConnection
    now: float
    workflow_of: WorkflowOfRun
    version_of: WorkflowOfVersion
    reopened: list[JoinReopened] = field(default_factory=list)
    children: list[str] = field(default_factory=list)

    async def revive_below(self, run_id: str, *, depth: int) -> tuple[int, str | None]:
        """(children revived under `run_id`, the status `run_id` ended with if resumed)."""
        rows = await revive_dead_letters(self.conn, run_id, self.now)
        if not rows:
            return 0, None
        self.children += sorted(row.id for row in rows)
        workflow = await self.workflow_of(run_id)
        reopened: list[str] = []
        joins: list[JoinReopened] = []
        for spawner_id, count in sorted(Counter(row.parent_vertex_id for row in rows).items()):
            again = await reopen_join(self.conn, run_id, workflow, spawner_id, failed=count)
            if again is not None:
                reopened += [spawner_id, *descendants(workflow, spawner_id)]
                joins.append(JoinReopened(run_id, spawner_id, workflow, again))
        mark = len(self.reopened)
        revived = len(rows)
        if depth < MAX_DEPTH:
            for row in sorted(rows, key=lambda r: r.id):
                # Only a child that fans out itself can have dead letters of its own: one
                # query per such child, none for the usual leaf children.
                child = await self.version_of(row.workflow_name, row.workflow_version)
                if any(isinstance(v, SpawnerVertex) for v in child.vertices.values()):
                    below, _ = await self.revive_below(row.id, depth=depth + 1)
                    revived += below
        previous = await resume_run(self.conn, run_id, reopened, self.now)
        # This run's joins before those of the children under it, which were found first.
        self.reopened[mark:mark] = [replace(join, ended=previous) for join in joins]
        return revived, previous


async def _reopen_ancestors(
    conn: AsyncConnection,
    run_id: str,
    previous: str | None,
    now: float,
    workflow_of: WorkflowOfRun,
    *,
    found: list[JoinReopened] | None = None,
) -> None:
    """`run_id` ended as `previous` and runs again: its parent must stop counting it. The
    joins this reopens up the tree are added to `found`, when given."""
    child = run_id
    for _ in range(MAX_DEPTH):
        if not passes_up(previous):
            return
        row = (
            await conn.execute(
                select(runs.c.parent_run_id, runs.c.parent_vertex_id).where(runs.c.id == child)
            )
        ).one()
        if row.parent_run_id is None:
            return
        parent, spawner_id = row.parent_run_id, row.parent_vertex_id
        workflow = await workflow_of(parent)
        again = await reopen_join(
            conn,
            parent,
            workflow,
            spawner_id,
            failed=int(previous == RunStatus.FAILED.value),
            succeeded=int(previous == RunStatus.SUCCEEDED.value),
        )
        reopened = [] if again is None else [spawner_id, *descendants(workflow, spawner_id)]
        previous = await resume_run(conn, parent, reopened, now)
        if again is not None and found is not None:
            found.append(JoinReopened(parent, spawner_id, workflow, again, previous, True))
        child = parent


async def reopen_parents(
    conn: AsyncConnection,
    children: Sequence[Any],
    now: float,
    workflow_of: WorkflowOfRun,
    *,
    found: list[JoinReopened] | None = None,
) -> list[tuple[str, str, int]]:
    """Child runs that had ended FAILED run again because an operator retried or resolved
    them directly (rows with `parent_run_id` and `parent_vertex_id`; others are ignored): their
    spawners stop counting them as failed, joins that had closed reopen and the parents
    resume, and so on up to the root, as reprocessing does from above. One counter update per
    spawner, however many of its children run again. Returns (parent, spawner, children) for
    each spawner whose parent resumes: the caller says in the parent's log what reopened it.
    Every join this reopens, the parents' and those further up, is added to `found` when it
    is given (`ancestor` set: each is above the runs acted on), with the steps that run again."""
    per_parent: dict[str, Counter[str]] = {}
    for row in children:
        if row.parent_run_id is not None:
            per_parent.setdefault(row.parent_run_id, Counter())[row.parent_vertex_id] += 1
    resumed: list[tuple[str, str, int]] = []
    for parent, spawners in sorted(per_parent.items()):
        workflow = await workflow_of(parent)
        reopened: list[str] = []
        joins: list[JoinReopened] = []
        for spawner_id, count in sorted(spawners.items()):
            again = await reopen_join(conn, parent, workflow, spawner_id, failed=count)
            if again is not None:
                reopened += [spawner_id, *descendants(workflow, spawner_id)]
                resumed.append((parent, spawner_id, count))
                joins.append(JoinReopened(parent, spawner_id, workflow, again, ancestor=True))
        previous = await resume_run(conn, parent, reopened, now)
        if found is not None:
            found += [replace(join, ended=previous) for join in joins]
        await _reopen_ancestors(conn, parent, previous, now, workflow_of, found=found)
    return resumed


def descendants(workflow: Workflow, vertex_id: str) -> list[str]:
    """Every vertex downstream of `vertex_id`, in document order."""
    found: set[str] = set()
    frontier = [vertex_id]
    for _ in range(len(workflow.vertices)):
        if not frontier:
            break
        frontier = [d for v in frontier for d in workflow.dependants(v) if d not in found]
        found.update(frontier)
    return [v for v in workflow.vertices if v in found]


def running_again(now: float) -> dict[str, Any]:
    """The columns of a run an operator's action (or a child's) makes run again: RUNNING, its
    error, end and dead letter cleared, started anew at `now`, so that its duration is its
    latest run's, not the time it sat FAILED before the action. Every reopening writes these
    (`operator_actions.reopen_failed_runs`, `resume_resolved_run`, `revive_dead_letters`,
    `resume_run`)."""
    return {
        "status": RunStatus.RUNNING.value,
        "error": None,
        "started_at": now,
        "ended_at": None,
        "dlq_at": None,
    }


def ready_again(now: float) -> dict[str, Any]:
    """The columns of a FAILED step an operator's action makes run again: READY, its error
    and end cleared, redispatches and the tenant item anew, attempts kept, and its start
    cleared, so the next claim stamps its own (the claim keeps a start it finds, for a
    redispatch): its duration is then its latest execution's, not the time it sat FAILED
    before the action (the attempts keep their own times). A retry's
    (`operator_actions.ready_failed_steps`) and a reprocess's (`revive_dead_letters`)."""
    return {
        "status": StepStatus.READY.value,
        "error": None,
        "started_at": None,
        "ended_at": None,
        "not_before": now,
        "auto_retries": 0,
        "tenant_item_taken": False,
    }


async def revive_dead_letters(conn: AsyncConnection, run_id: str, now: float) -> list[Any]:
    """Dead-lettered children of `run_id` run again: same run ids and keys; their FAILED steps
    and the steps held back when they failed become READY. Returns (id, parent_vertex_id,
    workflow_name, workflow_version) of each revived child. The status guard in the UPDATE
    makes concurrent reprocess calls revive each child once."""
    revived = list(
        (
            await conn.execute(
                update(runs)
                .where(
                    runs.c.parent_run_id == run_id,
                    runs.c.status == RunStatus.FAILED.value,
                    runs.c.dlq_at.is_not(None),
                )
                .values(running_again(now))
                .returning(
                    runs.c.id,
                    runs.c.parent_vertex_id,
                    runs.c.workflow_name,
                    runs.c.workflow_version,
                )
            )
        ).all()
    )
    ids = sorted(row.id for row in revived)
    if ids:
        await conn.execute(
            update(steps)
            .where(steps.c.run_id.in_(ids), steps.c.status == StepStatus.FAILED.value)
            .values(ready_again(now))
        )
        await release_held(conn, ids, now)
    return revived


HELD = (steps.c.status == StepStatus.PENDING.value) & (steps.c.deps_pending == 0)
"""A step held back: PENDING with no dependency left, which only a stopped run's steps are."""


async def release_held(
    conn: AsyncConnection, run_ids: Sequence[str], now: float
) -> dict[str, list[str]]:
    """Steps held back while their runs were stopped become READY, and the runs, reopened,
    say when (`reopened_at`: the reaper looks at them again for a while, see
    `WorkQueue.release_stranded`). Returns their vertex ids, by run (a retry says how many)."""
    ids = list(run_ids)
    await conn.execute(update(runs).where(runs.c.id.in_(ids)).values(reopened_at=now))
    rows = await conn.execute(
        update(steps)
        .where(steps.c.run_id.in_(ids), HELD)
        # What such a step waited for (a redispatch written after its run stopped) is stale.
        .values(status=StepStatus.READY.value, not_before=now, wait_reason=None, wait_message=None)
        .returning(steps.c.run_id, steps.c.vertex_id)
    )
    released: dict[str, list[str]] = {}
    for row in rows.all():
        released.setdefault(row.run_id, []).append(row.vertex_id)
    return released


async def reopen_join(
    conn: AsyncConnection,
    run_id: str,
    workflow: Workflow,
    spawner_id: str,
    *,
    failed: int = 0,
    succeeded: int = 0,
) -> tuple[str, ...] | None:
    """Take children that run again off the spawner's counters (`failed` that had failed,
    `succeeded` that had succeeded). If its join had closed (SUCCEEDED) open it again: the
    spawner goes back to PARKED and everything downstream to PENDING. A spawner that FAILED
    runs again (it re-attaches its children). A spawner still creating or waiting only needs
    the counters. Returns None when the join stays as it was, else the steps after the
    spawner that had ended and run again (`ran_before`; none for a FAILED spawner): the run
    must resume."""
    row = (
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == spawner_id)
            .values(
                children_failed=steps.c.children_failed - failed,
                children_succeeded=steps.c.children_succeeded - succeeded,
            )
            .returning(steps.c.status)
        )
    ).one()
    if not join_reopens(row.status):
        return None
    if row.status == StepStatus.FAILED.value:
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == spawner_id)
            .values(status=StepStatus.PENDING.value, error=None, ended_at=None)
        )
        return ()
    statuses = {
        r.vertex_id: r.status
        for r in await conn.execute(
            select(steps.c.vertex_id, steps.c.status).where(steps.c.run_id == run_id)
        )
    }
    reset = [spawner_id, *descendants(workflow, spawner_id)]
    again = ran_before(workflow, spawner_id, statuses)
    undone = 1 + len(again)  # the spawner, SUCCEEDED, and the steps after it that had ended
    await conn.execute(
        update(steps)
        .where(steps.c.run_id == run_id, steps.c.vertex_id == spawner_id)
        .values(status=StepStatus.PARKED.value, output=None, ended_at=None, error=None)
    )
    for vertex_id in reset[1:]:
        # Every dependency not done after the reset still has to finish first.
        pending = [
            d
            for d in set(workflow.vertices[vertex_id].depends_on)
            if d in reset or statuses.get(d) not in _DONE
        ]
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == vertex_id)
            .values(
                status=StepStatus.PENDING.value,
                deps_pending=len(pending),
                output=None,
                error=None,
                # Its next claim stamps its start (see `ready_again`): its duration is then
                # the new execution's, not one from its first run to the end of this one.
                started_at=None,
                ended_at=None,
                claim_token=None,
                claimed_by=None,
                lease_expires_at=None,
                # It runs again from the start: redispatches and its tenant item anew.
                auto_retries=0,
                tenant_item_taken=False,
            )
        )
    await conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(steps_remaining=runs.c.steps_remaining + undone)
    )
    return again


async def resume_run(
    conn: AsyncConnection, run_id: str, reopened: Sequence[str], now: float
) -> str | None:
    """A run that ended — SUCCEEDED, or FAILED at one of the `reopened` vertices — runs again;
    its steps held back while it was stopped become READY. Returns the status it ended with
    when it was resumed (None when it was running, or stays ended)."""
    row = (await conn.execute(select(runs.c.status, runs.c.error).where(runs.c.id == run_id))).one()
    resumable = resumes(row.status, (row.error or {}).get("vertexId"), reopened)
    if resumable:
        await conn.execute(
            update(runs).where(runs.c.id == run_id).values(running_again(now) | {"output": None})
        )
    if resumable or row.status == RunStatus.RUNNING.value:
        await release_held(conn, [run_id], now)
    return str(row.status) if resumable else None
