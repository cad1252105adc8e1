"""Statements of the operator actions (retry, resolve, start over, reprocess, cancel): part of
`engine.store` (called only from there), and the records its role hands back.

Every statement over many runs is set-based: a batch retry of a thousand runs or the cancel
of a fan-out with thousands of children is a handful of statements, not one transaction per
run. Lists of ids are sent in chunks of `ID_CHUNK` (a bound parameter each, well under both
databases' limits). A cancel finds a run's descendants with one recursive query over
`parent_run_id` instead of sending their ids at all.

Lock order. A worker recording results locks step rows (in id order) before run rows, and a
child run before its parent's spawner step and run, so a root run last; the actions that may
meet such a flush take their locks in the same order (steps, then runs, the root last), so
the two wait for each other instead of deadlocking. A retry, resolve or reprocess ends by
locking the root run to read again whether it was started over, and a start over locks the
run it repeats first, its only existing row (`engine.store.restarts`). Where PostgreSQL still
reports a deadlock or a serialization failure, the action's transaction is run again (see
`rolled_back_by_conflict`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import Integer, literal, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import CTE

from engine.store import recovery
from engine.store.dialect import dialect_of
from engine.store.models import Run, RunStatus, Step, StepStatus, TenantQuota
from engine.store.records import DeploymentRecord, LogLine, ServingRecord
from engine.store.recovery import JoinReopened
from schemas.definitions import Workflow
from schemas.errors import NotFound, WrongState

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
quotas = TenantQuota.__table__  # type: ignore[attr-defined]

ID_CHUNK = 1000
"""Ids per statement when a statement takes a list of them."""
MAX_TREE_DEPTH = 16
"""How deep a cancel follows nested fan-outs (as deep as fan-outs nest)."""
LIVE_RUN_STATUSES = (RunStatus.RUNNING.value,)
OPEN_STEP_STATUSES = (
    StepStatus.PENDING.value,
    StepStatus.READY.value,
    StepStatus.PARKED.value,
    StepStatus.RUNNING.value,
)
"""Steps a cancel ends: not started, waiting, or in flight (whose result is then dropped)."""
CONFLICT_SQLSTATE_CLASS = "40"
"""SQLSTATE class "transaction rollback" (serialization failure 40001, deadlock 40P01)."""


class Action(StrEnum):
    """The operator actions, as named in run logs (`data["action"]`)."""

    RETRY = "retry"
    BATCH_RETRY = "batch_retry"
    RESOLVE = "resolve"
    START_OVER = "start_over"
    REPROCESS = "reprocess"
    CANCEL = "cancel"


# ── records ─────────────────────────────────────────────────────────────────────────────────


@dataclass
class RetryOutcome:
    """What a retry of some runs did. `refused` maps each run not retried to its status, or
    to None when it does not exist (or belongs to another tenant)."""

    retried: list[str] = field(default_factory=list)
    steps: Counter[str] = field(default_factory=Counter)
    """FAILED steps made READY, by run."""
    held: Counter[str] = field(default_factory=Counter)
    """Steps held back when the run failed (`recovery.HELD`) made READY too, by run."""
    refused: dict[str, str | None] = field(default_factory=dict)
    reopens: dict[str, ReopenedAncestor] = field(default_factory=dict)
    """Runs whose retry reopens (retried) or would reopen (spared, and in `refused` as
    FAILED) the join of an ancestor that had ended SUCCEEDED: the steps after it run again."""
    stuck: dict[str, StuckJoins] = field(default_factory=dict)
    """Runs retried whose joins fail again at once: their children are still FAILED."""
    called: list[RetriedSteps] = field(default_factory=list)
    """The steps that run again, by tenant and workflow version: a thousand runs of one
    workflow are one entry, so what they call (an open breaker's warning) is looked up once,
    not per run."""
    engine_owned: dict[str, WrongState] = field(default_factory=dict)
    """Runs refused (and in `refused`) because they are the engine's own `gradual_deploy`
    runs: the refusal a retry of each alone answers (`deployment_run`)."""
    started_over: dict[str, WrongState] = field(default_factory=dict)
    """FAILED runs refused (and in `refused`) because they, or the root run above them, were
    started over: the refusal a retry of each alone answers (`started_over`)."""
    past_retention: dict[str, WrongState] = field(default_factory=dict)
    """FAILED runs refused (and in `refused`) because their root ended before run
    retention's cutoff: the refusal a retry of each alone answers (`run_past_retention`)."""
    failed_errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A preview's only: the errors of the run's FAILED steps, by vertex (what its fix-first
    warning reads)."""


@dataclass(frozen=True)
class RetriedSteps:
    """The vertices of `workflow` whose FAILED or held steps a retry made READY in runs of
    `tenant_id`."""

    tenant_id: str
    workflow: Workflow
    vertices: frozenset[str]


@dataclass(frozen=True)
class RerunFacts:
    """What an operator's retry or start over of a run would run again, and what became of
    that version: is it still routed new runs, was it rolled back."""

    workflow: str
    version: int
    route: str | None
    """How the submission the re-run repeats chose its version (`RunRoute`): the run's own
    route, or for a start over the route of the run it started over (`start_over` says only
    that an operator made it, not whether the original request pinned the version)."""
    parent_run_id: str | None
    serving: ServingRecord | None
    """The workflow's routing row now (None: it has none)."""
    rolled_back: DeploymentRecord | None
    """The latest deployment that rolled `version` back (None: none did)."""
    tenant_id: str | None = None
    """The run's tenant, which a submission of its input anew must name (None: the runs are
    of several tenants)."""


@dataclass(frozen=True)
class RerunGroup:
    """The runs of one workflow version a batch retry would run again, as its rolled-back
    warning needs them (`DeploymentStore.rerun_facts_of`)."""

    workflow: str
    version: int
    routed: bool
    """Some of them were routed to the version (serving or candidate), not pinned to it."""
    parent_run_id: str | None
    """One of their parents when they are all child runs; None when any is a root run."""
    tenant_id: str | None = None
    """Their tenant when they all have one; None when they are of several tenants."""


def group_reruns(runs: Iterable[RerunGroup]) -> list[RerunGroup]:
    """Runs' versions (`DeploymentStore.run_versions`' values: a group of one each) as one
    group per workflow version, by name and version: routed when any run is, a parent only
    when every run is a child, a tenant only when every run has that one."""
    groups: dict[tuple[str, int], RerunGroup] = {}
    for run in runs:
        key = (run.workflow, run.version)
        seen = groups.get(key)
        if seen is None:
            groups[key] = run
            continue
        parent = None if None in (seen.parent_run_id, run.parent_run_id) else seen.parent_run_id
        tenant = seen.tenant_id if seen.tenant_id == run.tenant_id else None
        groups[key] = RerunGroup(
            run.workflow, run.version, seen.routed or run.routed, parent, tenant
        )
    return [groups[key] for key in sorted(groups)]


@dataclass(frozen=True)
class BatchRetryCount:
    """What a batch retry by filter or by ids would take, read without retrying
    (`OperatorActionsStore.batch_retry_count`)."""

    count: int
    """The runs the filter matches, counted up to the batch's `limit + 1`."""
    called: list[RetriedSteps]
    """The steps the newest `limit` would run again, by tenant and workflow version."""
    fix_first: dict[str, str]
    """Those of the newest `limit` with a FAILED step whose error kind the workflow or the
    input causes (`FIX_FIRST_KINDS`, its own or its failed children's commonest): their
    retry fails the same way at once. Run id to kind, newest first."""
    taking: int = 0
    """Of the newest `limit`, the runs the batch would retry: FAILED, and under no run that
    has ended SUCCEEDED (what `called` and `fix_first` are read from)."""
    under_succeeded: int = 0
    """Of the newest `limit`, the FAILED runs the batch would skip because their retry would
    reopen the join of a run that has ended SUCCEEDED (`parent_succeeded`)."""
    started_over: int = 0
    """Of the newest `limit`, the FAILED runs the batch would skip because they (or the root
    run above them) were started over (`started_over`)."""
    past_retention: int = 0
    """Of the newest `limit`, the FAILED runs the batch would skip because their root ended
    before run retention's cutoff (`run_past_retention`)."""
    not_failed: dict[str, int] = field(default_factory=dict)
    """Of the newest `limit`, the runs not FAILED (the batch skips them), by status."""
    versions: list[RerunGroup] = field(default_factory=list)
    """The workflow versions of the runs the batch would take, one entry each."""
    unknown: int = 0
    """Of the ids a batch by ids names, those no run of the caller's tenant has
    (`run_not_found`)."""
    engine_owned: int = 0
    """Of the ids a batch by ids names, a deployment's own `gradual_deploy` runs
    (`deployment_run`)."""
    stuck: dict[str, JoinBlock] = field(default_factory=dict)
    """Of the runs the batch would take, those whose joins would fail again at once (their
    children are still FAILED, or CANCELLED: the batch's `stuck`), newest first; run id to
    what keeps the join failing."""
    skipped_ids: dict[str, list[str]] = field(default_factory=dict)
    """The newest `SKIPPED_SHOWN` ids of each kind of run counted as skipped, newest first:
    of the runs not FAILED by their status (the keys of `not_failed`), else by
    `SKIPPED_STARTED_OVER`, `SKIPPED_PAST_RETENTION`, `SKIPPED_UNDER_SUCCEEDED`,
    `SKIPPED_UNKNOWN` and `SKIPPED_ENGINE_OWNED` (a batch by ids: in the order named)."""
    new_runs: dict[str, str] = field(default_factory=dict)
    """Of the started-over ids in `skipped_ids`, the run each (or its root) was started over
    as."""


SKIPPED_SHOWN = 10
"""The most ids `BatchRetryCount.skipped_ids` holds of each kind of skipped run."""
SKIPPED_STARTED_OVER = "started_over"
SKIPPED_PAST_RETENTION = "past_retention"
SKIPPED_UNDER_SUCCEEDED = "under_succeeded"
SKIPPED_UNKNOWN = "unknown"
SKIPPED_ENGINE_OWNED = "engine_owned"


@dataclass(frozen=True)
class ReopenedAncestor:
    """The ancestor run, ended SUCCEEDED, whose join a retry of a child below it reopens."""

    run_id: str
    join: str
    """Its MERGE vertex (the spawner when no MERGE joins it)."""


@dataclass(frozen=True)
class StuckJoins:
    """A run's MERGE steps that failed because children FAILED or were CANCELLED, and how
    many are."""

    joins: list[str]
    children_failed: int
    fix_first: str | None = None
    """The failed children's commonest error kind when it is one the workflow or the input
    causes (`FIX_FIRST_KINDS`): then a reprocess fails the same way too."""
    children_cancelled: int = 0
    """CANCELLED children the joins do not tolerate (their errors' `childrenCancelled`): no
    retry or reprocess runs them again, so only a resolve of the join or a start over helps."""


class JoinBlock(StrEnum):
    """What keeps a run's failed join failing when the run is retried, and so what helps."""

    FAILED_CHILDREN = "failed_children"
    """Its children are still FAILED: a reprocess runs them again and reopens the join."""
    FIX_FIRST = "fix_first"
    """They failed on the workflow or their input, which a reprocess repeats."""
    CANCELLED_CHILDREN = "cancelled_children"
    """Children it does not tolerate were CANCELLED, which nothing runs again."""


@dataclass(frozen=True)
class ResolveOutcome:
    changed: bool
    run_status: str
    """The run's status after the resolve (RUNNING, SUCCEEDED, or FAILED when another of its
    steps is still FAILED)."""
    reopened: tuple[JoinReopened, ...] = ()
    """The joins of runs above it that reopened: a child run whose last FAILED step is
    resolved comes back into its parent's join, as a retried one does (the parent's first,
    then up the tree); a run that had ended SUCCEEDED runs the steps after it again."""


@dataclass(frozen=True)
class StartOverOutcome:
    new_run_id: str
    created: bool
    old_status: str
    new_status: str = RunStatus.RUNNING.value
    """The new run's status now (RUNNING when this call created it)."""


@dataclass(frozen=True)
class StartOverLook:
    """What a start over of a run would do now, read without doing it (one read of the
    run's row): the start over made before (`before`: a start over answers its run), else
    the run's status and what the new run would run (`facts`: its version and what became
    of it)."""

    status: str
    version: int
    """The run's workflow version: the one a new run would run."""
    before: StartOverOutcome | None = None
    facts: RerunFacts | None = None


@dataclass(frozen=True)
class ReprocessOutcome:
    revived: int
    run_status: str
    reopened: tuple[JoinReopened, ...] = ()
    """The joins the reprocess reopened (`recovery.Reprocessed.reopened`)."""
    refused: str | None = None
    """A preview's only: the status of a run the reprocess would refuse (CANCELLED, or a
    deployment's `gradual_deploy` run)."""
    refusal: str | None = None
    """A preview's only: the reprocess's refusal in its words, when it has some beyond the
    status (a `gradual_deploy` run's names its deployment)."""


@dataclass(frozen=True)
class CancelOutcome:
    runs_cancelled: int
    """The run and its descendants that were still going."""
    steps_cancelled: int
    run_status: str
    stopped: frozenset[str] = frozenset()
    """The ids that name every run cancelled, as run or as parent (`stopped_ids`): what the
    workers are told, so that the steps they hold send nothing more."""
    aborted_deployment: DeploymentRecord | None = None
    """The deployment the run drove (a `gradual_deploy` run), aborted with it."""


def stopped_ids(run_id: str, cancelled: Iterable[Any]) -> frozenset[str]:
    """`run_id` and the cancelled runs with cancelled children: every cancelled run is one of
    them or a child of one, so a step is covered by its run id or its parent's, and a fan-out
    of any size is one id. A parent that goes on (the cancel of one of its children) is not
    named: its other children go on too."""
    rows = list(cancelled)
    ids = {row.id for row in rows}
    return frozenset({run_id} | {row.parent_run_id for row in rows if row.parent_run_id in ids})


# ── helpers ─────────────────────────────────────────────────────────────────────────────────


def run_not_found(run_id: str) -> NotFound:
    """The refusal for a run that does not exist or that the caller's tenant cannot see: "no
    run 'ID'", the one wording every front door shows (the operations layer uses it too)."""
    return NotFound(f"no run {run_id!r}", code="run_not_found")


def chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), ID_CHUNK):
        yield list(ids[start : start + ID_CHUNK])


