"""The durable schema: SQLModel tables for workflows, versions, runs, steps and run logs.

Times are stored as epoch seconds (double precision) taken from the injected `Clock`, so the
same comparisons (`not_before <= now`, `lease_expires_at < now`) work identically on SQLite and
PostgreSQL and tests can move time. Only `engine.store` queries these tables
(docs/architecture.md, 'Only the store speaks SQL').
Schema changes go through an Alembic migration in `engine/store/migrations/versions`; a test proves
the migrations produce exactly this metadata.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlmodel import Field, SQLModel


class RunStatus(StrEnum):
    """Every status a run can be in: runs are created RUNNING (PENDING is a step's status)."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StepStatus(StrEnum):
    """A step's status (docs/architecture.md, 'The data model')."""

    PENDING = "PENDING"
    """Waiting for dependencies."""
    READY = "READY"
    """Claimable once `not_before` has passed."""
    RUNNING = "RUNNING"
    """Claimed: `claim_token` and `lease_expires_at` are set."""
    PARKED = "PARKED"
    """Waiting for an external condition (a fan-out's children)."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RESOLVED = "RESOLVED"
    """An operator supplied the output of a failed step."""
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


DONE_STEP_STATUSES = (StepStatus.SUCCEEDED, StepStatus.RESOLVED, StepStatus.SKIPPED)
"""A step in one of these satisfies its dependants."""
TERMINAL_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


def _id_column() -> Column[int]:
    # BIGINT on PostgreSQL; plain INTEGER on SQLite so the column aliases ROWID and
    # autoincrements.
    return Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)


def _counter_column() -> Column[int]:
    return Column(Integer, nullable=False, server_default=text("0"))


def _json(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(JSON, nullable=nullable))


def _roots_index(name: str, *columns: str) -> Index:
    """An index of root runs only (`parent_run_id IS NULL`)."""
    roots = text("parent_run_id IS NULL")
    return Index(name, *columns, postgresql_where=roots, sqlite_where=roots)


class WorkflowVersion(SQLModel, table=True):
    """An immutable published version of a workflow document."""

    __tablename__ = "workflow_version"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_workflow_version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(sa_column=Column(String(200), nullable=False, index=True))
    version: int
    definition: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    definition_hash: str = Field(sa_column=Column(String(64), nullable=False))
    created_at: float = Field(sa_column=Column(Float, nullable=False))


class Run(SQLModel, table=True):
    """One execution of one workflow version."""

    __tablename__ = "run"
    # Lists of runs are read newest first by (created_at, id) (keyset pagination, see
    # `engine.store.listing`): each filter a run monitor uses has an index ending in those
    # columns, so a page is one index range. Lists of roots (runs no spawner started, what a
    # monitor shows by default) have partial indexes of their own: a large fan-out never
    # lies inside their ranges, and its children cost them nothing to insert or update. Every
    # full index is paid for by each child a spawner creates and ends, so there are few.
    __table_args__ = (
        Index("ix_run_created", "created_at", "id"),
        Index("ix_run_status_created", "status", "created_at", "id"),
        Index("ix_run_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_run_workflow_created", "workflow_name", "created_at", "id"),
        _roots_index("ix_run_roots_created", "created_at", "id"),
        _roots_index("ix_run_roots_status_created", "status", "created_at", "id"),
        _roots_index("ix_run_roots_tenant_created", "tenant_id", "created_at", "id"),
        _roots_index(
            "ix_run_roots_workflow_version_created",
            "workflow_name",
            "workflow_version",
            "created_at",
            "id",
        ),
        # A run's children in item order (the merge, `children`), and by status.
        Index("ix_run_parent_item", "parent_run_id", "parent_vertex_id", "item_index"),
        Index(
            "ix_run_parent_status_item", "parent_run_id", "status", "parent_vertex_id", "item_index"
        ),
        Index(
            "ix_run_restarted_from",
            "restarted_from",
            postgresql_where=text("restarted_from IS NOT NULL"),
            sqlite_where=text("restarted_from IS NOT NULL"),
        ),
        # A root's whole tree (a nested fan-out's grandchildren name their root, not their
        # parent's parent), and whether any of it still runs: run retention deletes a tree in
        # batches through it (`engine.store.run_purge`). Children only.
        Index(
            "ix_run_tree",
            "root_run_id",
            "status",
            postgresql_where=text("parent_run_id IS NOT NULL"),
            sqlite_where=text("parent_run_id IS NOT NULL"),
        ),
        # The reaper's look at runs reopened lately (`WorkQueue.release_stranded`); status
        # first, so SQLite (no statistics) prefers it to ix_run_status_created.
        Index(
            "ix_run_reopened",
            "status",
            "reopened_at",
            postgresql_where=text("reopened_at IS NOT NULL"),
            sqlite_where=text("reopened_at IS NOT NULL"),
        ),
    )

    id: str = Field(sa_column=Column(String(36), primary_key=True))
    workflow_name: str = Field(sa_column=Column(String(200), nullable=False))
    workflow_version: int
    definition_hash: str = Field(sa_column=Column(String(64), nullable=False))
    tenant_id: str = Field(sa_column=Column(String(200), nullable=False))
    status: str = Field(sa_column=Column(String(16), nullable=False))
    timeout_tier: str = Field(sa_column=Column(String(16), nullable=False))
    input: Any = _json()
    output: Any = _json()
    error: Any = _json()
    steps_remaining: int
    """Steps not yet SUCCEEDED/RESOLVED/SKIPPED; the run succeeds when it reaches 0."""
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    started_at: float | None = Field(default=None, sa_column=Column(Float))
    ended_at: float | None = Field(default=None, sa_column=Column(Float))
    idempotency_key: str | None = Field(
        default=None, sa_column=Column(String(300), unique=True, nullable=True)
    )
    parent_run_id: str | None = Field(default=None, sa_column=Column(String(36)))
    parent_vertex_id: str | None = Field(default=None, sa_column=Column(String(200)))
    item_index: int | None = None
    root_run_id: str | None = Field(default=None, sa_column=Column(String(36)))
    restarted_from: str | None = Field(default=None, sa_column=Column(String(36)))
    """Start over: the run this one repeats."""
    dlq_at: float | None = Field(default=None, sa_column=Column(Float))
    """Set when a child run ends FAILED (a dead letter); cleared when it is reprocessed."""
    reopened_at: float | None = Field(default=None, sa_column=Column(Float))
    """When an operator's action last released this run's held steps (Retry, Resolve,
    Reprocess, a child's revival resuming its parent): the reaper looks at the run's held
    steps again for a while after (`WorkQueue.release_stranded`)."""
    item: Any = _json()
    """A child run's item, when the spawner's `input` differs from it (else it is `input`)."""
    pinned_versions: Any = _json()
    """The version each child workflow of this run's fan-outs uses, by workflow name, fixed
    when the root run was created and copied to every descendant: a spawner executed again
    after a publish still starts its children on the same version. None on runs created
    before it existed (their spawners use the latest version)."""
    request_hash: str | None = Field(default=None, sa_column=Column(String(64)))
    """SHA-256 of what a submission with an idempotency key asked for, so the same key with
    another request is told apart from a retry of the same one."""
    route: str | None = Field(default=None, sa_column=Column(String(16)))
    """How a submitted run got its version (`RunRoute`): the serving version, a deployment's
    candidate, the version the request pinned, or the one of the run a start over repeats.
    None on child runs and runs created before routing existed (and start overs made before
    `start_over` was recorded)."""
    created_by: str | None = Field(default=None, sa_column=Column(String(200)))
    """Who created the run, in the operator actions' words: `key:<id>` (the REST key that
    submitted it, or that started it over or started the deployment a system run drives),
    `demo` (authentication off), `cli` (`schemabridge run`). None on child runs (their root's
    creator submitted the tree: `root_run_id` names it) and on runs created before it was
    recorded (docs/security.md, 'Audit')."""
    purge_started_at: float | None = Field(default=None, sa_column=Column(Float))
    """On a root run: when run retention (or `schemabridge runs purge`) began deleting its
    tree, set by the first batch that took it. Its tree goes across transactions, so from then
    on no action reopens it or a run under it (`engine.store.past_retention`)."""
    purge_retention_s: float | None = Field(default=None, sa_column=Column(Float))
    """The run retention of the worker's pass that marked the root (`purge_started_at`);
    None for an operator's `schemabridge runs purge`."""


class Step(SQLModel, table=True):
    """One vertex in one run; also the unit of the work queue."""

    __tablename__ = "step"
    __table_args__ = (
        UniqueConstraint("run_id", "vertex_id", name="uq_step_run_vertex"),
        # The claim query reads due READY steps oldest run first (steps are created with their
        # run), so a run's next step goes ahead of newer runs' first steps; the partial index
        # keeps it small however many finished steps accumulate (both dialects support WHERE).
        Index(
            "ix_step_ready_by_age",
            "created_at",
            "id",
            postgresql_where=text("status = 'READY'"),
            sqlite_where=text("status = 'READY'"),
        ),
        Index(
            "ix_step_ready_tenant",
            "tenant_id",
            "created_at",
            postgresql_where=text("status = 'READY'"),
            sqlite_where=text("status = 'READY'"),
        ),
        Index(
            "ix_step_running_lease",
            "lease_expires_at",
            postgresql_where=text("status = 'RUNNING'"),
            sqlite_where=text("status = 'RUNNING'"),
        ),
        # The steps that wait (a reason is set only while a step is READY or RUNNING and
        # cleared by every other transition): a fan-out's progress groups its children's from
        # this index instead of reading the step of every child (`waiting_children`).
        Index(
            "ix_step_waiting",
            "run_id",
            postgresql_where=text("wait_reason IS NOT NULL"),
            sqlite_where=text("wait_reason IS NOT NULL"),
        ),
        # Held steps (stopped runs'): after a reopen of thousands of runs the reaper reads
        # theirs here, not the whole table (`WorkQueue.release_stranded`).
        Index(
            "ix_step_held",
            "run_id",
            postgresql_where=text("status = 'PENDING' AND deps_pending = 0"),
            sqlite_where=text("status = 'PENDING' AND deps_pending = 0"),
        ),
    )

    id: int | None = Field(default=None, sa_column=_id_column())
    run_id: str = Field(sa_column=Column(String(36), nullable=False))
    vertex_id: str = Field(sa_column=Column(String(200), nullable=False))
    tenant_id: str = Field(sa_column=Column(String(200), nullable=False))
    status: str = Field(sa_column=Column(String(16), nullable=False))
    deps_pending: int
    """Dependencies not yet done; the step becomes READY when this reaches 0."""
    attempts: int = 0
    """Executions started (claims), including redispatches and lease recoveries."""
    auto_retries: int = 0
    """Redispatches after `external_overload` used so far (bounded by maxAutoRetries)."""
    tenant_item_taken: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )
    """An execution took the step's item from its tenant's rate window: later executions
    (redispatches, parks) do not take another (an operator's retry starts over)."""
    output: Any = _json()
    error: Any = _json()
    not_before: float = Field(sa_column=Column(Float, nullable=False))
    claim_token: str | None = Field(default=None, sa_column=Column(String(64)))
    lease_expires_at: float | None = Field(default=None, sa_column=Column(Float))
    claimed_by: str | None = Field(default=None, sa_column=Column(Text))
    """The service id (its heartbeat's name, `GET /services`) of the worker holding the claim;
    set and cleared with `claim_token`, None for a claimer that runs as no named service."""
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    started_at: float | None = Field(default=None, sa_column=Column(Float))
    ended_at: float | None = Field(default=None, sa_column=Column(Float))
    # Fan-out counters, on SPAWNER steps only. Each child run's end adds 1 to one counter in
    # the same transaction that ends the child, so the join is decided in O(1) per child.
    children_total: int | None = None
    children_succeeded: int = Field(default=0, sa_column=_counter_column())
    children_failed: int = Field(default=0, sa_column=_counter_column())
    children_cancelled: int = Field(default=0, sa_column=_counter_column())
    # Why the step waits (a `schemas.waiting.WaitReason` value and its message): written with
    # a park's or a redispatch's result, cleared by the claim that runs it again, so reading
    # it costs no statement of its own (docs/architecture.md, 'Why a step waits').
    wait_reason: str | None = Field(default=None, sa_column=Column(String(32)))
    wait_message: str | None = Field(default=None, sa_column=Column(Text))


