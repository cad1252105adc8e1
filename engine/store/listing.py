"""Lists and pages of the run catalogue: runs by filter, a run's children, its log, the runs
restarted from it, and the workflows. Part of `engine.store` (called only from there).

Every page is keyset-paginated: a page starts strictly after the keys of the previous page's
last row, in the order of an index, so reading page 1,000 costs what page 1 costs and rows
inserted between two pages are neither skipped nor repeated (a newer run sorts before the
cursor, never after it). The indexes each order reads are declared on `engine.store.models.Run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.models import Run, RunLog, Step, StepStatus, WorkflowServing, WorkflowVersion
from engine.store.records import RunHeader

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]
versions = WorkflowVersion.__table__  # type: ignore[attr-defined]
serving = WorkflowServing.__table__  # type: ignore[attr-defined]

HEADER_COLUMNS = [runs.c[name] for name in RunHeader.__dataclass_fields__]
"""What run lists read of each run: the fields of `RunHeader`, in their order."""

RunKey = tuple[float, str]
"""Where a runs page ends: (created_at, id) of its last row."""
ChildKey = tuple[str, int]
"""Where a children page ends: (spawner vertex id, item index) of its last child."""


@dataclass(frozen=True)
class RunFilter:
    """Which runs a list (or a batch action) covers. Every field is optional; set fields are
    combined with AND. `created_after`/`created_before` are epoch seconds (inclusive/exclusive).

    Defined here because the store turns it into the WHERE clause; the operations layer
    re-exports it (`engine.operations.views.RunFilter`) for its callers."""

    workflow: str | None = None
    version: int | None = None
    status: str | None = None
    tenant: str | None = None
    parent: str | None = None
    """Only the children of this run."""
    created_after: float | None = None
    created_before: float | None = None
    roots_only: bool | None = None
    """Only runs that no spawner started (ignored here when `parent` is set). None: the
    reader's default; the operations layer decides it before a list or a batch retry reads
    (roots unless `parent` is set, and `parent` with True refused: `engine.operations.runs`),
    so the store only ever sees True or False from there."""
    route: str | None = None
    """Only runs whose version was chosen this way (`RunRoute`: serving, candidate, pinned,
    system); read from the rows of the range the other fields select."""


@dataclass(frozen=True)
class WorkflowSummary:
    name: str
    latest_version: int
    versions: int
    created_at: float
    """When its first version was published."""
    updated_at: float
    """When its latest version was published."""
    serving_version: int | None = None
    """The version new runs get (see `WorkflowServing`)."""


@dataclass(frozen=True)
class LogRecord:
    """A line of a run's log as stored."""

    id: int
    run_id: str
    vertex_id: str | None
    at: float
    level: str
    message: str
    data: Any


def log_record(row: Any) -> LogRecord:
    return LogRecord(
        row["id"],
        row["run_id"],
        row["vertex_id"],
        row["at"],
        row["level"],
        row["message"],
        row["data"],
    )


def _conditions(selection: RunFilter) -> list[ColumnElement[bool]]:
    column_values = (
        (runs.c.workflow_name, selection.workflow),
        (runs.c.workflow_version, selection.version),
        (runs.c.status, selection.status),
        (runs.c.tenant_id, selection.tenant),
        (runs.c.parent_run_id, selection.parent),
        (runs.c.route, selection.route),
    )
    found: list[ColumnElement[bool]] = [c == v for c, v in column_values if v is not None]
    if selection.created_after is not None:
        found.append(runs.c.created_at >= selection.created_after)
    if selection.created_before is not None:
        found.append(runs.c.created_at < selection.created_before)
    if selection.roots_only and selection.parent is None:
        # Spelled exactly as the partial index's predicate, so the planner can use it.
        found.append(runs.c.parent_run_id.is_(None))
    return found


def _batch_columns() -> Select[Any]:
    """The columns of a run a batch retry reads first (id, tenant, workflow, version and
    when created)."""
    return select(
        runs.c.id,
        runs.c.tenant_id,
        runs.c.workflow_name,
        runs.c.workflow_version,
        runs.c.created_at,
    )


def runs_by_id(run_ids: Sequence[str], tenant: str | None) -> Select[Any]:
    """The runs of `run_ids` (within `tenant` when set), as `newest_matching` reads them: the
    runs a batch retry by ids takes."""
    query = _batch_columns().where(runs.c.id.in_(run_ids))
    return query if tenant is None else query.where(runs.c.tenant_id == tenant)


def newest_matching(selection: RunFilter, limit: int) -> Select[Any]:
    """The newest `limit` runs `selection` matches (id, tenant, workflow, version and when
    created), in the order and index range of `runs_page`: the runs a batch retry by filter
    takes."""
    return (
        _batch_columns()
        .where(*_conditions(selection))
        .order_by(runs.c.created_at.desc(), runs.c.id.desc())
        .limit(limit)
    )


async def runs_page(
    conn: AsyncConnection, selection: RunFilter, *, after: RunKey | None, limit: int
) -> list[RunHeader]:
    """Up to `limit` runs matching `selection`, newest first ((created_at, id) descending),
    strictly after `after`."""
    conditions = _conditions(selection)
    if after is not None:
        # A row-value comparison: one index range on (…, created_at, id) on both databases.
        conditions.append(tuple_(runs.c.created_at, runs.c.id) < tuple_(*after))
    query = (
        select(*HEADER_COLUMNS)
        .where(*conditions)
        .order_by(runs.c.created_at.desc(), runs.c.id.desc())
        .limit(limit)
    )
    return [RunHeader(*row) for row in (await conn.execute(query)).all()]