def action_line(
    run_id: str, action: Action, actor: str, message: str, vertex_id: str | None = None
) -> LogLine:
    """The log line an action writes on a run it changed."""
    return LogLine(run_id, "info", message, vertex_id, {"action": action.value, "actor": actor})


def rolled_back_by_conflict(exc: DBAPIError) -> bool:
    """Whether the database rolled the transaction back because it met another one (a
    deadlock or a serialization failure): running it again is safe and usually succeeds."""
    state = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return isinstance(state, str) and state.startswith(CONFLICT_SQLSTATE_CLASS)


# ── reads ───────────────────────────────────────────────────────────────────────────────────

_RUN_COLUMNS = (
    runs.c.id,
    runs.c.status,
    runs.c.tenant_id,
    runs.c.workflow_name,
    runs.c.workflow_version,
    runs.c.parent_run_id,
    runs.c.parent_vertex_id,
    runs.c.root_run_id,
    runs.c.route,
    runs.c.restarted_from,
)


async def run_states(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, Any]:
    """(id, status, tenant_id, workflow_name, workflow_version, parent_run_id,
    parent_vertex_id, root_run_id, route, restarted_from) of the runs that exist."""
    found: dict[str, Any] = {}
    for chunk in chunks(run_ids):
        rows = await conn.execute(select(*_RUN_COLUMNS).where(runs.c.id.in_(chunk)))
        found.update((row.id, row) for row in rows.all())
    return found