class RunRoute(StrEnum):
    """How a submission chose its run's version (docs/architecture.md, 'Versions and
    deployments')."""

    SERVING = "serving"
    """The workflow's serving version."""
    CANDIDATE = "candidate"
    """A deployment's candidate: the run's hash fell inside the stage's weight."""
    PINNED = "pinned"
    """The request named the version."""
    SYSTEM = "system"
    """A system run the engine started itself (a deployment's `gradual_deploy`)."""
    START_OVER = "start_over"
    """An operator's start over: the version of the run it repeats (`restarted_from`), not
    one routing chose, so a deployment does not count it among its candidate's or serving
    version's submissions."""


class DeploymentStatus(StrEnum):
    """A deployment's status."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    """The candidate passed every stage and is the serving version."""
    ROLLED_BACK = "ROLLED_BACK"
    """The candidate failed too often (or an operator rolled it back): weight 0."""
    ABORTED = "ABORTED"
    """An operator stopped it, or its `gradual_deploy` run failed or was cancelled (the
    outcome's reason says which): weight 0, nothing promoted."""


class WorkflowServing(SQLModel, table=True):
    """Which version of a workflow new runs get: one row per workflow, read by every
    submission by its primary key (one cheap query, whatever the deployment's state)."""

    __tablename__ = "workflow_serving"

    name: str = Field(sa_column=Column(String(200), primary_key=True))
    serving_version: int
    """The version a submission that pins none gets (outside the candidate's share)."""
    candidate_version: int | None = None
    """The active deployment's candidate; None when no deployment is running."""
    candidate_weight: float = Field(
        default=0.0, sa_column=Column(Float, nullable=False, server_default=text("0"))
    )
    """Percent (0 to 100) of routed submissions the candidate gets."""
    deployment_id: str | None = Field(default=None, sa_column=Column(String(36)))
    """The active deployment (its id salts the routing hash)."""
    updated_at: float = Field(sa_column=Column(Float, nullable=False))
    """When `serving_version` was last set: what serves "since"."""
    updated_by: str | None = Field(default=None, sa_column=Column(String(200)))
    """Who last set `serving_version`: `publish`, `deployment:<id>` (a promotion), or an
    operator (`key:<id>`). A deployment's candidate and weight leave both as they are (the
    routing row names it in `deployment_id`): stamping them read as "v2 serves since the
    next deployment began"."""


class Deployment(SQLModel, table=True):
    """A gradual deployment of a candidate version, driven by its `gradual_deploy` run."""

    __tablename__ = "deployment"
    __table_args__ = (
        # At most one RUNNING deployment per workflow: the database refuses a second one even
        # when two requests race.
        Index(
            "uq_deployment_running",
            "workflow_name",
            unique=True,
            postgresql_where=text("status = 'RUNNING'"),
            sqlite_where=text("status = 'RUNNING'"),
        ),
        Index("ix_deployment_workflow_created", "workflow_name", "created_at"),
        Index("ix_deployment_status", "status"),
        Index("ix_deployment_run", "run_id"),
    )

    id: str = Field(sa_column=Column(String(36), primary_key=True))
    workflow_name: str = Field(sa_column=Column(String(200), nullable=False))
    serving_version: int
    """The version serving when the deployment started (the baseline it is compared with)."""
    candidate_version: int
    status: str = Field(sa_column=Column(String(16), nullable=False))
    stages: Any = _json(nullable=False)
    """[{weight, minRuns, minDurationSeconds}] in order; the last one's weight is 100."""
    rollback: Any = _json(nullable=False)
    """{maxFailureRatio, marginOverServing, minFinishedRuns}."""
    check_interval_s: float
    stage_index: int
    """The stage in force (0-based)."""
    stage_started_at: float = Field(sa_column=Column(Float, nullable=False))
    """When the stage in force began: a restart resumes its clock from here."""
    run_id: str = Field(sa_column=Column(String(36), nullable=False))
    """The `gradual_deploy` run that drives it."""
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    created_by: str = Field(sa_column=Column(String(200), nullable=False))
    ended_at: float | None = Field(default=None, sa_column=Column(Float))
    outcome: Any = _json()
    """How it ended: {reason, actor?, figures?}."""
    timeline: Any = _json(nullable=False)
    """Stage changes and the end, oldest first: [{at, event, stage, weight, ...}]."""
    candidate_refused: int = Field(default=0, sa_column=_counter_column())
    """Submissions routed to the candidate that its inputSchema refused (a 422 creates no
    run): each counts as a failed run of the candidate (docs/architecture.md, 'The
    verdict')."""
    refused_before_stage: int = Field(default=0, sa_column=_counter_column())
    """`candidate_refused` when the stage in force began: the stage's refusals are the
    difference."""


class RunLog(SQLModel, table=True):
    """A line of a run's log."""

    __tablename__ = "run_log"
    __table_args__ = (Index("ix_run_log_run", "run_id", "id"),)

    id: int | None = Field(default=None, sa_column=_id_column())
    run_id: str = Field(sa_column=Column(String(36), nullable=False))
    vertex_id: str | None = Field(default=None, sa_column=Column(String(200)))
    at: float = Field(sa_column=Column(Float, nullable=False))
    level: str = Field(sa_column=Column(String(8), nullable=False))
    message: str = Field(sa_column=Column(Text, nullable=False))
    data: Any = _json()


class Payload(SQLModel, table=True):
    """Outputs too large for a row (a merge's children outputs), referenced by id."""

    __tablename__ = "payload"
    __table_args__ = (
        Index("ix_payload_run", "run_id"),
        Index("ix_payload_ref_chunk", "ref", "chunk"),
        # Retention reads the chunks created before its cutoff, oldest first
        # (`children.expired_payloads`), not the whole store.
        Index("ix_payload_created", "created_at"),
    )

    id: int | None = Field(default=None, sa_column=_id_column())
    run_id: str = Field(sa_column=Column(String(36), nullable=False))
    ref: str = Field(sa_column=Column(String(36), nullable=False, server_default=text("''")))
    """The payload's id; a large payload (a list) is stored as several chunks under one ref."""
    chunk: int = Field(default=0, sa_column=_counter_column())
    size_bytes: int
    data: Any = _json(nullable=False)
    created_at: float = Field(sa_column=Column(Float, nullable=False))


class StoreIdentity(SQLModel, table=True):
    """The database's one row: a random id made by its first migration, which the Redis its
    processes coordinate through is bound to (`engine.operations.startup.bind_redis`)."""

    __tablename__ = "store_identity"

    one: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    """Always 1: the key that lets no second row in."""
    id: str = Field(sa_column=Column(String(64), nullable=False))


class TenantQuota(SQLModel, table=True):
    """A tenant's run budget; tenants without a row are unlimited."""

    __tablename__ = "tenant_quota"

    tenant_id: str = Field(sa_column=Column(String(200), primary_key=True))
    max_runs: int
    used_runs: int = Field(default=0, sa_column=_counter_column())


class DestinationCap(SQLModel, table=True):
    """Operator-set limits of a destination (`schemabridge destinations set-cap`; the durable
    copy, admission caches it in Redis)."""

    __tablename__ = "destination_cap"

    destination: str = Field(sa_column=Column(String(300), primary_key=True))
    max_concurrency: int
    rate_per_second: float | None = Field(default=None, sa_column=Column(Float))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class TenantRateLimit(SQLModel, table=True):
    """An operator-set rate limit of one tenant (the durable copy; admission caches it in
    Redis). Tenants without a row get `TENANT_RATE_PER_MINUTE`."""

    __tablename__ = "tenant_rate_limit"

    tenant_id: str = Field(sa_column=Column(String(200), primary_key=True))
    per_minute: int
    """GATEWAY calls (items) per minute."""
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class ApiKey(SQLModel, table=True):
    """A REST API key. Only the SHA-256 of the secret is stored; the secret itself is shown
    once, when the key is created."""

    __tablename__ = "api_key"

    id: str = Field(sa_column=Column(String(32), primary_key=True))
    """Public id (what `keys list` shows, `keys revoke` takes and access logs name)."""
    token_hash: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    """Hex SHA-256 of the whole secret (prefix included)."""
    name: str | None = Field(default=None, sa_column=Column(String(200)))
    tenant_id: str | None = Field(default=None, sa_column=Column(String(200)))
    """The one tenant the key acts for; None = an admin key (every tenant, admin routes)."""
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    expires_at: float | None = Field(default=None, sa_column=Column(Float))
    """None: never expires."""
    revoked_at: float | None = Field(default=None, sa_column=Column(Float))


class Secret(SQLModel, table=True):
    """A value a tenant's workflows reference as `{{ secrets.NAME }}`, encrypted: `ciphertext`
    is a Fernet token (engine/secret_cipher.py); the key is never in the database."""

    __tablename__ = "secret"

    tenant_id: str = Field(sa_column=Column(String(200), primary_key=True))
    name: str = Field(sa_column=Column(String(128), primary_key=True))
    ciphertext: str = Field(sa_column=Column(Text, nullable=False))
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))
    """When the value was last set (a rotation re-encrypts without changing it)."""
    updated_by: str = Field(sa_column=Column(String(200), nullable=False))
    """Who last set the value: `key:<id>` for a REST API key, `cli`."""


