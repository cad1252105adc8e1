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
from all tenants, oldest first, so a lone busy tenant still gets full batches. The list holds
at most MAX_TENANTS_PER_CLAIM tenants; `TenantRing` makes the lists and the claims take
turns, so that the tenants beyond the first 64 are served too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Float, bindparam, cast, func, literal, select, text, true, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select
from sqlalchemy.types import BigInteger, String, Text

from engine.store.dialect import SQLITE, Dialect, dialect_of
from engine.store.models import Run, RunStatus, Step, StepStatus
from engine.store.records import ClaimedStep
from schemas.errors import BreakerOpening

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]

MAX_TENANTS_PER_CLAIM = 64
TENANT_LIST_TTL_S = 0.25
"""How long a claimer reuses the list of tenants with READY steps."""

CLAIM_TOKEN_SEPARATOR = ":"
"""A claim token is `<batch>:<step id>`: the claim's batch id (random, one per claim
statement) then the id of the step, so that the rows of live claims are found by primary key
(`claimed_step_ids`) instead of among every RUNNING step of the cluster."""


def new_batch() -> str:
    """The first part of the claim tokens one claim statement hands out."""
    return uuid.uuid4().hex[:16] + CLAIM_TOKEN_SEPARATOR


def claimed_step_ids(tokens: Iterable[str]) -> list[int]:
    """The step ids that claim `tokens` name, in order; a token that names none (not made by
    `new_batch`) is left out, and so can match no step."""
    ids = []
    for token in tokens:
        _, separator, step_id = token.rpartition(CLAIM_TOKEN_SEPARATOR)
        # ASCII digits that fit a BIGINT ('²'.isdigit() is true too).
        if separator and step_id.isascii() and step_id.isdigit() and len(step_id) <= 18:
            ids.append(int(step_id))
    return ids


TENANTS_WITH_READY_STEPS = text(
    """
    WITH RECURSIVE tenants(tenant_id, n) AS (
        SELECT (SELECT MIN(tenant_id) FROM step
                WHERE status = 'READY' AND tenant_id > COALESCE(CAST(:after AS VARCHAR), '')), 1
        UNION ALL
        SELECT (SELECT MIN(s.tenant_id) FROM step s
                WHERE s.status = 'READY' AND s.tenant_id > tenants.tenant_id), n + 1
        FROM tenants
        WHERE tenants.tenant_id IS NOT NULL AND n < :max_tenants
    )
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL
    """
)


STEP_COLUMNS = (
    steps.c.id,
    steps.c.run_id,
    steps.c.vertex_id,
    steps.c.tenant_id,
    steps.c.claim_token,
    steps.c.attempts,
    steps.c.auto_retries,
    steps.c.tenant_item_taken,
    # The error of its last redispatch: a breaker refusal names the opening it was counted
    # under (`ClaimedStep.breaker_opening`). Null for nearly every step, so cheap to return.
    steps.c.error,
)
"""What a claim returns of each step it claimed."""


def _claim_update(candidates: Any) -> Any:
    """Claim the steps whose ids `candidates` selects (locked, skipping locked rows)."""
    return (
        update(steps)
        .where(steps.c.id.in_(candidates))
        .values(
            status=StepStatus.RUNNING.value,
            # `<batch>:<step id>`: the batch from `new_batch`, the id `claimed_step_ids` reads.
            claim_token=bindparam("b_batch", type_=String) + cast(steps.c.id, String),
            lease_expires_at=bindparam("b_lease_until", type_=Float),
            # Who holds it, for an operator reading a RUNNING step: one more bound value in
            # the same statement, not a statement of its own.
            claimed_by=bindparam("b_worker", type_=Text),
            attempts=steps.c.attempts + 1,
            started_at=func.coalesce(steps.c.started_at, bindparam("b_now", type_=Float)),
            # It runs: whatever it waited for is over (docs/architecture.md, 'Why a step waits').
            wait_reason=None,
            wait_message=None,
        )
        .returning(*STEP_COLUMNS)
    )


