"""The durable store: the only module that talks SQL (STYLE §1).

The store is both the source of truth and the work queue (DESIGN §3).

Claiming. Ready steps are claimed in batches by one atomic statement:

    UPDATE step SET status='RUNNING', claim_token=<batch>||id, lease_expires_at=…
    WHERE id IN (SELECT step.id FROM step JOIN run … WHERE step.status='READY'
                 AND not_before <= now AND run.status='RUNNING'
                 ORDER BY not_before, id LIMIT n FOR UPDATE OF step SKIP LOCKED)
    RETURNING …

On PostgreSQL `FOR UPDATE SKIP LOCKED` lets concurrent workers claim disjoint rows without
waiting; on SQLite the clause compiles away and the statement is atomic because SQLite runs
one writer at a time (write transactions begin IMMEDIATE, see `engine.db`).

Results. A result is written with `WHERE id=… AND claim_token=… AND status='RUNNING'`: only
the holder of a live claim can record it, a completed step is never overwritten, and a late
result from an expired claim matches no row and is dropped. The same transaction decrements
the dependants' `deps_pending` (a dependant turns READY when it reaches 0) and the run's
`steps_remaining` (the run succeeds when it reaches 0), so no scan of the run's steps is needed.

Leases. A claim carries a lease; workers renew it while the step runs. `requeue_expired`
returns steps whose lease passed (their worker died) to READY, to run again: at-least-once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import case, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine import db
from engine import store_claims as claims
from engine import store_fanout as fanout
from engine import store_recovery as recovery
from engine import store_results as results_
from engine import store_settings as settings_
from engine.models import (
    DONE_STEP_STATUSES,
    Run,
    RunLog,
    RunStatus,
    Step,
    StepStatus,
    WorkflowVersion,
)
from engine.records import (
    AwaitChildren,
    ChildRow,
    ClaimedStep,
    CompletionReport,
    Failure,
    LogLine,
    RunRecord,
    StepRecord,
    StepResult,
    Success,
    VersionRecord,
)
from engine.store_fanout import EndedChild
from schemas.clock import Clock
from schemas.definitions import Workflow

logger = logging.getLogger(__name__)

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]
versions = WorkflowVersion.__table__  # type: ignore[attr-defined]

_DONE = [s.value for s in DONE_STEP_STATUSES]
MAX_NESTING = 16
"""Fan-outs nest (a child can spawn); joins cascade upwards at most this deep per commit."""
ANALYZE_AFTER_ROWS = 2_000
"""Rows this process inserts (runs and steps) before it first refreshes planner statistics."""


class ClaimLost(RuntimeError):
    """The step's claim is no longer live: stop working on it."""


class UnknownWorkflow(LookupError):
    """No published workflow (or version) with that name."""