class AuditAction(StrEnum):
    """What an `audit_event` records (docs/security.md, 'Audit'). Run-level operator actions
    are not here: each run's log records them (`data.action`, `data.actor`)."""

    WORKFLOW_PUBLISHED = "workflow.published"
    SERVING_SET = "workflow.serving_set"
    KEY_CREATED = "key.created"
    KEY_REVOKED = "key.revoked"
    QUOTA_SET = "tenant.quota_set"
    QUOTA_RESET = "tenant.quota_reset"
    RATE_SET = "tenant.rate_set"
    RATE_RESET = "tenant.rate_reset"
    CAPS_SET = "destination.caps_set"
    CAPS_REMOVED = "destination.caps_removed"
    SECRET_SET = "secret.set"
    SECRET_DELETED = "secret.deleted"
    SECRET_ROTATED = "secret.rotated"
    """Re-encrypted under the first key (`detail.keyId`) by `secrets rotate`."""
    BREAKERS_RESET = "destination.breakers_reset"
    """Open or half-open breakers closed by hand (`detail.closed`: each layer and what it was)."""
    RUNS_PURGED = "runs.purged"
    """Ended run trees deleted by an operator (`schemabridge runs purge`; `detail`: the cutoff
    and what went). The workers' automatic passes log instead (`runs.purged` events)."""


