"""Claiming ready steps: part of `engine.store` (called only from there).

One claim is one atomic statement (see the `engine.store.queue` docstring). It reads the step table
alone, in index order: a step is READY only while its run is RUNNING (a run that fails or is
cancelled holds its READY steps back as PENDING, see `engine.store.results`), so the claim needs
no join and its plan cannot degrade into a scan of every READY row. Across tenants claims are
round-robin, not FIFO: a tenant with a 50,000-child fan-out must not make another tenant's
single step wait behind it. Each claim first lists the tenants that have READY steps with a
skip scan of the partial index `ix_step_ready_tenant` (a recursive CTE that jumps from one
tenant to the next: O(tenants · log n), not a scan of the READY rows), then claims an equal
share for each, oldest run first within a tenant, and fills whatever the shares left unused
from all tenants, oldest first, so a lone busy tenant still gets full batches.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import cast, func, literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select
from sqlalchemy.types import String

from engine.store.models import Run, Step, StepStatus
from engine.store.records import ClaimedStep

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]

MAX_TENANTS_PER_CLAIM = 64
TENANT_LIST_TTL_S = 0.25
"""How long a claimer reuses the list of tenants with READY steps."""

TENANTS_WITH_READY_STEPS = text(
    """
    WITH RECURSIVE tenants(tenant_id, n) AS (
        SELECT (SELECT MIN(tenant_id) FROM step WHERE status = 'READY'), 1
        UNION ALL
        SELECT (SELECT MIN(s.tenant_id) FROM step s
                WHERE s.status = 'READY' AND s.tenant_id > tenants.tenant_id), n + 1
        FROM tenants
        WHERE tenants.tenant_id IS NOT NULL AND n < :max_tenants
    )
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL
    """
)


def _claim_statement(
    now: float, limit: int, lease_s: float, batch: str, tenant_id: str | None
) -> Any:
    candidates: Select[Any] = (
        select(steps.c.id)
        .where(steps.c.status == StepStatus.READY.value, steps.c.not_before <= now)
        .order_by(steps.c.created_at, steps.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=steps)
    )
    if tenant_id is not None:
        candidates = candidates.where(steps.c.tenant_id == tenant_id)
    return (
        update(steps)
        .where(steps.c.id.in_(candidates.scalar_subquery()))
        .values(
            status=StepStatus.RUNNING.value,
            claim_token=literal(batch) + cast(steps.c.id, String),
            lease_expires_at=now + lease_s,
            attempts=steps.c.attempts + 1,
            started_at=func.coalesce(steps.c.started_at, now),
            # It runs: whatever it waited for is over (docs/architecture.md, 'Why a step waits').
            wait_reason=None,
            wait_message=None,
        )
        .returning(
            steps.c.id,
            steps.c.run_id,
            steps.c.vertex_id,
            steps.c.tenant_id,
            steps.c.claim_token,
            steps.c.attempts,
            steps.c.auto_retries,
            steps.c.tenant_item_taken,
        )
    )


async def ready_tenants(conn: AsyncConnection) -> list[str]:
    """Tenants that have READY steps (at most MAX_TENANTS_PER_CLAIM), by the skip scan."""
    rows = await conn.execute(TENANTS_WITH_READY_STEPS, {"max_tenants": MAX_TENANTS_PER_CLAIM})
    return [row.tenant_id for row in rows]


async def claim_rows(
    conn: AsyncConnection,
    now: float,
    limit: int,
    lease_s: float,
    batch: str,
    *,
    tenants: list[str],
) -> list[Any]:
    """Claim up to `limit` due steps, shared fairly among `tenants` (those with READY steps,
    as recently seen), then filled from all tenants oldest first."""
    claimed: list[Any] = []
    if len(tenants) > 1:
        share = max(1, math.ceil(limit / len(tenants)))
        for tenant_id in tenants:
            wanted = min(share, limit - len(claimed))
            if wanted <= 0:
                break
            statement = _claim_statement(now, wanted, lease_s, batch, tenant_id)
            claimed += (await conn.execute(statement)).all()
    if len(claimed) < limit:
        statement = _claim_statement(now, limit - len(claimed), lease_s, batch, None)
        claimed += (await conn.execute(statement)).all()
    return claimed


async def hold(conn: AsyncConnection, step_ids: list[int]) -> None:
    """Put claimed steps of stopped runs back to PENDING (claim cleared, attempt undone)."""
    await conn.execute(
        update(steps)
        .where(steps.c.id.in_(step_ids))
        .values(
            status=StepStatus.PENDING.value,
            claim_token=None,
            lease_expires_at=None,
            attempts=steps.c.attempts - 1,
        )
    )


async def run_rows(conn: AsyncConnection, run_ids: set[str]) -> dict[str, Any]:
    """What executing a claimed step needs from its run, by run id."""
    query = select(
        runs.c.id,
        runs.c.workflow_name,
        runs.c.workflow_version,
        runs.c.timeout_tier,
        runs.c.input,
        runs.c.parent_run_id,
        runs.c.parent_vertex_id,
        runs.c.root_run_id,
        runs.c.item_index,
        runs.c.item,
        runs.c.status,
        runs.c.pinned_versions,
    ).where(runs.c.id.in_(sorted(run_ids)))
    return {row.id: row for row in (await conn.execute(query)).all()}


def claimed_step(row: Any, run: Any, outputs: dict[str, dict[str, Any]]) -> ClaimedStep:
    """A claimed step row and its run's row as the record a worker executes."""
    return ClaimedStep(
        step_id=row.id,
        claim_token=row.claim_token,
        run_id=row.run_id,
        vertex_id=row.vertex_id,
        tenant_id=row.tenant_id,
        attempts=row.attempts,
        auto_retries=row.auto_retries,
        workflow_name=run.workflow_name,
        workflow_version=run.workflow_version,
        timeout_tier=run.timeout_tier,
        run_input=run.input,
        outputs=outputs.get(row.run_id, {}),
        parent_run_id=run.parent_run_id,
        parent_vertex_id=run.parent_vertex_id,
        root_run_id=run.root_run_id,
        item_index=run.item_index,
        item=run.item,
        tenant_item_taken=row.tenant_item_taken,
        pinned_versions=run.pinned_versions,
    )
