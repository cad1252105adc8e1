"""The REST API's answers as the command line reads them.

These mirror the operations layer's views (`engine.operations.views` and its siblings) with
the fields the CLI shows, under the same names. They are the client's own for two reasons:
importing the operations layer loads SQLAlchemy, the store and admission (measured: 0.85 s of
CPU on every command, against 0.7 s for the whole CLI without it), which a command that only
sends HTTP requests should not pay; and a client must read what a newer or older server sends,
so every model ignores nothing it does not know but keeps it (`extra="allow"`), and `raw()`
gives the answer back as it came for `--output json`. tests/unit/test_cli_wire.py checks that
every field here is a field of the view it mirrors, so a renamed field fails there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

T = TypeVar("T")


class Wire(BaseModel):
    """Base of every answer: camelCase on the wire, unknown fields kept, immutable.

    Each model's validator is built the first time it reads an answer (`defer_build`), not
    when this module is imported: a command reads one or two of these models, and building all
    of them cost every command, `--help` too, ~25 ms at start-up."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        defer_build=True,
    )

    def raw(self) -> Any:
        """The answer as the API sent it (the fields it sent, unknown ones included)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Page(Wire, Generic[T]):
    """A list answer: `items`, and `next` (the cursor of the following page) when it pages."""

    items: list[T]
    next: str | None = None


@dataclass(frozen=True)
class RunQuery:
    """Which runs a list or a batch retry covers (the API's run filter); set fields AND."""

    workflow: str | None = None
    version: int | None = None
    status: str | None = None
    tenant: str | None = None
    parent: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    roots_only: bool = False
    """Root runs only. Unlike the API's default (roots), False here is every run: the
    client always sends which (`client_routes.RunsApi.list`), so the filter means the same
    to any API version."""
    route: str | None = None
    """How the runs got their version: serving, candidate, pinned, system or start_over."""


# ── workflows ───────────────────────────────────────────────────────────────────────────────


class PublishResult(Wire):
    name: str
    version: int
    created: bool
    serving: bool | None = None
    """None: an API before publish answered it (the CLI then says nothing of serving)."""
    serving_version: int | None = None
    hint: str | None = None
    """How to make the version serve, when it does not."""


class WorkflowSummary(Wire):
    name: str
    latest_version: int
    serving_version: int | None = None
    versions: int
    updated_at: float


class VersionSummary(Wire):
    name: str
    version: int
    definition_hash: str
    created_at: float


class VersionDetail(VersionSummary):
    document: dict[str, Any]


class GraphNode(Wire):
    id: str
    type: str
    depends_on: list[str]
    workflow: str | None = None
    layer: int
    order: int


class GraphView(Wire):
    name: str
    version: int
    nodes: list[GraphNode]


# ── runs ────────────────────────────────────────────────────────────────────────────────────


class SentRequestView(Wire):
    method: str
    url: str
    header_names: list[str] = []
    body_excerpt: str = ""
    body_bytes: int = 0
    body_truncated: bool = False


class ChildCauseView(Wire):
    kind: str
    count: int
    read: int


class ErrorView(Wire):
    kind: str
    message: str = ""
    vertex_id: str | None = None
    http_status: int | None = None
    body_excerpt: str | None = None
    attempts: int | None = None
    retry_after_s: float | None = None
    child_cause: ChildCauseView | None = None
    children_cancelled: int | None = None
    request: SentRequestView | None = None


class RunSummary(Wire):
    id: str
    workflow: str
    version: int
    tenant_id: str
    status: str
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    parent_run_id: str | None = None
    parent_vertex_id: str | None = None
    item_index: int | None = None
    root_run_id: str | None = None
    restarted_from: str | None = None
    started_over_as: str | None = None
    """None from an API before it was answered, as from a run nobody started over."""
    dlq_at: float | None = None
    route: str | None = None
    error: ErrorView | None = None


class SubmitResult(Wire):
    run: RunSummary
    created: bool


class AttemptView(Wire):
    execution: int
    attempt: int
    at: float
    level: str
    message: str
    refused: str | None = None
    """The kind of refusal when admission refused the attempt before any call was made."""
    body_excerpt: str | None = None
    """The start of the answer's body when the attempt failed on an answer."""
    worker: str | None = None
    """The service id of the worker that made the attempt (None: not said)."""
    lost: str | None = None
    """Set on an execution that ended without a result (`lease_expired`, `worker_stopped`,
    `run_failed`): not an HTTP attempt, though a call may have been sent."""


class SpawnerCounts(Wire):
    total: int
    succeeded: int
    failed: int
    cancelled: int


class Waiting(Wire):
    """Why a step waits (a rate limit, a park, a breaker...), when the API says so."""

    reason: str | None = None
    message: str | None = None
    until: float | None = None


class HolderView(Wire):
    """Who holds a RUNNING step's claim and whether it is alive, when the API says so."""

    worker: str | None = None
    state: str = "unknown"
    last_seen: float | None = None
    silent_s: float | None = None


class StepView(Wire):
    vertex_id: str
    type: str | None = None
    status: str
    attempts: int = 0
    auto_retries: int = 0
    output: Any = None
    """What it produced; a deployment's stage step: its verdict (`outcome`, `verdict`)."""
    error: ErrorView | None = None
    started_at: float | None = None
    ended_at: float | None = None
    children: SpawnerCounts | None = None
    history: list[AttemptView] = []
    waiting: Waiting | None = None
    lease_expires_at: float | None = None
    holder: HolderView | None = None


class WaitingChildren(Wire):
    """A run's children that wait for one reason (`reason` as `Waiting.reason`)."""

    reason: str
    children: int
    message: str = ""
    """What is true of all of them: the limit and how to raise it, the breaker, …"""
    until: float | None = None


class HeldChildren(Wire):
    """A fan-out's running children whose steps one worker presumed dead holds."""

    holder: HolderView
    children: int
    lease_expires_at: float | None = None
    """The latest end of their leases: every one of them is taken back by then."""


class FanoutProgress(Wire):
    total: int = 0
    pending: int = 0
    """Deprecated name of `waiting_children`, which an older API does not send."""
    running: int = 0
    waiting_children: int | None = None
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def waiting_count(self) -> int:
        """Children RUNNING with no step held by a worker (under either name)."""
        return self.pending if self.waiting_children is None else self.waiting_children

    waiting: list[WaitingChildren] = []
    """Children with a waiting step, by reason, most first (empty from an API that does not
    say)."""
    presumed_dead: list[HeldChildren] = []
    """Running children held by a worker presumed dead, by worker, most first (empty from an
    API that does not say)."""


class RunDetail(RunSummary):
    input: Any = None
    output: Any = None
    idempotency_key: str | None = None
    created_by: str | None = None
    """None from an API before it was recorded, and on child runs."""
    restarts: list[str] = []
    restarted_from_purged: bool = False
    """The run `restarted_from` names was deleted by run retention (False from an API before
    it answered it)."""
    steps: list[StepView] = []
    fanout: FanoutProgress = FanoutProgress()
    deployment_id: str | None = None
    fix_first: str | None = None
    """The fix-first warning (None: none, or from an API before it answered it)."""


class StepProgress(Wire):
    vertex_id: str
    status: str
    children: SpawnerCounts | None = None
    waiting: Waiting | None = None


class RunProgress(Wire):
    id: str
    status: str
    ended: bool
    error: ErrorView | None = None
    steps: list[StepProgress] = []
    fanout: FanoutProgress = FanoutProgress()


class LogEntry(Wire):
    id: int
    at: float
    level: str
    message: str
    vertex_id: str | None = None
    data: dict[str, Any] | None = None


class IdMatches(Wire):
    prefix: str
    ids: list[str]
    more: bool = False


class RunIdMatches(IdMatches):
    pass


class DeploymentIdMatches(IdMatches):
    pass


# ── operator actions ────────────────────────────────────────────────────────────────────────


class ActionResult(Wire):
    run_id: str
    changed: bool
    message: str
    status: str


class RetryResult(ActionResult):
    steps_retried: int
    warnings: list[str] = []
    reopened_run: str | None = None
    reopened_join: str | None = None
    stuck_joins: list[str] = []
    children_failed: int = 0


class RetryPreview(Wire):
    run_id: str
    status: str
    retriable: bool
    new_run_id: str | None = None
    steps_retried: int = 0
    steps_held_back: int = 0
    message: str = ""
    warnings: list[str] = []
    reopened_run: str | None = None
    reopened_join: str | None = None
    stuck_joins: list[str] = []
    children_failed: int = 0
    fix_first: str | None = None


class ResolveResult(ActionResult):
    vertex_id: str
    warnings: list[str] = []
    reopened_run: str | None = None
    reopened_join: str | None = None


class StartOverResult(ActionResult):
    new_run_id: str
    warnings: list[str] = []


class StartOverPreview(Wire):
    run_id: str
    status: str
    startable: bool
    new_run_id: str | None = None
    message: str = ""
    warnings: list[str] = []


class StepAgain(Wire):
    vertex_id: str
    type: str
    destinations: list[str] = []


class ReopenedJoin(Wire):
    run_id: str
    join: str
    spawner: str
    above: bool = False
    ended: str | None = None
    steps_again: list[StepAgain] = []


class ReprocessResult(ActionResult):
    revived: int
    warnings: list[str] = []
    reopened_run: str | None = None
    reopened_join: str | None = None
    reopened_joins: list[ReopenedJoin] = []


class ReprocessPreview(Wire):
    run_id: str
    status: str
    reprocessable: bool
    revived: int = 0
    dead_letters: list[RunSummary] = []
    warnings: list[str] = []
    reopened_run: str | None = None
    reopened_join: str | None = None
    reopened_joins: list[ReopenedJoin] = []


class AbortedDeployment(Wire):
    id: str
    workflow: str
    version: int
    serving_version: int


class CancelResult(ActionResult):
    runs_cancelled: int
    steps_cancelled: int
    aborted_deployment: AbortedDeployment | None = None


class SkippedRun(Wire):
    run_id: str
    reason: str
    state: str | None = None
    message: str = ""


class StuckRun(Wire):
    run_id: str
    joins: list[str]
    children_failed: int
    message: str = ""


class BatchRetryResult(Wire):
    retried: list[str]
    skipped: list[SkippedRun]
    truncated: bool = False
    stuck: list[StuckRun] = []
    warnings: list[str] = []


class ReprocessedRun(Wire):
    run_id: str
    revived: int
    status: str


class BatchReprocessResult(Wire):
    reprocessed: list[ReprocessedRun]
    skipped: list[SkippedRun]
    revived: int
    warnings: list[str] = []


class FixFirstRuns(Wire):
    kind: str
    count: int
    run_ids: list[str] = []


class StuckRuns(Wire):
    count: int = 0
    run_ids: list[str] = []
    message: str | None = None


class SkippedRuns(Wire):
    reason: str
    state: str | None = None
    count: int
    message: str = ""
    run_ids: list[str] = []
    """The newest of them (an older API sends none)."""
    new_run_ids: list[str] = []
    """Of `started_over`: the run each of `run_ids` was started over as."""


class BatchRetryPreview(Wire):
    matching: int
    skipped: list[SkippedRuns] = []
    """The runs the batch would skip, by reason (an older API sends none, and counts them in
    `matching`)."""
    limit: int
    truncated: bool = False
    warnings: list[str] = []
    fix_first: list[FixFirstRuns] = []
    """Runs that would fail the same way at once, by kind (an older API sends none): the
    first of `warnings` says them."""
    stuck: StuckRuns = Field(default_factory=StuckRuns)
    """Runs whose joins would fail again at once (an older API sends none): one of
    `warnings` says them."""


# ── settings ────────────────────────────────────────────────────────────────────────────────


class CapsView(Wire):
    destination: str
    max_concurrency: int
    rate_per_second: float | None = None


class CapsRemoved(Wire):
    destination: str
    removed: bool


class ClosedBreakerView(Wire):
    layer: str
    tenant_id: str | None = None
    was: str


class BreakersReset(Wire):
    destination: str
    tenant_id: str | None = None
    closed: list[ClosedBreakerView]
    steps_released: int = 0


class BreakerView(Wire):
    state: str
    failures: int = 0
    probes: int = 0
    seconds_until_half_open: float = 0.0
    opened_at: float | None = None
    opened_by: str | None = None


class DestinationView(Wire):
    destination: str
    cap: int
    cap_configured: bool
    rate_per_second: float | None = None
    limit: float
    slots: int
    in_flight: int
    cuts: int = 0
    growth_held_s: float = 0.0
    global_breaker: BreakerView
    tenant_breakers: dict[str, BreakerView] = {}
    retry_tokens: float
    retry_allowed: bool


class CurrentKey(Wire):
    id: str
    name: str | None = None
    role: str
    tenant_id: str | None = None
    authentication: bool = True

    @property
    def opens_admin_routes(self) -> bool:
        """Whether the API answers this key on its admin routes (deployments, tenants, …):
        any key but a tenant key (the monitor's rule too: `opensAdminPages`)."""
        return self.role != "tenant"


class ServiceView(Wire):
    name: str
    up: bool
    role: str | None = None
    """api, worker or serve; None from an API or a heartbeat older than the field."""
    pid: int | None = None
    host: str | None = None
    uptime_s: float | None = None
    last_seen: float | None = None
    started_at: float | None = None


class TenantRateView(Wire):
    per_minute: int
    configured: bool
    used: int
    window_s: float


class QuotaView(Wire):
    max_runs: int
    used_runs: int
    runs_left: int


class TenantView(Wire):
    tenant_id: str
    rate: TenantRateView
    quota: QuotaView | None = None
    reserved: bool = False


# ── audit ───────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class AuditQuery:
    """Which audit events a list covers (the API's filter); set fields AND."""

    actor: str | None = None
    action: str | None = None
    subject_kind: str | None = None
    subject_id: str | None = None


class AuditEventView(Wire):
    id: int
    at: float
    actor: str | None = None
    action: str
    subject_kind: str
    subject_id: str
    detail: dict[str, Any] | None = None


# ── deployments ─────────────────────────────────────────────────────────────────────────────


class StageView(Wire):
    stage: int
    weight: float
    min_runs: int
    min_duration_seconds: float
    waits_for: str | None = None
    """None from a server older than the field: the CLI then says the runs and time alone."""
    started_at: float | None = None
    ended_at: float | None = None


class RollbackSpec(Wire):
    max_failure_ratio: float
    margin_over_serving: float | None = None
    min_finished_runs: int


class VersionFigures(Wire):
    version: int
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    running: int
    finished: int
    failure_ratio: float | None = None
    runs_url: str
    refused: int = 0
    """Of `runs` and `failed`: submissions the candidate's inputSchema refused (no run)."""


class TimelineEvent(Wire):
    at: float
    event: str
    stage: int
    weight: float | None = None
    note: str | None = None


class OutcomeView(Wire):
    reason: str
    actor: str | None = None
    stage: int | None = None
    figures: dict[str, Any] | None = None


class DeploymentView(Wire):
    id: str
    workflow: str
    status: str
    candidate_version: int
    serving_version: int
    stage: int
    weight: float | None = None
    """None once the deployment has ended."""
    stages: list[StageView]
    rollback: RollbackSpec
    threshold: float
    check_interval_seconds: float
    candidate: VersionFigures
    serving: VersionFigures
    exposure: int
    run_id: str
    run_purged: bool = False
    """The deployment's run was deleted by run retention (False from an API before it said)."""
    created_at: float
    created_by: str
    ended_at: float | None = None
    outcome: OutcomeView | None = None
    timeline: list[TimelineEvent] = []
    serving_version_now: int | None = None
    superseded: bool = False
    """Ended, and the version it left serving no longer serves (the API decides)."""
    holding: str | None = None
    """While it runs, what its stage waits for (only on a single deployment's answer)."""
    holding_checked_at: float | None = None
    """When the stage check `holding` reports was taken (None: not known)."""
    warnings: list[str] = []
    """On the answer to a start, and on a single deployment's answer while it runs."""


class DeploymentPreview(Wire):
    """What a start would do, started nothing (`POST …/deployments/preview`)."""

    workflow: str
    candidate_version: int
    serving_version: int
    first_weight: float
    summary: str
    warnings: list[str] = []


class DeploymentChange(Wire):
    changed: bool
    message: str
    deployment: DeploymentView


class ServingView(Wire):
    workflow: str
    serving_version: int
    candidate_version: int | None = None
    candidate_weight: float = 0.0
    deployment_id: str | None = None
    updated_at: float
    updated_by: str | None = None


class ServingChange(ServingView):
    """A switch of the serving version: `changed` False when the version served already."""

    changed: bool
    message: str
