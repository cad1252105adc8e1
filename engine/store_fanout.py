"""Fan-out statements of the store: child creation, the join counters, merges, dead letters,
payloads and quotas. Part of `engine.store` (it is only called from there and from
`engine.fanout`'s port over the store); split out to keep modules small.

Child identity. A child's idempotency key is `<parent run>/<spawner vertex>/<item index>` and
its run id is the UUIDv5 of that key. The key column is UNIQUE and children are inserted with
`ON CONFLICT DO NOTHING … RETURNING id`, so two deliveries of the same spawner racing each
other each create only the children the other has not: the database closes the window that a
look-up-before-insert leaves open. Steps are inserted only for the runs this statement created.

Join counters. Each child's end adds 1 to a counter on its spawner's step, in the transaction
that ends the child (grouped per spawner within a batch). The row lock serialises concurrent
ends, so exactly one transaction sees the counts that close the join and flips the spawner
from PARKED to SUCCEEDED (`WHERE status = 'PARKED'`); the MERGE then becomes READY once.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.models import (
    DONE_STEP_STATUSES,
    DestinationCap,
    Payload,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TenantQuota,
)
from engine.records import ChildRow, ClaimedStep, VersionRecord
from schemas.definitions import MergeConfig, MergeVertex, Workflow
from vertices import merge

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
payloads = Payload.__table__  # type: ignore[attr-defined]
quotas = TenantQuota.__table__  # type: ignore[attr-defined]
caps = DestinationCap.__table__  # type: ignore[attr-defined]

CHILD_ID_NAMESPACE = uuid.UUID("6f1d3c1e-5b8a-4c44-9a57-2f0b8f5e8a10")


@dataclass(frozen=True)
class EndedChild:
    parent_run_id: str
    parent_vertex_id: str
    status: str


def child_key(parent_run_id: str, vertex_id: str, index: int) -> str:
    return f"{parent_run_id}/{vertex_id}/{index}"


def child_run_id(key: str) -> str:
    return str(uuid.uuid5(CHILD_ID_NAMESPACE, key))


# ── the join ────────────────────────────────────────────────────────────────────────────────


def group_ended(children: Sequence[EndedChild]) -> dict[tuple[str, str], Counter[str]]:
    grouped: dict[tuple[str, str], Counter[str]] = {}
    for child in children:
        grouped.setdefault((child.parent_run_id, child.parent_vertex_id), Counter())[
            child.status
        ] += 1
    return grouped


_COUNTER_COLUMNS = (
    steps.c.status,
    steps.c.children_total,
    steps.c.children_succeeded,
    steps.c.children_failed,
    steps.c.children_cancelled,
)


async def add_to_counters(
    conn: AsyncConnection, run_id: str, vertex_id: str, counts: Counter[str]
) -> Any:
    statement = (
        update(steps)
        .where(steps.c.run_id == run_id, steps.c.vertex_id == vertex_id)
        .values(
            children_succeeded=steps.c.children_succeeded + counts["SUCCEEDED"],
            children_failed=steps.c.children_failed + counts["FAILED"],
            children_cancelled=steps.c.children_cancelled + counts["CANCELLED"],
        )
        .returning(*_COUNTER_COLUMNS)
    )
    return (await conn.execute(statement)).first()


async def read_counters(conn: AsyncConnection, run_id: str, vertex_id: str) -> Any:
    statement = select(*_COUNTER_COLUMNS).where(
        steps.c.run_id == run_id, steps.c.vertex_id == vertex_id
    )
    return (await conn.execute(statement)).one()


def counts_of(row: Any) -> merge.ChildCounts:
    return merge.ChildCounts(
        total=row.children_total or 0,
        succeeded=row.children_succeeded,
        failed=row.children_failed,
        cancelled=row.children_cancelled,
    )


def merge_config_for(workflow: Workflow, spawner_vertex_id: str) -> MergeConfig:
    """The config of the MERGE that joins `spawner_vertex_id` (defaults when it has none)."""
    for vertex in workflow.vertices.values():
        if isinstance(vertex, MergeVertex) and spawner_vertex_id in vertex.depends_on:
            return vertex.config
    return MergeConfig()


def join_may_close(counts: merge.ChildCounts) -> bool:
    """Cheap pre-check before reading the merge's config: while children are still running,
    only a failure (failFast) can close a join."""
    return counts.ended >= counts.total or counts.failed + counts.cancelled > 0


def join_closes(workflow: Workflow, spawner_vertex_id: str, counts: merge.ChildCounts) -> bool:
    config = merge_config_for(workflow, spawner_vertex_id)
    return merge.join_state(config, counts) is merge.JoinState.CLOSED


async def close_join(
    conn: AsyncConnection, run_id: str, vertex_id: str, counts: merge.ChildCounts, now: float
) -> bool:
    """Flip the spawner from PARKED to SUCCEEDED; True for the one caller that did it."""
    statement = (
        update(steps)
        .where(
            steps.c.run_id == run_id,
            steps.c.vertex_id == vertex_id,
            steps.c.status == StepStatus.PARKED.value,
        )
        .values(status=StepStatus.SUCCEEDED.value, output=counts.as_dict(), ended_at=now)
    )
    return (await conn.execute(statement)).rowcount == 1


# ── creating children ───────────────────────────────────────────────────────────────────────


async def existing_children(conn: AsyncConnection, run_id: str, vertex_id: str) -> int:
    statement = (
        select(func.count())
        .select_from(runs)
        .where(runs.c.parent_run_id == run_id, runs.c.parent_vertex_id == vertex_id)
    )
    return int((await conn.execute(statement)).scalar_one())


async def claim_is_live(conn: AsyncConnection, step: ClaimedStep, total: int) -> bool:
    """Record the fan-out size on the spawner step; False when our claim is gone."""
    statement = (
        update(steps)
        .where(
            steps.c.id == step.step_id,
            steps.c.claim_token == step.claim_token,
            steps.c.status == StepStatus.RUNNING.value,
        )
        .values(children_total=total)
    )
    return (await conn.execute(statement)).rowcount == 1


def _insert_runs_ignoring_duplicates(dialect: str) -> Any:
    module = postgresql if dialect == "postgresql" else sqlite
    return (
        module.insert(runs)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(runs.c.id)
    )


async def insert_children(
    conn: AsyncConnection,
    *,
    dialect: str,
    parent: ClaimedStep,
    child: VersionRecord,
    batch: Sequence[ChildRow],
    step_rows: Callable[[str], list[dict[str, Any]]],
    now: float,
) -> int:
    """Create the children in `batch` that do not exist yet; returns how many were created."""
    rows = []
    for spec in batch:
        key = child_key(parent.run_id, parent.vertex_id, spec.index)
        rows.append(
            {
                "id": child_run_id(key),
                "workflow_name": child.name,
                "workflow_version": child.version,
                "definition_hash": child.definition_hash,
                "tenant_id": parent.tenant_id,
                "status": RunStatus.RUNNING.value,
                "timeout_tier": "process",
                "input": spec.input,
                "item": spec.item,
                "output": None,
                "error": None,
                "steps_remaining": len(child.workflow.vertices),
                "created_at": now,
                "started_at": now,
                "ended_at": None,
                "idempotency_key": key,
                "parent_run_id": parent.run_id,
                "parent_vertex_id": parent.vertex_id,
                "item_index": spec.index,
                "root_run_id": parent.root_run_id or parent.run_id,
                "restarted_from": None,
                "dlq_at": None,
            }
        )
    if not rows:
        return 0
    result = await conn.execute(_insert_runs_ignoring_duplicates(dialect), rows)
    created = [row.id for row in result.all()]
    if created:
        await conn.execute(insert(steps), [r for run_id in created for r in step_rows(run_id)])
        await conn.execute(
            update(quotas)
            .where(quotas.c.tenant_id == parent.tenant_id)
            .values(used_runs=quotas.c.used_runs + len(created))
        )
    return len(created)


async def running_children(conn: AsyncConnection, run_id: str) -> int:
    """Children of `run_id` with a step claimed right now."""
    statement = (
        select(func.count(func.distinct(steps.c.run_id)))
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(runs.c.parent_run_id == run_id, steps.c.status == StepStatus.RUNNING.value)
    )
    return int((await conn.execute(statement)).scalar_one())


async def children_outputs(
    conn: AsyncConnection, run_id: str, vertex_id: str, *, after_index: int = -1, limit: int
) -> list[tuple[int, str, Any]]:
    """(item index, status, output) of up to `limit` children after `after_index`, in item
    order (keyset pagination on the parent/item index)."""
    statement = (
        select(runs.c.item_index, runs.c.status, runs.c.output)
        .where(
            runs.c.parent_run_id == run_id,
            runs.c.parent_vertex_id == vertex_id,
            runs.c.item_index > after_index,
        )
        .order_by(runs.c.item_index)
        .limit(limit)
    )
    return [(r.item_index, r.status, r.output) for r in (await conn.execute(statement)).all()]


# ── payloads and quotas ─────────────────────────────────────────────────────────────────────


async def put_payload(
    conn: AsyncConnection, run_id: str, *, ref: str, chunk: int, data: Any, now: float
) -> None:
    size = len(json.dumps(data, separators=(",", ":")))
    await conn.execute(
        insert(payloads).values(
            run_id=run_id, ref=ref, chunk=chunk, size_bytes=size, data=data, created_at=now
        )
    )


async def get_payload(conn: AsyncConnection, ref: str) -> Any:
    """The payload `ref`: one chunk as stored, several chunks concatenated (lists)."""
    rows = (
        await conn.execute(
            select(payloads.c.data).where(payloads.c.ref == ref).order_by(payloads.c.chunk)
        )
    ).all()
    if not rows:
        return None
    if len(rows) == 1:
        return rows[0].data
    return [element for row in rows for element in row.data]


async def delete_payload(conn: AsyncConnection, ref: str) -> None:
    await conn.execute(payloads.delete().where(payloads.c.ref == ref))


async def payload_bytes(conn: AsyncConnection) -> int:
    result = await conn.execute(select(func.coalesce(func.sum(payloads.c.size_bytes), 0)))
    return int(result.scalar_one())


async def quota_left(conn: AsyncConnection, tenant_id: str) -> int | None:
    row = (
        await conn.execute(
            select(quotas.c.max_runs, quotas.c.used_runs).where(quotas.c.tenant_id == tenant_id)
        )
    ).first()
    return None if row is None else max(0, row.max_runs - row.used_runs)


async def set_quota(conn: AsyncConnection, dialect: str, tenant_id: str, max_runs: int) -> None:
    module = postgresql if dialect == "postgresql" else sqlite
    statement = module.insert(quotas).values(tenant_id=tenant_id, max_runs=max_runs, used_runs=0)
    await conn.execute(
        statement.on_conflict_do_update(index_elements=["tenant_id"], set_={"max_runs": max_runs})
    )


async def upsert_caps(
    conn: AsyncConnection,
    dialect: str,
    *,
    destination: str,
    max_concurrency: int,
    rate_per_second: float | None,
    now: float,
) -> None:
    module = postgresql if dialect == "postgresql" else sqlite
    values = {
        "max_concurrency": max_concurrency,
        "rate_per_second": rate_per_second,
        "updated_at": now,
    }
    statement = module.insert(caps).values(destination=destination, **values)
    await conn.execute(statement.on_conflict_do_update(index_elements=["destination"], set_=values))


async def read_caps(conn: AsyncConnection, destination: str) -> tuple[int, float | None] | None:
    row = (
        await conn.execute(
            select(caps.c.max_concurrency, caps.c.rate_per_second).where(
                caps.c.destination == destination
            )
        )
    ).first()
    return None if row is None else (row.max_concurrency, row.rate_per_second)


async def list_caps(conn: AsyncConnection) -> list[tuple[str, int, float | None]]:
    rows = await conn.execute(
        select(caps.c.destination, caps.c.max_concurrency, caps.c.rate_per_second).order_by(
            caps.c.destination
        )
    )
    return [(r.destination, r.max_concurrency, r.rate_per_second) for r in rows.all()]


# ── dead letters ────────────────────────────────────────────────────────────────────────────


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


async def revive_dead_letters(conn: AsyncConnection, run_id: str, now: float) -> list[Any]:
    """Dead-lettered children of `run_id` run again: same run ids and keys; their FAILED steps
    and the steps held back when they failed become READY. Returns (id, parent_vertex_id) of
    each revived child. The status guard in the UPDATE makes concurrent reprocess calls
    revive each child once."""
    revived = list(
        (
            await conn.execute(
                update(runs)
                .where(
                    runs.c.parent_run_id == run_id,
                    runs.c.status == RunStatus.FAILED.value,
                    runs.c.dlq_at.is_not(None),
                )
                .values(status=RunStatus.RUNNING.value, dlq_at=None, error=None, ended_at=None)
                .returning(runs.c.id, runs.c.parent_vertex_id)
            )
        ).all()
    )
    ids = sorted(row.id for row in revived)
    if ids:
        await conn.execute(
            update(steps)
            .where(steps.c.run_id.in_(ids), steps.c.status == StepStatus.FAILED.value)
            .values(status=StepStatus.READY.value, error=None, ended_at=None, auto_retries=0)
        )
        await release_held(conn, ids, now)
    return revived


async def release_held(conn: AsyncConnection, run_ids: Sequence[str], now: float) -> None:
    """Steps held back (PENDING with no dependency left) while their runs were stopped become
    READY."""
    await conn.execute(
        update(steps)
        .where(
            steps.c.run_id.in_(list(run_ids)),
            steps.c.status == StepStatus.PENDING.value,
            steps.c.deps_pending == 0,
        )
        .values(status=StepStatus.READY.value, not_before=now)
    )


async def reopen_join(
    conn: AsyncConnection, run_id: str, workflow: Workflow, spawner_id: str, revived: int
) -> bool:
    """Take `revived` failures off the spawner's counters. If its join had closed (SUCCEEDED)
    open it again: the spawner goes back to PARKED and everything downstream to PENDING. A
    spawner that FAILED runs again (it re-attaches its children). A spawner still creating or
    waiting only needs the counters. Returns True when the run must resume."""
    row = (
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == spawner_id)
            .values(children_failed=steps.c.children_failed - revived)
            .returning(steps.c.status)
        )
    ).one()
    if row.status == StepStatus.FAILED.value:
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == spawner_id)
            .values(status=StepStatus.PENDING.value, error=None, ended_at=None)
        )
        return True
    if row.status != StepStatus.SUCCEEDED.value:
        return False
    statuses = {
        r.vertex_id: r.status
        for r in await conn.execute(
            select(steps.c.vertex_id, steps.c.status).where(steps.c.run_id == run_id)
        )
    }
    done = {s.value for s in DONE_STEP_STATUSES}
    reset = [spawner_id, *descendants(workflow, spawner_id)]
    undone = sum(1 for v in reset if statuses.get(v) in done)
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
            if d in reset or statuses.get(d) not in done
        ]
        await conn.execute(
            update(steps)
            .where(steps.c.run_id == run_id, steps.c.vertex_id == vertex_id)
            .values(
                status=StepStatus.PENDING.value,
                deps_pending=len(pending),
                output=None,
                error=None,
                ended_at=None,
                claim_token=None,
                lease_expires_at=None,
            )
        )
    await conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(steps_remaining=runs.c.steps_remaining + undone)
    )
    return True


async def resume_run(
    conn: AsyncConnection, run_id: str, reopened: Sequence[str], now: float
) -> None:
    """A run that ended — SUCCEEDED, or FAILED at one of the `reopened` vertices — runs again;
    its steps held back while it was stopped become READY."""
    row = (await conn.execute(select(runs.c.status, runs.c.error).where(runs.c.id == run_id))).one()
    failed_at = (row.error or {}).get("vertexId")
    resumable = row.status == RunStatus.SUCCEEDED.value or (
        row.status == RunStatus.FAILED.value and failed_at in reopened
    )
    if resumable:
        await conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(
                status=RunStatus.RUNNING.value,
                error=None,
                output=None,
                ended_at=None,
                dlq_at=None,
            )
        )
    if resumable or row.status == RunStatus.RUNNING.value:
        await release_held(conn, [run_id], now)