def _due(table: Any) -> Select[Any]:
    """The ids of `table`'s due READY steps, oldest first, locked, skipping locked rows."""
    # 'READY' written into the SQL, not bound: the partial indexes (`status = 'READY'`) then
    # serve a generic plan too, should PostgreSQL switch to one for the prepared statement.
    ready = literal(StepStatus.READY.value, literal_execute=True)
    return (
        select(table.c.id)
        .where(table.c.status == ready, table.c.not_before <= bindparam("b_now", type_=Float))
        .order_by(table.c.created_at, table.c.id)
        .with_for_update(skip_locked=True, of=table)
    )


# The claim statements are built once, their values bound at each claim (`claim_params`):
# building and hashing one per claim cost a worker more than executing it when claims are
# small and frequent (submitted runs arriving one at a time).

FILL = _claim_update(_due(steps).limit(bindparam("b_limit")).scalar_subquery())
"""Up to `b_limit` due steps of any tenant, oldest first."""

TENANT_SHARE = _claim_update(
    _due(steps)
    .where(steps.c.tenant_id == bindparam("b_tenant"))
    .limit(bindparam("b_limit"))
    .scalar_subquery()
)
"""Up to `b_limit` due steps of tenant `b_tenant`."""


def _shares() -> Any:
    tenant = (
        func.unnest(bindparam("b_tenants", type_=ARRAY(String)))
        .table_valued("tenant_id")
        .render_derived(name="t")
    )
    ready = steps.alias("s")
    mine = _due(ready).where(ready.c.tenant_id == tenant.c.tenant_id)
    picked = mine.limit(bindparam("b_limit")).lateral("picked")
    candidates = select(picked.c.id).select_from(tenant.join(picked, true()))
    return _claim_update(candidates.scalar_subquery())


SHARES = _shares()
"""PostgreSQL: up to `b_limit` due steps of each tenant of `b_tenants` in one statement (a
LATERAL subquery per tenant) instead of one statement per tenant: with 64 busy tenants a claim
was 65 round trips, holding its locks all along (bench/claims.py)."""


def claim_params(
    now: float, lease_s: float, batch: str, limit: int, worker: str | None = None
) -> dict[str, Any]:
    """The values a claim statement takes (`b_tenant` / `b_tenants` added for the shares);
    `worker`: the claimer's service id, recorded as the steps' `claimed_by`."""
    return {
        "b_now": now,
        "b_lease_until": now + lease_s,
        "b_batch": batch,
        "b_limit": limit,
        "b_worker": worker,
    }


async def ready_tenants(conn: AsyncConnection, after: str | None = None) -> list[str]:
    """Tenants that have READY steps (at most MAX_TENANTS_PER_CLAIM), by the skip scan, in
    id order from the first one after `after` (None: from the first)."""
    rows = await conn.execute(
        TENANTS_WITH_READY_STEPS, {"max_tenants": MAX_TENANTS_PER_CLAIM, "after": after}
    )
    return [row.tenant_id for row in rows]