class AuditSubject(StrEnum):
    """What kind of thing an audit event is about (its `subjectId` names which)."""

    WORKFLOW = "workflow"
    """`subjectId`: the workflow's name (the version is in `detail`)."""
    API_KEY = "api_key"
    """`subjectId`: the key's id."""
    TENANT = "tenant"
    DESTINATION = "destination"
    SECRET = "secret"
    """`subjectId`: `<tenant>/<NAME>` (a secret's name holds no `/`)."""
    RUNS = "runs"
    """`subjectId`: the cutoff of a purge (`2026-12-01T00:00:00Z`: runs ended before it)."""


class AuditEvent(SQLModel, table=True):
    """One administrative change: who, when, what, to which thing. Append-only: written in
    the transaction of the change it records, never updated or deleted, so it survives what
    it is about (a deleted secret, a revoked key)."""

    __tablename__ = "audit_event"
    # `GET /audit` reads newest first by id, whole or filtered by one of these.
    __table_args__ = (
        Index("ix_audit_actor", "actor", "id"),
        Index("ix_audit_action", "action", "id"),
        Index("ix_audit_subject", "subject_kind", "subject_id", "id"),
    )

    id: int | None = Field(default=None, sa_column=_id_column())
    at: float = Field(sa_column=Column(Float, nullable=False))
    actor: str | None = Field(default=None, sa_column=Column(String(200)))
    """`key:<id>`, `demo`, `cli`, `serve --demo`; None when the caller named nobody (only
    code inside a process does: tests, benchmarks)."""
    action: str = Field(sa_column=Column(String(64), nullable=False))
    """An `AuditAction`."""
    subject_kind: str = Field(sa_column=Column(String(32), nullable=False))
    """An `AuditSubject`."""
    subject_id: str = Field(sa_column=Column(String(400), nullable=False))
    detail: Any = _json()
    """What was set (a version, a quota, caps, a key's role…), never a secret's value."""