async def run_state(conn: AsyncConnection, run_id: str, *, lock: bool = False) -> Any:
    """The run's row as `run_states` reads it, or None; with `lock`, locked until the
    transaction ends (read as the latest commit left it, once a holder's lock is gone)."""
    if not lock:
        return (await run_states(conn, [run_id])).get(run_id)
    query = select(*_RUN_COLUMNS).where(runs.c.id == run_id).with_for_update()
    return (await conn.execute(query)).first()


async def whole_run(conn: AsyncConnection, run_id: str) -> Any:
    """Every column of one run (it must exist), as a mapping."""
    return (await conn.execute(select(runs).where(runs.c.id == run_id))).one()._mapping


async def step_for_update(conn: AsyncConnection, run_id: str, vertex_id: str) -> Any:
    """(id, status, output) of one step, locked until the transaction ends; None if absent."""
    query = (
        select(steps.c.id, steps.c.status, steps.c.output)
        .where(steps.c.run_id == run_id, steps.c.vertex_id == vertex_id)
        .with_for_update()
    )
    return (await conn.execute(query)).first()


async def vertex_ids(conn: AsyncConnection, run_id: str) -> list[str]:
    """The vertex ids of a run's steps, sorted."""
    query = select(steps.c.vertex_id).where(steps.c.run_id == run_id).order_by(steps.c.vertex_id)
    return [str(vertex) for vertex in (await conn.execute(query)).scalars()]