@dataclass
class TenantRing:
    """One claimer's turn among the tenants with READY steps, so that every tenant gets its
    share in turn however many there are, and whatever the size of the claims.

    The list of tenants (at most MAX_TENANTS_PER_CLAIM, reused for TENANT_LIST_TTL_S) is a
    window over all of them in id order. Each claim takes the next tenants of the list, from
    where the previous claim stopped; a new list starts after the last tenant served and wraps
    round to the first, so a claim smaller than the list, or more than 64 tenants, still reach
    every tenant in turn. With one tenant (or none) there is no turn to take: the fill is its
    share."""

    tenants: list[str] = field(default_factory=list)
    fetched_at: float = float("-inf")
    start: int = 0
    after: str | None = None
    queue_short: bool = False
    """The last claim found fewer due steps than it asked for: every due step fitted in it,
    so the next claim has nothing to share out and takes its steps oldest first. The first
    full claim ends that (the queue is deep again, and the claim after it shares)."""

    def claimed(self, asked: int, got: int) -> None:
        """Remember whether the claim just made found the queue shorter than it asked. When
        a short queue turns deep, the list of tenants is from before: the next claim lists
        them again."""
        if self.queue_short and got >= asked:
            self.fetched_at = float("-inf")
        self.queue_short = got < asked

    async def turn(self, conn: AsyncConnection, limit: int) -> list[str]:
        """The tenants this claim shares among (at most `limit`: a share is one step or more);
        none while the queue is short (`queue_short`)."""
        if self.queue_short:
            return []
        if time.monotonic() - self.fetched_at > TENANT_LIST_TTL_S:
            await self._refresh(conn)
        if len(self.tenants) <= 1:
            return []  # one tenant (or none): the fill alone is its share
        count = min(limit, len(self.tenants))
        if count <= 0:
            return []
        ordered = self.tenants[self.start :] + self.tenants[: self.start]
        self.start = (self.start + count) % len(self.tenants)
        self.after = ordered[count - 1]  # the next list starts after the last tenant served
        return ordered[:count]

    async def _refresh(self, conn: AsyncConnection) -> None:
        tenants = await ready_tenants(conn, self.after)
        if self.after is not None and len(tenants) < MAX_TENANTS_PER_CLAIM:
            listed = set(tenants)
            wrapped = [t for t in await ready_tenants(conn) if t not in listed]
            tenants += wrapped[: MAX_TENANTS_PER_CLAIM - len(tenants)]
        self.tenants, self.start, self.fetched_at = tenants, 0, time.monotonic()