def definition_hash(document: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a workflow document."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Store:
    """Async access to the durable state. Build with `Store.open`."""

    def __init__(self, engines: db.Engines, clock: Clock) -> None:
        self._engines = engines
        self._clock = clock
        self._versions: dict[tuple[str, int], VersionRecord] = {}
        # Rows inserted since the last ANALYZE, and the threshold for the next one (doubles).
        self._inserted_since_analyze = 0
        self._analyze_threshold = ANALYZE_AFTER_ROWS
        # (monotonic time, tenants with READY steps) as last seen by a claim (fairness only).
        self._tenants_seen: tuple[float, list[str]] = (float("-inf"), [])

    @classmethod
    async def open(cls, database_url: str, clock: Clock, *, migrate: bool = True) -> Store:
        engines = db.create_engines(database_url)
        if migrate:
            await db.upgrade(engines)
        return cls(engines, clock)

    @property
    def dialect(self) -> str:
        return self._engines.dialect

    async def close(self) -> None:
        await self._engines.dispose()

    # ── workflows ───────────────────────────────────────────────────────────────────────────

    async def publish(self, workflow: Workflow) -> VersionRecord:
        """Store `workflow` as a new immutable version, unless the latest version is identical."""
        document = workflow.model_dump(mode="json", by_alias=True, exclude_none=True)
        digest = definition_hash(document)
        async with self._engines.write.begin() as conn:
            latest = (
                await conn.execute(
                    select(versions.c.version, versions.c.definition_hash, versions.c.created_at)
                    .where(versions.c.name == workflow.name)
                    .order_by(versions.c.version.desc())
                    .limit(1)
                )
            ).first()
            if latest is not None and latest.definition_hash == digest:
                return self._remember(workflow, latest.version, digest, latest.created_at)
            version = 1 if latest is None else latest.version + 1
            now = self._clock.now()
            await conn.execute(
                insert(versions).values(
                    name=workflow.name,
                    version=version,
                    definition=document,
                    definition_hash=digest,
                    created_at=now,
                )
            )
        return self._remember(workflow, version, digest, now)

    def _remember(
        self, workflow: Workflow, version: int, digest: str, created_at: float
    ) -> VersionRecord:
        record = VersionRecord(workflow.name, version, digest, workflow, created_at)
        self._versions[(workflow.name, version)] = record
        return record

    async def get_version(self, name: str, version: int | None = None) -> VersionRecord:
        """A published version (the latest when `version` is None). Versions are immutable,
        so they are cached for the life of the store."""
        if version is not None and (name, version) in self._versions:
            return self._versions[(name, version)]
        query = select(versions).where(versions.c.name == name)
        if version is None:
            query = query.order_by(versions.c.version.desc()).limit(1)
        else:
            query = query.where(versions.c.version == version)
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            suffix = "" if version is None else f"@{version}"
            raise UnknownWorkflow(f"no published workflow {name}{suffix}")
        workflow = Workflow.model_validate(row.definition)
        return self._remember(workflow, row.version, row.definition_hash, row.created_at)

    async def list_versions(self, name: str | None = None) -> list[tuple[str, int, str, float]]:
        """(name, version, hash, created_at) of every published version, newest first."""
        query = select(
            versions.c.name, versions.c.version, versions.c.definition_hash, versions.c.created_at
        ).order_by(versions.c.name, versions.c.version.desc())
        if name is not None:
            query = query.where(versions.c.name == name)
        async with self._engines.read.connect() as conn:
            return [tuple(r) for r in (await conn.execute(query)).all()]

    # ── runs ────────────────────────────────────────────────────────────────────────────────

    async def create_run(
        self,
        version: VersionRecord,
        run_input: Any,
        *,
        tenant_id: str = "default",
        timeout_tier: str = "process",
        run_id: str | None = None,
        idempotency_key: str | None = None,
        restarted_from: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create a RUNNING run with its steps (roots READY). Returns (run, created).

        With an `idempotency_key` that already exists, the existing run is returned and
        nothing is created (`created` False).
        """
        if idempotency_key is not None:
            existing = await self._run_by_key(idempotency_key)
            if existing is not None:
                return existing, False
        run_id = run_id or str(uuid.uuid4())
        now = self._clock.now()
        workflow = version.workflow
        row = {
            "id": run_id,
            "workflow_name": version.name,
            "workflow_version": version.version,
            "definition_hash": version.definition_hash,
            "tenant_id": tenant_id,
            "status": RunStatus.RUNNING.value,
            "timeout_tier": timeout_tier,
            "input": run_input,
            "steps_remaining": len(workflow.vertices),
            "created_at": now,
            "started_at": now,
            "idempotency_key": idempotency_key,
            "root_run_id": run_id,
            "restarted_from": restarted_from,
            "output": None,
            "error": None,
            "ended_at": None,
        }
        async with self._engines.write.begin() as conn:
            await conn.execute(insert(runs).values(**row))
            await conn.execute(insert(steps), _step_rows(run_id, tenant_id, workflow, now))
            await results_.insert_logs(
                conn,
                [LogLine(run_id, "info", f"run created ({version.name} v{version.version})")],
                now,
            )
        return _run_record(row), True

    async def create_runs(
        self,
        version: VersionRecord,
        inputs: Sequence[Any],
        *,
        tenant_id: str = "default",
        timeout_tier: str = "process",
    ) -> list[str]:
        """Create one RUNNING run per input in a single transaction (bulk submission)."""
        now = self._clock.now()
        workflow = version.workflow
        ids = [str(uuid.uuid4()) for _ in inputs]
        rows = [
            {
                "id": run_id,
                "workflow_name": version.name,
                "workflow_version": version.version,
                "definition_hash": version.definition_hash,
                "tenant_id": tenant_id,
                "status": RunStatus.RUNNING.value,
                "timeout_tier": timeout_tier,
                "input": run_input,
                "steps_remaining": len(workflow.vertices),
                "created_at": now,
                "started_at": now,
                "root_run_id": run_id,
            }
            for run_id, run_input in zip(ids, inputs, strict=True)
        ]
        if rows:
            async with self._engines.write.begin() as conn:
                await conn.execute(insert(runs), rows)
                await conn.execute(
                    insert(steps),
                    [r for run_id in ids for r in _step_rows(run_id, tenant_id, workflow, now)],
                )
            await self._grew(len(rows) * (1 + len(workflow.vertices)))
        return ids

    async def _run_by_key(self, key: str) -> RunRecord | None:
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.idempotency_key == key))).first()
        return None if row is None else _run_record(row._mapping)

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).first()
        return None if row is None else _run_record(row._mapping)

    async def get_steps(self, run_id: str) -> list[StepRecord]:
        query = select(steps).where(steps.c.run_id == run_id).order_by(steps.c.id)
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_step_record(r._mapping) for r in rows]

    async def run_logs(self, run_id: str, *, after_id: int = 0, limit: int = 500) -> list[Any]:
        query = (
            select(logs)
            .where(logs.c.run_id == run_id, logs.c.id > after_id)
            .order_by(logs.c.id)
            .limit(limit)
        )
        async with self._engines.read.connect() as conn:
            return [dict(r._mapping) for r in (await conn.execute(query)).all()]

    async def count_runs(self, status: str | None = None) -> int:
        query = select(func.count()).select_from(runs)
        if status is not None:
            query = query.where(runs.c.status == status)
        async with self._engines.read.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def ready_depth(self) -> int:
        """How many steps are READY (the backpressure signal)."""
        query = select(func.count()).select_from(steps).where(steps.c.status == "READY")
        async with self._engines.read.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def append_logs(self, lines: Sequence[LogLine]) -> None:
        if lines:
            async with self._engines.write.begin() as conn:
                await results_.insert_logs(conn, lines, self._clock.now())

    # ── fan-out (see engine.store_fanout) ──────────────────────────────────────────────────

    async def existing_children(self, run_id: str, vertex_id: str) -> int:
        async with self._engines.read.connect() as conn:
            return await fanout.existing_children(conn, run_id, vertex_id)

    async def create_children(
        self, step: ClaimedStep, child: VersionRecord, total: int, batch: Sequence[ChildRow]
    ) -> int:
        """Create, in one transaction, the children in `batch` that do not exist yet.

        Raises ClaimLost when the spawner's claim is no longer live (its lease expired and
        another worker took it over), so a stale spawner stops creating children.
        """
        now = self._clock.now()
        workflow = child.workflow
        async with self._engines.write.begin() as conn:
            created = await fanout.insert_children(
                conn,
                dialect=self.dialect,
                parent=step,
                child=child,
                batch=batch,
                step_rows=lambda run_id: _step_rows(run_id, step.tenant_id, workflow, now),
                now=now,
            )
            # Checked last, so this transaction locks child runs before the spawner step, in
            # the same order as a flush that ends children (child runs, then the spawner's
            # counters): the two cannot deadlock. A lost claim rolls the batch back.
            if not await fanout.claim_is_live(conn, step, total):
                raise ClaimLost(f"spawner {step.run_id}/{step.vertex_id} lost its claim")
        await self._grew(created * (1 + len(workflow.vertices)))
        return created

    async def spawner_counts(self, run_id: str, vertex_id: str) -> Any:
        async with self._engines.read.connect() as conn:
            return fanout.counts_of(await fanout.read_counters(conn, run_id, vertex_id))

    async def children_outputs(
        self, run_id: str, vertex_id: str, *, after_index: int = -1, limit: int = 1000
    ) -> list[tuple[int, str, str | None]]:
        """A page of (item index, status, output as JSON text) of a spawner's children, in
        item order."""
        async with self._engines.read.connect() as conn:
            return await fanout.children_outputs(
                conn, run_id, vertex_id, after_index=after_index, limit=limit
            )

    @property
    def assembles_payloads(self) -> bool:
        """Whether `copy_children_outputs` works here (PostgreSQL)."""
        return self.dialect == "postgresql"

    async def copy_children_outputs(
        self,
        run_id: str,
        vertex_id: str,
        *,
        ref: str,
        chunk: int,
        after_index: int,
        last_index: int,
        limit: int,
    ) -> fanout.CopiedChunk:
        """Store the outputs of the children with item indexes in (after_index, last_index]
        (at most `limit`) as payload chunk `chunk` of `ref`, assembled by the database (only
        where `assembles_payloads`; elsewhere read `children_outputs` and store them)."""
        if not self.assembles_payloads:
            raise NotImplementedError("payload chunks are assembled in PostgreSQL only")
        async with self._engines.write.begin() as conn:
            return await fanout.copy_children_outputs(
                conn,
                run_id,
                vertex_id,
                ref=ref,
                chunk=chunk,
                after_index=after_index,
                last_index=last_index,
                limit=limit,
                now=self._clock.now(),
            )

    async def children(
        self, run_id: str, *, status: str | None = None, limit: int = 100, after_index: int = -1
    ) -> list[RunRecord]:
        """A page of a run's children in item order."""
        query = (
            select(runs)
            .where(runs.c.parent_run_id == run_id, runs.c.item_index > after_index)
            .order_by(runs.c.item_index)
            .limit(limit)
        )
        if status is not None:
            query = query.where(runs.c.status == status)
        async with self._engines.read.connect() as conn:
            return [_run_record(r._mapping) for r in (await conn.execute(query)).all()]

    async def fanout_progress(self, run_id: str) -> dict[str, int]:
        """Children of `run_id` by status plus the total, from the spawner counters and one
        grouped count of the unfinished ones (cheap enough to read every second)."""
        query = select(
            steps.c.children_total,
            steps.c.children_succeeded,
            steps.c.children_failed,
            steps.c.children_cancelled,
        ).where(steps.c.run_id == run_id, steps.c.children_total.is_not(None))
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(query)).all()
            running = await fanout.running_children(conn, run_id)
        total = sum(r.children_total or 0 for r in rows)
        succeeded = sum(r.children_succeeded for r in rows)
        failed = sum(r.children_failed for r in rows)
        cancelled = sum(r.children_cancelled for r in rows)
        pending = max(0, total - succeeded - failed - cancelled - running)
        return {
            "total": total,
            "pending": pending,
            "running": running,
            "succeeded": succeeded,
            "failed": failed,
            "cancelled": cancelled,
        }

    async def reprocess(self, run_id: str) -> int:
        """Re-run the dead-lettered (FAILED) children of `run_id` as new attempts of the same
        child runs (keys unchanged), with those of a nested fan-out under them; the joins
        re-evaluate, up to the root (see `engine.store_recovery`). Returns how many child runs
        were revived."""
        now = self._clock.now()
        async with self._engines.write.begin() as conn:

            async def workflow_of(run: str) -> Workflow:
                return await self._workflow_of_run(conn, run)

            async def version_of(name: str, version: int) -> Workflow:
                return (await self.get_version(name, version)).workflow

            revived = await recovery.reprocess(conn, run_id, now, workflow_of, version_of)
            if revived:
                message = f"reprocess: {revived} dead-lettered children run again"
                await results_.insert_logs(conn, [LogLine(run_id, "info", message)], now)
        return revived

    async def put_payload(
        self, run_id: str, data: Any, *, ref: str | None = None, chunk: int = 0
    ) -> str:
        """Store `data` (or one chunk of a large list) under `ref` (new if None)."""
        ref = ref or str(uuid.uuid4())
        async with self._engines.write.begin() as conn:
            await fanout.put_payload(
                conn, run_id, ref=ref, chunk=chunk, data=data, now=self._clock.now()
            )
        return ref

    async def put_payload_json(self, run_id: str, text: str, *, ref: str, chunk: int) -> None:
        """Store one chunk of a payload already encoded as JSON text (see `put_payload`)."""
        async with self._engines.write.begin() as conn:
            await fanout.put_payload_json(
                conn,
                run_id,
                ref=ref,
                chunk=chunk,
                text=text,
                dialect=self.dialect,
                now=self._clock.now(),
            )

    async def get_payload(self, ref: str) -> Any:
        async with self._engines.read.connect() as conn:
            return await fanout.get_payload(conn, ref)

    async def delete_payload(self, ref: str) -> None:
        async with self._engines.write.begin() as conn:
            await fanout.delete_payload(conn, ref)

    async def payload_bytes(self) -> int:
        async with self._engines.read.connect() as conn:
            return await fanout.payload_bytes(conn)

    async def quota_left(self, tenant_id: str) -> int | None:
        async with self._engines.read.connect() as conn:
            return await settings_.quota_left(conn, tenant_id)

    async def set_quota(self, tenant_id: str, max_runs: int) -> None:
        async with self._engines.write.begin() as conn:
            await settings_.set_quota(conn, self.dialect, tenant_id, max_runs)

    # ── destination caps (the durable copy; admission caches them in Redis) ──────────────────

    async def set_destination_caps(
        self, destination: str, max_concurrency: int, rate_per_second: float | None
    ) -> None:
        async with self._engines.write.begin() as conn:
            await settings_.upsert_caps(
                conn,
                self.dialect,
                destination=destination,
                max_concurrency=max_concurrency,
                rate_per_second=rate_per_second,
                now=self._clock.now(),
            )

    async def get_destination_caps(self, destination: str) -> tuple[int, float | None] | None:
        async with self._engines.read.connect() as conn:
            return await settings_.read_caps(conn, destination)

    async def list_destination_caps(self) -> list[tuple[str, int, float | None]]:
        async with self._engines.read.connect() as conn:
            return await settings_.list_caps(conn)

    async def set_tenant_rate(self, tenant_id: str, per_minute: int | None) -> None:
        """Store a tenant's rate limit (None: back to the default)."""
        async with self._engines.write.begin() as conn:
            await settings_.upsert_tenant_rate(
                conn, self.dialect, tenant_id, per_minute, self._clock.now()
            )

    async def get_tenant_rate(self, tenant_id: str) -> int | None:
        async with self._engines.read.connect() as conn:
            return await settings_.read_tenant_rate(conn, tenant_id)

    async def list_tenant_rates(self) -> list[tuple[str, int]]:
        async with self._engines.read.connect() as conn:
            return await settings_.list_tenant_rates(conn)

    # ── the queue ───────────────────────────────────────────────────────────────────────────

    async def claim(self, limit: int, lease_s: float) -> list[ClaimedStep]:
        """Atomically claim up to `limit` due READY steps of RUNNING runs."""
        now = self._clock.now()
        batch = uuid.uuid4().hex[:16] + ":"
        async with self._engines.write.begin() as conn:
            claimed = await claims.claim_rows(
                conn, now, limit, lease_s, batch, tenants=await self._ready_tenants(conn)
            )
            if not claimed:
                return []
            run_rows = await claims.run_rows(conn, {row.run_id for row in claimed})
            # Backstop: a step whose run stopped (a race with a failing flush on PostgreSQL)
            # is not executed; it goes back to PENDING until an operator resumes the run.
            stopped = [r.id for r in claimed if run_rows[r.run_id].status != "RUNNING"]
            if stopped:
                await claims.hold(conn, stopped)
                claimed = [r for r in claimed if run_rows[r.run_id].status == "RUNNING"]
            # Only steps with dependencies read other steps' outputs (expressions may reference
            # ancestors only), so root steps — every child of a simple fan-out — need no read.
            needs_outputs = sorted(
                {
                    row.run_id
                    for row in claimed
                    if await self._has_dependencies(run_rows[row.run_id], row.vertex_id)
                }
            )
            outputs = await results_.outputs_of(conn, needs_outputs) if needs_outputs else {}
        return [claims.claimed_step(row, run_rows[row.run_id], outputs) for row in claimed]

    async def _ready_tenants(self, conn: AsyncConnection) -> list[str]:
        fetched_at, tenants = self._tenants_seen
        if time.monotonic() - fetched_at > claims.TENANT_LIST_TTL_S:
            tenants = await claims.ready_tenants(conn)
            self._tenants_seen = (time.monotonic(), tenants)
        return tenants

    async def _has_dependencies(self, run_row: Any, vertex_id: str) -> bool:
        version = await self.get_version(run_row.workflow_name, run_row.workflow_version)
        vertex = version.workflow.vertices.get(vertex_id)
        return vertex is None or bool(vertex.depends_on)

    async def renew(self, tokens: Iterable[str], lease_s: float) -> int:
        """Extend the leases of live claims; returns how many are still held."""
        token_list = list(tokens)
        if not token_list:
            return 0
        # SKIP LOCKED: a row locked right now is being written by a flush or a spawner batch
        # (its owner), and waiting for it while holding other rows could deadlock with them.
        live = (
            select(steps.c.id)
            .where(
                steps.c.claim_token.in_(token_list),
                steps.c.status == StepStatus.RUNNING.value,
            )
            .order_by(steps.c.id)
            .with_for_update(skip_locked=True)
        )
        statement = (
            update(steps)
            .where(steps.c.id.in_(live.scalar_subquery()))
            .values(lease_expires_at=self._clock.now() + lease_s)
        )
        async with self._engines.write.begin() as conn:
            return (await conn.execute(statement)).rowcount

    async def _grew(self, rows: int) -> None:
        """Refresh planner statistics once the queue tables have grown a lot since the last
        refresh (what autovacuum's autoanalyze does, which some installations switch off).
        The threshold doubles each time, so a fan-out of N children costs about log2(N)
        ANALYZEs, each of a fixed-size sample. Without it PostgreSQL plans the claim and flush
        queries for empty tables (a sort of every READY row per claim)."""
        self._inserted_since_analyze += rows
        if self._inserted_since_analyze < self._analyze_threshold:
            return
        self._analyze_threshold = max(self._analyze_threshold, self._inserted_since_analyze) * 2
        self._inserted_since_analyze = 0
        await self.analyze()

    async def analyze(self) -> None:
        """Refresh PostgreSQL's planner statistics of the queue tables.

        The claim and flush queries are only cheap with index plans, and the planner picks
        them only when it knows the tables are large; queue tables grow faster than
        autovacuum's default analyze threshold (and some installations switch autovacuum
        off). ANALYZE samples a fixed number of rows, so it costs the same at any size.
        """
        if self.dialect == "postgresql":
            async with self._engines.write.connect() as conn:
                await conn.execute(text("ANALYZE step, run"))
                await conn.commit()

    async def requeue_expired(self) -> list[tuple[int, str, str]]:
        """Return RUNNING steps whose lease expired (their worker died) to READY.

        Returns (step id, run id, vertex id) of each requeued step.
        """
        now = self._clock.now()
        statement = (
            update(steps)
            .where(steps.c.status == StepStatus.RUNNING.value, steps.c.lease_expires_at < now)
            .values(
                # READY only while the run is RUNNING; a stopped run's step is held back.
                status=case(
                    (results_.RUN_IS_RUNNING, StepStatus.READY.value),
                    else_=StepStatus.PENDING.value,
                ),
                claim_token=None,
                lease_expires_at=None,
                not_before=now,
            )
            .returning(steps.c.id, steps.c.run_id, steps.c.vertex_id)
        )
        async with self._engines.write.begin() as conn:
            rows = [(r.id, r.run_id, r.vertex_id) for r in (await conn.execute(statement)).all()]
            await results_.insert_logs(
                conn,
                [
                    LogLine(run_id, "warning", "lease expired; step requeued", vertex_id)
                    for _, run_id, vertex_id in rows
                ],
                now,
            )
        return rows

    async def complete(
        self, results: Sequence[StepResult], log_lines: Sequence[LogLine] = ()
    ) -> CompletionReport:
        """Record results of claimed steps and their log lines in one transaction, in a fixed
        number of round trips (see `engine.store_results`).

        Ending a child run updates its parent spawner's counters in the same transaction; when
        that closes the join, the spawner step succeeds and the MERGE becomes READY — which may
        end the parent run, and so on up a nested fan-out.
        """
        report = CompletionReport()
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            tx = results_.Tx(conn, now, report)
            live_ids = await results_.live_claims(conn, results) if results else set()
            live = [r for r in results if r.step.step_id in live_ids]
            report.dropped = [r.step.step_id for r in results if r.step.step_id not in live_ids]
            report.recorded = len(live)
            await results_.release(conn, live, now)
            done = [
                results_.DoneStep(
                    r.step.run_id, r.step.vertex_id, await self._workflow_of(r.step), r.output
                )
                for r in live
                if isinstance(r, Success)
            ]
            await results_.steps_done(tx, done)
            for result in live:
                step = result.step
                if isinstance(result, Failure) and result.retry_at is None:
                    await results_.fail_run(tx, step.run_id, step.vertex_id, result.error)
                elif isinstance(result, AwaitChildren):
                    await self._check_join(tx, step.run_id, step.vertex_id)
            dropped = [
                LogLine(
                    r.step.run_id, "warning", "late result dropped: claim expired", r.step.vertex_id
                )
                for r in results
                if r.step.step_id not in live_ids
            ]
            await results_.insert_logs(conn, [*log_lines, *dropped, *tx.logs], now)
            tx.logs = []
            # Last before COMMIT: adding to a spawner's counters locks its row, and every
            # worker's flush that ends one of its children waits for that lock.
            for _ in range(MAX_NESTING):
                if not tx.ended:
                    break
                batch, tx.ended = tx.ended, []
                await self._children_ended(tx, batch)
            if tx.ended:
                # Deeper than MAX_NESTING: fail loudly rather than leave a join waiting.
                raise RuntimeError(f"fan-out nested deeper than {MAX_NESTING} levels")
            await results_.insert_logs(conn, tx.logs, now)
        return report

    async def _workflow_of(self, step: ClaimedStep) -> Workflow:
        return (await self.get_version(step.workflow_name, step.workflow_version)).workflow

    async def _workflow_of_run(self, conn: AsyncConnection, run_id: str) -> Workflow:
        row = (
            await conn.execute(
                select(runs.c.workflow_name, runs.c.workflow_version).where(runs.c.id == run_id)
            )
        ).one()
        return (await self.get_version(row.workflow_name, row.workflow_version)).workflow

    async def _children_ended(self, tx: results_.Tx, children: Sequence[EndedChild]) -> None:
        """Add ended children to their spawners' counters (one UPDATE per spawner, however
        many of its children ended in this batch) and close joins that can close."""
        for (parent_run_id, vertex_id), counts in fanout.group_ended(children).items():
            row = await fanout.add_to_counters(tx.conn, parent_run_id, vertex_id, counts)
            if (
                row is not None
                and row.status == StepStatus.PARKED.value
                and fanout.join_may_close(fanout.counts_of(row))
            ):
                await self._check_join(tx, parent_run_id, vertex_id, row)

    async def _check_join(
        self, tx: results_.Tx, run_id: str, vertex_id: str, counters: Any = None
    ) -> None:
        """Close the spawner's join if its children allow it (see `vertices.merge`)."""
        if counters is None:
            counters = await fanout.read_counters(tx.conn, run_id, vertex_id)
        workflow = await self._workflow_of_run(tx.conn, run_id)
        counts = fanout.counts_of(counters)
        if not fanout.join_closes(workflow, vertex_id, counts):
            return
        if await fanout.close_join(tx.conn, run_id, vertex_id, counts, tx.now):
            message = f"fan-out joined: {counts.as_dict()}"
            tx.logs.append(LogLine(run_id, "info", message, vertex_id))
            done = results_.DoneStep(run_id, vertex_id, workflow, counts.as_dict())
            await results_.steps_done(tx, [done])


# ── statements shared by the methods above ──────────────────────────────────────────────────


def _step_rows(run_id: str, tenant_id: str, workflow: Workflow, now: float) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "vertex_id": vertex_id,
            "tenant_id": tenant_id,
            "status": (StepStatus.PENDING if vertex.depends_on else StepStatus.READY).value,
            "deps_pending": len(set(vertex.depends_on)),
            "attempts": 0,
            "auto_retries": 0,
            "not_before": now,
            "created_at": now,
        }
        for vertex_id, vertex in workflow.vertices.items()
    ]


def _run_record(row: Any) -> RunRecord:
    fields = RunRecord.__dataclass_fields__
    return RunRecord(**{k: row[k] for k in fields if k in row})


def _step_record(row: Any) -> StepRecord:
    fields = StepRecord.__dataclass_fields__
    return StepRecord(**{k: row[k] for k in fields})


__all__ = ["ClaimLost", "Store", "UnknownWorkflow", "definition_hash"]