async def other_failed_steps(conn: AsyncConnection, run_id: str, step_id: int) -> list[Any]:
    """(vertex_id, error) of the run's FAILED steps other than `step_id`, oldest first."""
    query = (
        select(steps.c.vertex_id, steps.c.error)
        .where(
            steps.c.run_id == run_id,
            steps.c.status == StepStatus.FAILED.value,
            steps.c.id != step_id,
        )
        .order_by(steps.c.id)
    )
    return list((await conn.execute(query)).all())


# ── retry ───────────────────────────────────────────────────────────────────────────────────


async def failed_errors(conn: AsyncConnection, run_id: str) -> dict[str, dict[str, Any]]:
    """The errors of `run_id`'s FAILED steps, by vertex: what `ready_failed_steps` would make
    READY, and what a retry's fix-first warning reads."""
    query = select(steps.c.vertex_id, steps.c.error).where(
        steps.c.run_id == run_id, steps.c.status == StepStatus.FAILED.value
    )
    return {row.vertex_id: row.error or {} for row in (await conn.execute(query)).all()}


async def held_vertices(conn: AsyncConnection, run_id: str) -> list[str]:
    """The vertices of `run_id`'s steps held back when it stopped (`recovery.HELD`, read from
    `ix_step_held`): what `recovery.release_held` would make READY."""
    query = select(steps.c.vertex_id).where(steps.c.run_id == run_id, recovery.HELD)
    return [row.vertex_id for row in (await conn.execute(query)).all()]