async def claim_rows(
    conn: AsyncConnection,
    now: float,
    limit: int,
    lease_s: float,
    batch: str,
    *,
    tenants: list[str],
    worker: str | None = None,
) -> list[Any]:
    """Claim up to `limit` due steps, an equal share for each of `tenants` (those whose turn
    it is, see `TenantRing`), then filled from all tenants oldest first, `claimed_by` set to
    `worker` (the claimer's service id). Each row holds the
    claimed step and what executing it needs from its run (`RUN_COLUMNS`)."""
    # PostgreSQL claims and reads the runs in the same statements (`_with_runs`); SQLite (no
    # LATERAL, no UPDATE in a WITH) claims a share per statement, then reads the runs. Its
    # claims are local (one process, no round trips) and cheap.
    at_once = dialect_of(conn).writes_several_tables_at_once
    claimed: list[Any] = []
    if tenants:
        shares = claim_params(now, lease_s, batch, max(1, limit // len(tenants)), worker)
        if at_once:
            claimed += (await conn.execute(SHARES_WITH_RUNS, shares | {"b_tenants": tenants})).all()
        else:
            for tenant_id in tenants:
                share = shares | {"b_tenant": tenant_id}
                claimed += (await conn.execute(TENANT_SHARE, share)).all()
    if len(claimed) < limit:
        fill = claim_params(now, lease_s, batch, limit - len(claimed), worker)
        claimed += (await conn.execute(FILL_WITH_RUNS if at_once else FILL, fill)).all()
    if at_once or not claimed:
        return claimed
    # The steps just claimed, read back with their runs: rows of the shape PostgreSQL's
    # statements return.
    ids = [row.id for row in claimed]
    return list((await conn.execute(SQLITE.statement(_claimed_with_runs), {"b_ids": ids})).all())


async def hold(conn: AsyncConnection, claimed: list[Any]) -> set[int]:
    """Take the `claimed` rows (a claim's rows: step `id`, `run_id`, all read with a stopped
    run) out of the claim, claim cleared and attempt undone; returns the ids taken out. The
    rest (their runs RUNNING again) are the claim's to run.

    The runs' status is read again here, under a share lock, not taken from the claim's read:
    an operator's retry that reopened a run since then must find its steps claimable, not held
    back as PENDING by nobody's hand; one that reopens it later waits for this transaction,
    then releases what it held. The lock skips locked runs and never waits: this transaction
    already holds its claimed steps, and a transaction holding a run's lock may be waiting for
    them (a flush holding back a failed run's READY steps, a join reopened by a Retry). The
    steps of a run locked right now go back to READY instead, as if never claimed: its holder
    either reopens it (they are claimable) or not (the next claim holds them back)."""
    run_ids = sorted({row.run_id for row in claimed})
    locked = {
        row.id: row.status
        for row in await conn.execute(
            select(runs.c.id, runs.c.status)
            .where(runs.c.id.in_(run_ids))
            .order_by(runs.c.id)
            .with_for_update(read=True, skip_locked=True)
        )
    }
    stopped: list[int] = []
    busy: list[int] = []
    for row in claimed:
        status = locked.get(row.run_id)
        if status is None:
            busy.append(row.id)
        elif status != RunStatus.RUNNING.value:
            stopped.append(row.id)
    taken: set[int] = set()
    for ids, status in ((stopped, StepStatus.PENDING), (busy, StepStatus.READY)):
        if not ids:
            continue
        result = await conn.execute(
            update(steps)
            .where(steps.c.id.in_(sorted(ids)))
            .values(
                status=status.value,
                claim_token=None,
                claimed_by=None,
                lease_expires_at=None,
                attempts=steps.c.attempts - 1,
            )
            .returning(steps.c.id)
        )
        taken.update(result.scalars())
    return taken


RUN_COLUMNS = (
    runs.c.workflow_name,
    runs.c.workflow_version,
    runs.c.timeout_tier,
    runs.c.input,
    runs.c.parent_run_id,
    runs.c.parent_vertex_id,
    runs.c.root_run_id,
    runs.c.item_index,
    runs.c.item,
    runs.c.status.label("run_status"),
    runs.c.pinned_versions,
    runs.c.route,
)
"""What executing a claimed step needs from its run (its status for the stopped-run check)."""


def _claimed_with_runs(dialect: Dialect) -> Any:
    """SQLite: the steps `b_ids` with their runs' columns (`claim_rows`)."""
    return (
        select(*STEP_COLUMNS, *RUN_COLUMNS)
        .join_from(steps, runs, runs.c.id == steps.c.run_id)
        .where(dialect.one_of(steps.c.id, "b_ids", BigInteger))
        .order_by(steps.c.id)
    )


def _with_runs(claim: Any) -> Any:
    """PostgreSQL: the claim and the read of its steps' runs as one statement (the UPDATE in
    a data-modifying WITH, joined to `run`): one round trip fewer per claim."""
    claimed = claim.cte("claimed")
    return select(claimed, *RUN_COLUMNS).join_from(claimed, runs, runs.c.id == claimed.c.run_id)


FILL_WITH_RUNS = _with_runs(FILL)
SHARES_WITH_RUNS = _with_runs(SHARES)


def claimed_step(row: Any, outputs: dict[str, dict[str, Any]]) -> ClaimedStep:
    """A row of `claim_rows` (a claimed step and its run's columns) as the record a worker
    executes."""
    return ClaimedStep(
        step_id=row.id,
        claim_token=row.claim_token,
        run_id=row.run_id,
        vertex_id=row.vertex_id,
        tenant_id=row.tenant_id,
        attempts=row.attempts,
        auto_retries=row.auto_retries,
        workflow_name=row.workflow_name,
        workflow_version=row.workflow_version,
        timeout_tier=row.timeout_tier,
        run_input=row.input,
        outputs=outputs.get(row.run_id, {}),
        parent_run_id=row.parent_run_id,
        parent_vertex_id=row.parent_vertex_id,
        root_run_id=row.root_run_id,
        item_index=row.item_index,
        item=row.item,
        tenant_item_taken=row.tenant_item_taken,
        breaker_opening=BreakerOpening.of_error(row.error),
        pinned_versions=row.pinned_versions,
        route=row.route,
    )
