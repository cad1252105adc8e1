"""What every role of the store shares: the engines, the clock, the version cache, the
planner-statistics refresh, and the row ↔ record conversions."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

from sqlalchemy import bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import claims, committed_changes, db
from engine.store.dialect import Dialect
from engine.store.models import (
    Run,
    RunLog,
    Step,
    StepStatus,
    WorkflowVersion,
)
from engine.store.pooler import Pooler
from engine.store.records import (
    ClaimedStep,
    RunRecord,
    StepRecord,
    VersionRecord,
)
from schemas.clock import Clock
from schemas.definitions import Workflow
from schemas.errors import NotFound, SchemaBridgeError

logger = logging.getLogger(__name__)

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]
versions = WorkflowVersion.__table__  # type: ignore[attr-defined]

LATEST_VERSION = (
    select(versions.c.version)
    .where(versions.c.name == bindparam("name"))
    .order_by(versions.c.version.desc())
    .limit(1)
)
"""The number of a workflow's latest version (parameter `name`)."""

ANALYZE_AFTER_ROWS = 2_000
"""Rows this process inserts (runs and steps) before it first refreshes planner statistics."""


class ClaimLost(SchemaBridgeError, RuntimeError):
    """The step's claim is no longer live: stop working on it."""

    code = "claim_lost"


class UnknownWorkflow(NotFound, LookupError):
    """No published workflow (or version) with that name."""

    code = "workflow_not_found"


def definition_hash(document: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a workflow document."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def stored_document(workflow: Workflow) -> dict[str, Any]:
    """The document a version of `workflow` is stored as (and hashed: `definition_hash`)."""
    return workflow.model_dump(mode="json", by_alias=True, exclude_none=True)


class StoreCore:
    """The state every store role uses. The roles (`RunCatalogue`, `WorkQueue`, `FanoutStore`,
    `OperatorSettingsStore`) are its subclasses; `engine.store.Store` combines them."""

    def __init__(self, engines: db.Engines, clock: Clock) -> None:
        self._engines = engines
        self._clock = clock
        self._versions: dict[tuple[str, int], VersionRecord] = {}
        # Rows inserted since the last ANALYZE, and the threshold for the next one (doubles).
        self._inserted_since_analyze = 0
        self._analyze_threshold = ANALYZE_AFTER_ROWS
        # Whose turn it is among the tenants with READY steps (fairness only).
        self._tenant_ring = claims.TenantRing()

    @classmethod
    async def open(
        cls,
        database_url: str,
        clock: Clock,
        *,
        migrate: bool = True,
        pooler: Pooler = "none",
    ) -> Self:
        """The store on `database_url`, migrated to head unless `migrate` is False; `pooler`:
        what stands between it and PostgreSQL (`engine.store.pooler`)."""
        engines = db.create_engines(database_url, pooler=pooler)
        if migrate:
            try:
                await db.upgrade(engines)
            except BaseException:
                # Nobody else will: the caller never gets a store to close.
                await engines.dispose()
                raise
        return cls(engines, clock)

    def on_committed_change(self, report: Callable[[str], None]) -> None:
        """Call `report(topic)` after each committed transaction that changed rows processes
        keep copies of (`engine.store.committed_changes`)."""
        committed_changes.watch_commits(self._engines.write, report)
        if not self._engines.shared_pool:  # SQLite's read engine has connections of its own
            committed_changes.watch_commits(self._engines.read, report)

    @property
    def dialect(self) -> Dialect:
        return self._engines.dialect

    async def close(self) -> None:
        await self._engines.dispose()

    def _remember(
        self, workflow: Workflow, version: int, digest: str, created_at: float
    ) -> VersionRecord:
        record = VersionRecord(workflow.name, version, digest, workflow, created_at)
        self._versions[(workflow.name, version)] = record
        return record

    async def get_version(
        self, name: str, version: int | None = None, *, conn: AsyncConnection | None = None
    ) -> VersionRecord:
        """A published version (the latest when `version` is None). Versions are immutable,
        so they are cached for the life of the store; the latest is looked up every time
        (another process may have published since), reading only its number when its
        definition is cached. `conn`: read on this connection (inside its transaction)
        rather than on one of the pool's: a transaction that waited for a second connection
        could, with enough of them at once, hold every connection the pool has."""
        if version is None:
            async with self._reading(conn) as reader:
                latest = (await reader.execute(LATEST_VERSION, {"name": name})).scalar()
            if latest is None:
                raise UnknownWorkflow(f"no published workflow {name}")
            version = int(latest)
        cached = self._versions.get((name, version))
        if cached is not None:
            return cached
        query = select(versions).where(versions.c.name == name, versions.c.version == version)
        async with self._reading(conn) as reader:
            row = (await reader.execute(query)).first()
        if row is None:
            raise UnknownWorkflow(f"no published workflow {name}@{version}")
        workflow = Workflow.model_validate(row.definition)
        return self._remember(workflow, row.version, row.definition_hash, row.created_at)

    @contextlib.asynccontextmanager
    async def _reading(self, conn: AsyncConnection | None) -> AsyncIterator[AsyncConnection]:
        """`conn`, or a read connection of the pool for the block."""
        if conn is not None:
            yield conn
            return
        async with self._engines.read.connect() as reader:
            yield reader

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
        statement = self.dialect.analyze_statement
        if statement is not None:
            async with self._engines.write.connect() as conn:
                await conn.execute(text(statement))
                await conn.commit()

    async def _workflow_of(self, step: ClaimedStep) -> Workflow:
        return (await self.get_version(step.workflow_name, step.workflow_version)).workflow

    async def _workflow_of_run(self, conn: AsyncConnection, run_id: str) -> Workflow:
        row = (
            await conn.execute(
                select(runs.c.workflow_name, runs.c.workflow_version).where(runs.c.id == run_id)
            )
        ).one()
        version = await self.get_version(row.workflow_name, row.workflow_version, conn=conn)
        return version.workflow


# ── statements shared by the roles ───────────────────────────────────────────────────────────


def step_rows(run_id: str, tenant_id: str, workflow: Workflow, now: float) -> list[dict[str, Any]]:
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


def run_record(row: Any) -> RunRecord:
    fields = RunRecord.__dataclass_fields__
    return RunRecord(**{k: row[k] for k in fields if k in row})


def step_record(row: Any) -> StepRecord:
    fields = StepRecord.__dataclass_fields__
    return StepRecord(**{k: row[k] for k in fields})