def retried_words(failed: int, held: int) -> str:
    """What a retry runs again, as its answer, its preview and the run's log say it: "1
    failed step run again", with ", and 2 steps stopped when the run failed" when it released
    steps held back when the run failed."""
    words = f"{failed} failed step{'' if failed == 1 else 's'} run again"
    if held:
        words += f", and {held} step{'' if held == 1 else 's'} stopped when the run failed"
    return words


async def ready_failed_steps(
    conn: AsyncConnection, run_ids: Sequence[str], now: float
) -> dict[str, list[str]]:
    """The FAILED steps of `run_ids` become READY to run again (`recovery.ready_again`: a
    reprocess's revived steps get the same). Returns their vertex ids, by run."""
    made_ready: dict[str, list[str]] = {}
    for chunk in chunks(run_ids):
        rows = await conn.execute(
            update(steps)
            .where(steps.c.run_id.in_(chunk), steps.c.status == StepStatus.FAILED.value)
            .values(recovery.ready_again(now))
            .returning(steps.c.run_id, steps.c.vertex_id)
        )
        for row in rows.all():
            made_ready.setdefault(row.run_id, []).append(row.vertex_id)
    return made_ready


async def reopen_failed_runs(
    conn: AsyncConnection, run_ids: Sequence[str], now: float
) -> list[Any]:
    """FAILED runs among `run_ids` run again (a dead letter stops being one), started anew at
    `now` (`recovery.running_again`, as `ready_failed_steps` does for steps). Returns (id,
    parent_run_id, parent_vertex_id) of each; the status guard makes concurrent retries
    reopen each run once."""
    reopened: list[Any] = []
    for chunk in chunks(run_ids):
        rows = await conn.execute(
            update(runs)
            .where(runs.c.id.in_(chunk), runs.c.status == RunStatus.FAILED.value)
            .values(recovery.running_again(now))
            .returning(runs.c.id, runs.c.parent_run_id, runs.c.parent_vertex_id)
        )
        reopened += rows.all()
    return reopened


# ── resolve ─────────────────────────────────────────────────────────────────────────────────


async def resolve_step(conn: AsyncConnection, step_id: int, output: Any, now: float) -> None:
    """A FAILED step becomes RESOLVED with the operator's `output` (it counts as done)."""
    await conn.execute(
        update(steps)
        .where(steps.c.id == step_id, steps.c.status == StepStatus.FAILED.value)
        .values(
            status=StepStatus.RESOLVED.value,
            output=output,
            error=None,
            ended_at=now,
            claim_token=None,
            claimed_by=None,
            lease_expires_at=None,
        )
    )