def ids_in_range_statement(
    table: Table, low: str, high: str | None, limit: int, *, tenant: str | None = None
) -> Select[Any]:
    """Up to `limit` ids of `table` (runs, deployments: keyed by a UUID in text) from `low`
    (inclusive) to `high` (exclusive; None: no end), in id order, of `tenant` only when given
    (runs): the rows whose id starts with a prefix (the caller turns the prefix into the
    range: `engine.operations.id_prefixes`).

    One range of the primary key: a range, not `LIKE 'prefix%'`, because PostgreSQL uses a
    text index for LIKE only under the C collation or with `text_pattern_ops`. The tenant is
    compared through an expression so that no planner prefers the tenant's index (SQLite
    does, for an equality, and would read every run of the tenant): the key's range holds a
    few rows at most, whatever the tenant."""
    conditions: list[ColumnElement[bool]] = [table.c.id >= low]
    if high is not None:
        conditions.append(table.c.id < high)
    if tenant is not None:
        # tenant_id is NOT NULL, so the coalesce changes no answer: it only hides the column
        # from the index choice (see above).
        conditions.append(func.coalesce(table.c.tenant_id, "") == tenant)
    return select(table.c.id).where(*conditions).order_by(table.c.id).limit(limit)


async def ids_in_range(
    conn: AsyncConnection,
    table: Table,
    low: str,
    high: str | None,
    *,
    limit: int,
    tenant: str | None = None,
) -> list[str]:
    """The ids `ids_in_range_statement` selects."""
    statement = ids_in_range_statement(table, low, high, limit, tenant=tenant)
    return [row.id for row in (await conn.execute(statement)).all()]


async def children_page(
    conn: AsyncConnection,
    run_id: str,
    *,
    status: str | None,
    after: ChildKey | None,
    limit: int,
) -> list[RunHeader]:
    """Up to `limit` children of `run_id` in (spawner vertex, item index) order, strictly after
    `after`; only those in `status` when given."""
    conditions: list[ColumnElement[bool]] = [runs.c.parent_run_id == run_id]
    if status is not None:
        conditions.append(runs.c.status == status)
    if after is not None:
        conditions.append(tuple_(runs.c.parent_vertex_id, runs.c.item_index) > tuple_(*after))
    query = (
        select(*HEADER_COLUMNS)
        .where(*conditions)
        .order_by(runs.c.parent_vertex_id, runs.c.item_index)
        .limit(limit)
    )
    return [RunHeader(*row) for row in (await conn.execute(query)).all()]


async def restarts_of(conn: AsyncConnection, run_id: str) -> list[str]:
    """Ids of the runs started over from `run_id`, oldest first."""
    query = (
        select(runs.c.id)
        .where(runs.c.restarted_from == run_id)
        .order_by(runs.c.created_at, runs.c.id)
    )
    return [row.id for row in (await conn.execute(query)).all()]


async def vertex_log_lines(conn: AsyncConnection, run_id: str, *, limit: int) -> list[Any]:
    """The latest `limit` log lines of `run_id` written by its steps, oldest first."""
    query = (
        select(logs)
        .where(logs.c.run_id == run_id, logs.c.vertex_id.is_not(None))
        .order_by(logs.c.id.desc())
        .limit(limit)
    )
    rows = [row._mapping for row in (await conn.execute(query)).all()]
    rows.reverse()
    return rows


async def log_page(conn: AsyncConnection, run_id: str, *, after: int, limit: int) -> list[Any]:
    """Up to `limit` log lines of `run_id` with ids above `after`, in order."""
    query = (
        select(logs)
        .where(logs.c.run_id == run_id, logs.c.id > after)
        .order_by(logs.c.id)
        .limit(limit)
    )
    return [row._mapping for row in (await conn.execute(query)).all()]


async def workflow_summaries(conn: AsyncConnection) -> list[WorkflowSummary]:
    """Every published workflow, by name, with its serving version."""
    published = (
        select(
            versions.c.name,
            func.max(versions.c.version).label("latest"),
            func.count().label("n"),
            func.min(versions.c.created_at).label("first"),
            func.max(versions.c.created_at).label("last"),
        )
        .group_by(versions.c.name)
        .subquery()
    )
    query = (
        select(published, serving.c.serving_version)
        .outerjoin(serving, serving.c.name == published.c.name)
        .order_by(published.c.name)
    )
    return [
        WorkflowSummary(
            r.name, int(r.latest), int(r.n), float(r.first), float(r.last), r.serving_version
        )
        for r in (await conn.execute(query)).all()
    ]


async def ready_steps(conn: AsyncConnection, up_to: int) -> int:
    """How many steps are READY, counting no further than `up_to`: the cost is bounded by
    `up_to` rows of the partial READY index whatever the queue's real depth."""
    # The status is bound as a literal, not a parameter: PostgreSQL's generic plans use the
    # partial index only when the predicate visibly is `status = 'READY'`.
    is_ready = steps.c.status == literal(StepStatus.READY.value, literal_execute=True)
    ready = select(steps.c.id).where(is_ready).limit(up_to)
    query = select(func.count()).select_from(ready.subquery())
    return int((await conn.execute(query)).scalar_one())
