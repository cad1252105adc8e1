"""What a reprocess would do, read without doing it: part of `engine.store` (the preview of
`actions_store.OperatorActionsStore.reprocess_preview`).

It walks the tree `recovery.reprocess` walks — the run's dead letters, the nested fan-outs
under them, then up the ancestors — reading what the reprocess reads and applying the same
rules (`recovery.join_reopens`, `ran_before`, `resumes`, `passes_up`) to a copy of the steps'
statuses instead of writing them. So it answers what the reprocess would answer, in the same
shape (`recovery.Reprocessed`): the children revived, the joins reopened with the steps after
them that had ended and run again, and the runs that had ended and run again. Dead letters are
counted per spawner in one grouped read; only children that fan out themselves are read one
by one, as the reprocess does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.models import RunStatus, StepStatus
from engine.store.recovery import (
    MAX_DEPTH,
    JoinReopened,
    Reprocessed,
    WorkflowOfRun,
    WorkflowOfVersion,
    descendants,
    join_reopens,
    passes_up,
    ran_before,
    resumes,
    runs,
    steps,
)
from schemas.definitions import SpawnerVertex, Workflow

DEAD = (runs.c.status == RunStatus.FAILED.value) & runs.c.dlq_at.is_not(None)
"""A dead letter, as `recovery.revive_dead_letters` picks them."""


async def plan(
    conn: AsyncConnection,
    run_id: str,
    workflow_of: WorkflowOfRun,
    version_of: WorkflowOfVersion,
) -> Reprocessed:
    """What `recovery.reprocess(conn, run_id, …)` would answer now, changing nothing."""
    walk = _Walk(conn, workflow_of, version_of)
    revived, previous = await walk.below(run_id, revived=False, depth=0)
    if revived:
        await walk.above(run_id, previous)
    return Reprocessed(revived, tuple(walk.reopened))


@dataclass
class _Walk:
    conn: AsyncConnection
    workflow_of: WorkflowOfRun
    version_of: WorkflowOfVersion
    reopened: list[JoinReopened] = field(default_factory=list)

    async def below(self, run_id: str, *, revived: bool, depth: int) -> tuple[int, str | None]:
        """(children that would be revived under `run_id`, the status `run_id` ended with if
        it would resume); `revived`: `run_id` is itself a dead letter being revived."""
        groups = (
            await self.conn.execute(
                select(
                    runs.c.parent_vertex_id,
                    runs.c.workflow_name,
                    runs.c.workflow_version,
                    func.count(),
                )
                .where(runs.c.parent_run_id == run_id, DEAD)
                .group_by(runs.c.parent_vertex_id, runs.c.workflow_name, runs.c.workflow_version)
            )
        ).all()
        if not groups:
            return 0, None
        workflow = await self.workflow_of(run_id)
        statuses = await _statuses(self.conn, run_id)
        if revived:  # its FAILED steps become READY before its joins are looked at
            statuses = {
                v: StepStatus.READY.value if s == StepStatus.FAILED.value else s
                for v, s in statuses.items()
            }
        reopened: list[str] = []
        joins: list[JoinReopened] = []
        for spawner_id in sorted({row[0] for row in groups}):
            again = _reopen(workflow, spawner_id, statuses)
            if again is not None:
                reopened += [spawner_id, *descendants(workflow, spawner_id)]
                joins.append(JoinReopened(run_id, spawner_id, workflow, again))
        mark = len(self.reopened)
        count = sum(int(row[3]) for row in groups)
        if depth < MAX_DEPTH:
            for child_id in await self._fanning_children(run_id, groups):
                below, _ = await self.below(child_id, revived=True, depth=depth + 1)
                count += below
        previous = None
        if not revived:  # a revived child is RUNNING: it resumes nothing
            row = await _run(self.conn, run_id)
            if resumes(row.status, (row.error or {}).get("vertexId"), reopened):
                previous = str(row.status)
        self.reopened[mark:mark] = [
            JoinReopened(j.run_id, j.spawner, j.workflow, j.again, previous) for j in joins
        ]
        return count, previous

    async def _fanning_children(self, run_id: str, groups: Sequence[Any]) -> list[str]:
        """The dead letters of `run_id` whose workflow fans out itself (they may have dead
        letters of their own), by id as the reprocess takes them."""
        found: list[str] = []
        for spawner_id, name, version, _ in groups:
            child = await self.version_of(name, version)
            if any(isinstance(v, SpawnerVertex) for v in child.vertices.values()):
                rows = await self.conn.execute(
                    select(runs.c.id).where(
                        runs.c.parent_run_id == run_id,
                        runs.c.parent_vertex_id == spawner_id,
                        runs.c.workflow_name == name,
                        runs.c.workflow_version == version,
                        DEAD,
                    )
                )
                found += [row.id for row in rows]
        return sorted(found)

    async def above(self, run_id: str, previous: str | None) -> None:
        """The ancestors' joins `run_id` running again would reopen (`recovery.
        _reopen_ancestors`' walk)."""
        if not passes_up(previous):
            return
        row = await _run(self.conn, run_id)
        for _ in range(MAX_DEPTH):
            if row.parent_run_id is None:
                return
            parent, spawner_id = row.parent_run_id, row.parent_vertex_id
            workflow = await self.workflow_of(parent)
            again = _reopen(workflow, spawner_id, await _statuses(self.conn, parent))
            reopened = [] if again is None else [spawner_id, *descendants(workflow, spawner_id)]
            # The parent's row decides here whether it resumes, and is the next level's child.
            row = await _run(self.conn, parent)
            ended = (row.error or {}).get("vertexId")
            previous = str(row.status) if resumes(row.status, ended, reopened) else None
            if again is not None:
                self.reopened.append(
                    JoinReopened(parent, spawner_id, workflow, again, previous, ancestor=True)
                )
            if not passes_up(previous):
                return


def _reopen(
    workflow: Workflow, spawner_id: str, statuses: dict[str, str]
) -> tuple[str, ...] | None:
    """`recovery.reopen_join` on `statuses` (changed as it would change the steps): None when
    the join stays as it is, else the steps after it that had ended and run again."""
    status = statuses.get(spawner_id, "")
    if not join_reopens(status):
        return None
    if status == StepStatus.FAILED.value:
        statuses[spawner_id] = StepStatus.PENDING.value
        return ()
    again = ran_before(workflow, spawner_id, statuses)
    statuses[spawner_id] = StepStatus.PARKED.value
    for vertex_id in descendants(workflow, spawner_id):
        statuses[vertex_id] = StepStatus.PENDING.value
    return again


async def _statuses(conn: AsyncConnection, run_id: str) -> dict[str, str]:
    rows = await conn.execute(
        select(steps.c.vertex_id, steps.c.status).where(steps.c.run_id == run_id)
    )
    return {row.vertex_id: row.status for row in rows}


async def _run(conn: AsyncConnection, run_id: str) -> Any:
    return (
        await conn.execute(
            select(
                runs.c.status, runs.c.error, runs.c.parent_run_id, runs.c.parent_vertex_id
            ).where(runs.c.id == run_id)
        )
    ).one()