async def resume_resolved_run(conn: AsyncConnection, run_id: str, now: float) -> bool:
    """A FAILED run whose last failed step was resolved runs again, started anew at `now`
    (as `reopen_failed_runs`); True when it did."""
    result = await conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.FAILED.value)
        .values(recovery.running_again(now))
    )
    return bool(result.rowcount == 1)


async def point_error_at(conn: AsyncConnection, run_id: str, vertex_id: str, error: Any) -> None:
    """A run that stays FAILED shows the error of a step that is still FAILED."""
    await conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(error={"vertexId": vertex_id, **(error or {})})
    )


async def current_status(conn: AsyncConnection, run_id: str) -> str:
    return str((await conn.execute(select(runs.c.status).where(runs.c.id == run_id))).scalar_one())


# ── start over ──────────────────────────────────────────────────────────────────────────────


async def run_id_by_key(conn: AsyncConnection, key: str) -> str | None:
    query = select(runs.c.id).where(runs.c.idempotency_key == key)
    found = (await conn.execute(query)).scalar_one_or_none()
    return None if found is None else str(found)


async def insert_run_once(conn: AsyncConnection, row: dict[str, Any]) -> bool:
    """Insert a run unless one with its idempotency key exists (the database decides, so two
    concurrent inserts of one key create one run). True when this call created it."""
    statement = (
        dialect_of(conn)
        .insert(runs)
        .values(**row)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(runs.c.id)
    )
    return (await conn.execute(statement)).first() is not None


async def count_against_quota(conn: AsyncConnection, tenant_id: str) -> None:
    """A new run uses one of its tenant's runs (tenants without a quota are unlimited)."""
    await conn.execute(
        update(quotas)
        .where(quotas.c.tenant_id == tenant_id)
        .values(used_runs=quotas.c.used_runs + 1)
    )


# ── cancel ──────────────────────────────────────────────────────────────────────────────────


def run_tree(run_id: str) -> CTE:
    """The ids of `run_id` and every run under it (children, grandchildren, ...), at most
    `MAX_TREE_DEPTH` levels down, as a recursive query over `parent_run_id`."""
    anchor = runs.alias("tree_root")
    below = runs.alias("tree_child")
    tree = (
        select(anchor.c.id, literal(0, Integer).label("depth"))
        .where(anchor.c.id == run_id)
        .cte("run_tree", recursive=True)
    )
    return tree.union_all(
        select(below.c.id, tree.c.depth + 1).where(
            below.c.parent_run_id == tree.c.id, tree.c.depth < MAX_TREE_DEPTH
        )
    )


def _live_runs_of(tree: CTE) -> Any:
    live = runs.alias("live_run")
    return select(live.c.id).where(
        live.c.id.in_(select(tree.c.id)), live.c.status.in_(LIVE_RUN_STATUSES)
    )


async def cancel_open_steps(conn: AsyncConnection, tree: CTE, now: float) -> int:
    """The open steps of the tree's runs that are still going become CANCELLED. A RUNNING
    step's claim stops being live (status and token), so its result is dropped as a late
    one. Rows are locked in id order, as a worker's flush locks them."""
    locked = steps.alias("locked_step")
    targets = (
        select(locked.c.id)
        .where(
            locked.c.run_id.in_(_live_runs_of(tree)),
            locked.c.status.in_(OPEN_STEP_STATUSES),
        )
        .order_by(locked.c.id)
        .with_for_update(of=locked)
    )
    result = await conn.execute(
        update(steps)
        .where(steps.c.id.in_(targets.scalar_subquery()))
        .values(
            status=StepStatus.CANCELLED.value,
            ended_at=now,
            claim_token=None,
            claimed_by=None,
            lease_expires_at=None,
            wait_reason=None,
            wait_message=None,
        )
        .returning(steps.c.id)  # SQLite's rowcount of an UPDATE with a CTE is -1
    )
    return len(result.all())


async def cancel_live_runs(conn: AsyncConnection, tree: CTE, now: float) -> list[Any]:
    """The tree's runs that are still going end CANCELLED. Returns (id, parent_run_id,
    parent_vertex_id) of each."""
    result = await conn.execute(
        update(runs)
        .where(runs.c.id.in_(_live_runs_of(tree).scalar_subquery()))
        .values(status=RunStatus.CANCELLED.value, ended_at=now)
        .returning(runs.c.id, runs.c.parent_run_id, runs.c.parent_vertex_id)
    )
    return list(result.all())
