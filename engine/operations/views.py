"""What operations take and return: filters, pages and the views of workflows, runs and steps.

Views are pydantic models serialised with camelCase names (the workflow documents' own style),
so a REST route can return one as it is and a CLI can print it as JSON. Times are epoch seconds.
"""

from __future__ import annotations

from typing import Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from engine.store.listing import RunFilter
from engine.store.models import RunRoute, RunStatus, StepStatus
from schemas.definitions import VertexType
from schemas.errors import FailureKind
from schemas.waiting import WaitReason
from vertices.contract import TimeoutTier

__all__ = [
    "UNKNOWN_KIND",
    "AttemptView",
    "BreakerRef",
    "ChildDuration",
    "DeploymentIdMatches",
    "ErrorKind",
    "ErrorView",
    "FanoutProgress",
    "GraphEdge",
    "GraphNode",
    "GraphView",
    "IdMatches",
    "ListProgress",
    "LogEntry",
    "LongTail",
    "Page",
    "PublishResult",
    "RunDetail",
    "RunFilter",
    "RunIdMatches",
    "RunProgress",
    "RunRoute",
    "RunStatus",
    "RunSummary",
    "SpawnerCounts",
    "StepProgress",
    "StepStatus",
    "StepView",
    "SubmitResult",
    "VersionDetail",
    "VersionSummary",
    "View",
    "WaitingChildren",
    "WaitingView",
    "WorkflowSummary",
]


EPOCH_SECONDS = (
    "Epoch seconds (UTC): seconds since 1970-01-01T00:00:00Z, as a float with a fraction."
)
"""What every time in an answer is, said in the schema of each (`describe_times`)."""


def is_time_field(name: str) -> bool:
    """Whether a field of an answer, by its name on the wire, is a time (epoch seconds): every
    `…At` (`createdAt`, `endedAt`, …), and `at`, `until`, `notBefore`, `lastSeen`."""
    return name.endswith("At") or name in {"at", "until", "notBefore", "lastSeen"}


def describe_times(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Say in the description of each of a view's times (`is_time_field`) that it is epoch
    seconds (`EPOCH_SECONDS`), after what the field says of itself: one rule for every view,
    rather than the words copied onto each field."""
    for name, field in schema.get("properties", {}).items():
        if not is_time_field(name) or not isinstance(field, dict):
            continue
        own = field.get("description", "").strip()
        if EPOCH_SECONDS not in own:
            # A field's docstring may say no more than "Epoch seconds.": the unit then says it
            # whole, not twice.
            own = "" if own.rstrip(".").lower() == "epoch seconds" else own
            field["description"] = f"{own} {EPOCH_SECONDS}".strip()


class View(BaseModel):
    """Base of every view: immutable, camelCase on the wire, snake_case in Python; its times
    are described as epoch seconds in its JSON schema (`describe_times`). An answer carries
    every field of its view, null or empty when there is nothing to say, so its JSON schema
    lists every field as required (`json_schema_serialization_defaults_required`): a client
    generated from OpenAPI reads `next`, `endedAt` or `error` as present and maybe null, not
    as maybe absent. A view whose answer leaves a field out says so in its own config. The
    docstring under a field is its `description` there (`use_attribute_docstrings`): what the
    code says of a field, a generated client shows on its attribute."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra=describe_times,
        json_schema_serialization_defaults_required=True,
        use_attribute_docstrings=True,
    )


T = TypeVar("T")


class Page(View, Generic[T]):
    """One page of a keyset-paginated list. `next` is the opaque cursor of the following page
    (None on the last one)."""

    items: list[T]
    next: str | None = None


# ── workflows ───────────────────────────────────────────────────────────────────────────────


class PublishResult(View):
    """One workflow of a publish: the version that holds its content, whether this publish
    created it (False: the latest version was already identical), and whether new runs get
    it, with how to make them when they do not."""

    name: str
    version: int
    created: bool
    serving: bool = Field(
        description="Whether this version is the serving one: new runs that name no version "
        "get it now. True for a workflow's first version; a later one serves only once a "
        "deployment promotes it or an admin switches to it."
    )
    serving_version: int | None = Field(
        default=None,
        description="The version new runs get now (None only for a workflow published before "
        "serving versions existed and never migrated).",
    )
    hint: str | None = Field(
        default=None,
        description="When `serving` is false: which version serves instead and how to make "
        "this one serve (a deployment, or `POST /workflows/{name}/serving` for an admin), "
        "the sentence `schemabridge workflows publish` prints.",
    )


class WorkflowSummary(View):
    name: str
    latest_version: int
    serving_version: int | None = None
    """The version new runs get (None only for a workflow published before serving
    versions existed and never migrated)."""
    versions: int
    """How many versions are published."""
    created_at: float
    """When version 1 was published."""
    updated_at: float
    """When the latest version was published."""


class VersionSummary(View):
    name: str
    version: int
    definition_hash: str
    """SHA-256 of the canonical document (identical content, identical hash)."""
    created_at: float


class VersionDetail(VersionSummary):
    document: dict[str, Any]
    """The workflow document as stored (normalised: defaults left out, camelCase)."""
    serving_version: int | None = Field(
        default=None,
        description="The workflow's version new runs get now (as `GET /workflows` lists it): "
        "this version serves when it is equal. None only for a workflow published before "
        "serving versions existed and never migrated.",
    )


class GraphNode(View):
    """A vertex placed on the layered layout; `x`, `y` are its centre."""

    id: str
    type: str
    depends_on: list[str]
    workflow: str | None = None
    """The child workflow a SPAWNER starts (as written, `name` or `name@version`)."""
    layer: int
    """0 for vertices without dependencies; every edge goes to a higher layer."""
    order: int
    """Position inside the layer, left to right."""
    x: float
    y: float


class GraphEdge(View):
    """A dependency: `target` depends on `source`."""

    source: str
    target: str


class GraphView(View):
    """A workflow version's DAG, laid out: layers top to bottom, positions included."""

    name: str
    version: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    layers: int
    width: float
    height: float
    node_width: float
    node_height: float


# ── runs ────────────────────────────────────────────────────────────────────────────────────


class SentRequestView(View):
    """What a GATEWAY attempt that failed had sent (docs/architecture.md, 'What a failed call
    sent'): the step's secrets shown as `***`, header values never kept."""

    method: str
    url: str
    """The URL as sent, query included, without `user:password@`; cut at 2,000 characters
    (then it ends with `…`)."""
    header_names: list[str] = []
    """The names of the headers the step set (the HTTP client adds Host, Content-Length and,
    for a `user:password@`, Authorization)."""
    body_excerpt: str = ""
    """The start of the request body as text, at most 500 characters ("" when none)."""
    body_bytes: int = 0
    """The whole body's size in bytes as sent."""
    body_truncated: bool = False
    """The body goes on past `bodyExcerpt`."""


UNKNOWN_KIND: Final = "unknown"
"""The kind of a stored error that names none of `FailureKind` (not a step's failure)."""
ErrorKind = FailureKind | Literal["unknown"]
"""What an error's `kind` can be: a `FailureKind`, or `UNKNOWN_KIND`."""


class ChildCauseView(View):
    """A failed join's commonest cause among its FAILED children: `count` of the `read`
    children read (the first 1,000 at most) failed with `kind`."""

    kind: ErrorKind
    count: int
    read: int


class ErrorView(View):
    """A structured failure, of a step or of a run; `vertexId` names the step in both."""

    kind: ErrorKind
    message: str = ""
    vertex_id: str | None = None
    http_status: int | None = None
    body_excerpt: str | None = None
    attempts: int | None = Field(
        default=None,
        description="HTTP attempts the failing execution made (its first call and the "
        "in-process retries after it): not the step's executions, which are the step's own "
        "`attempts`; the last of them is its `history[].attempt`.",
    )
    retry_after_s: float | None = None
    child_cause: ChildCauseView | None = None
    """A `child_failures`: the commonest kind among the failed children (what to fix)."""
    children_cancelled: int | None = Field(
        default=None,
        description="A `child_failures`: the CANCELLED children among those the join does "
        "not tolerate. No retry or reprocess runs a cancelled child again: resolve the join "
        "or start the run over.",
    )
    breaker: BreakerRef | None = None
    """The breaker layer that refused the call, when one did (an `external_overload` of an
    open breaker): what a front door links to its reset, as a waiting step's `breaker`."""
    request: SentRequestView | None = None
    """What the last failed attempt sent; None when the failure sent nothing (an expression
    error, an egress refusal, a breaker), was recorded before the engine kept it, and in run
    lists and progress streams (read it from the run's detail)."""


class SpawnerCounts(View):
    """A SPAWNER step's fan-out counters."""

    total: int
    succeeded: int
    failed: int
    cancelled: int


class ListProgress(View):
    """How far a run has got, as a run list shows it (cheap: read with the page)."""

    steps: int
    """The run's steps (its workflow's vertices)."""
    steps_done: int
    """Steps SUCCEEDED, RESOLVED or SKIPPED."""
    children: SpawnerCounts | None = None
    """Its spawners' counters added up; None when it has no fan-out started."""
    waiting: str | None = None
    """Why one of its steps waits now, a `WaitReason` (`breaker_open`, `tenant_rate_limit`,
    `admission_wait`, …; the greatest by name when several do), so a list says why a run
    makes no progress; None when none waits. `GET /runs/{id}` has each step's wait in full."""


class RunSummary(View):
    """A run as lists show it."""

    id: str
    workflow: str
    version: int
    tenant_id: str
    status: RunStatus
    created_at: float
    started_at: float | None = Field(
        None,
        description="When the run last started: its creation, or the latest time an operator "
        "made it run again (retry, resolve, reprocess, a child's retry resuming its parent). "
        "`endedAt - startedAt` is the work of that latest run, never the time it sat FAILED "
        "before the operator acted; `createdAt` keeps when it was first created.",
    )
    ended_at: float | None = None
    parent_run_id: str | None = None
    parent_vertex_id: str | None = None
    item_index: int | None = None
    root_run_id: str | None = None
    restarted_from: str | None = None
    started_over_as: str | None = None
    """The run an operator's start over of this one made (its `restartedFrom` names this
    run), or for a child run the one a start over of its root made; None while nobody started
    it (or its root) over. A retry, resolve or reprocess of it is refused then (409
    `started_over`, naming that run): look at the new run instead. Read in `GET /runs` pages
    and a run's detail only: None in a submission's answer and on children pages, which do
    not read it."""
    dlq_at: float | None = None
    """When the run (a child) became a dead letter; None once it is reprocessed."""
    route: RunRoute | None = None
    """How a submission chose `version`: `serving`, `candidate` (a deployment's share),
    `pinned` (the request named it), `system` (a run the engine started) or `start_over` (an
    operator's start over: the version of the run it repeats, `restartedFrom`; a deployment
    does not count it); None on child runs (their version was fixed when their root was
    created) and on start overs made before `start_over` was recorded."""
    error: ErrorView | None = None
    progress: ListProgress | None = None
    """Only in `GET /runs` pages (not children pages, not single runs)."""
    waiting: bool | None = None
    """Only in children pages and a long tail's `runningLongest`, on a RUNNING child: true
    while no worker holds a step of it (queued, parked or waiting to retry), false while one
    does."""


class RunList(Page[RunSummary]):
    """A page of runs (`GET /runs`, a run's children); a class of its own so the OpenAPI
    document, and a client generated from it, name it (not `Page_RunSummary_`)."""


class SubmitResult(View):
    """A submission's answer: the run, and whether this call created it (False: the same
    idempotency key and request were submitted before)."""

    run: RunSummary
    created: bool


LostExecution = Literal["lease_expired", "worker_stopped", "run_failed"]
"""Why an execution of a step ended without a result (`AttemptView.lost`)."""


class AttemptView(View):
    """One HTTP attempt (or an attempt admission refused) of a step, from its log; or an
    execution that ended without a result (`lost`)."""

    execution: int = Field(
        description="Which execution of the step made this attempt: 1 for the first claim, "
        "one more for each redispatch, lease recovery or re-run (the step's `attempts` counts "
        "them)."
    )
    attempt: int = Field(
        description="The HTTP attempt's number within its execution: 1 for the first call, "
        "then its in-process retries (a failed execution's last is its error's `attempts`). "
        "For a `lost` execution, the attempt it was making or about to make."
    )
    at: float
    level: str
    message: str
    http_status: int | None = None
    duration_ms: float | None = None
    error: str | None = None
    retry_in_ms: int | None = None
    """The wait before the next in-process attempt (None: none followed)."""
    refused: ErrorKind | None = None
    """Set when admission refused the attempt: the failure kind it counted as."""
    request: SentRequestView | None = None
    """What the attempt sent, when it failed (an attempt that succeeded keeps nothing)."""
    body_excerpt: str | None = Field(
        default=None,
        description="The start of the answer's body when the attempt failed on an answer (an "
        "error status, an unusable body): at most 500 characters, the step's secrets shown as "
        "`***`, as the step error's `bodyExcerpt` keeps the last one. None when the attempt "
        "succeeded, got no answer (a timeout, an I/O error), was refused by admission, the "
        "body was empty, or it was recorded before the engine kept it.",
    )
    lost: LostExecution | None = Field(
        default=None,
        description="Set on an entry that is not an HTTP attempt: its execution ended without "
        "a result, and the step was taken back to run again. `lease_expired`: its worker "
        "stopped renewing its lease (killed, crashed or hung) and the lease ran out; "
        "`worker_stopped`: its worker stopped and gave the claim back mid-execution. In both, "
        "a call it had in flight may have reached the destination although no status was "
        "read (no `httpStatus`): the next execution sends it again, with the same "
        "Idempotency-Key (at-least-once). `run_failed`: the run failed while the step waited "
        "for its next attempt, which it did not send. `worker` names the worker that held it.",
    )
    worker: str | None = Field(
        default=None,
        description="The service id of the worker that made the attempt, as `GET /services` "
        "and a RUNNING step's `holder.worker` name it: when one host fails its calls (a bad "
        "resolver, a broken proxy), its attempts say so. None for a tenant key (a service id "
        "is operational data, docs/security.md), for a worker that runs as no service "
        "(`schemabridge run`), and for an attempt recorded before the engine kept it.",
    )


class BreakerRef(View):
    """A breaker layer an operator can reset: the destination, and the tenant whose layer it
    is (None: the global layer). `POST /destinations/{destination}/breakers/reset` with
    `?tenant=` that tenant closes it (`schemabridge destinations reset-breaker DESTINATION
    [--tenant T]`); the web monitor links to the destination's Reset."""

    destination: str
    tenant_id: str | None = None


class WaitingView(View):
    """Why a step waits (set while it waits, cleared when it runs or ends; docs/architecture.md,
    'Why a step waits')."""

    reason: WaitReason
    """What clients switch on (the enum lists every reason)."""
    message: str
    """What to tell a person: the limit and how to raise it, the redispatch `n/max`, …"""
    until: float | None = None
    """When the step is due again (epoch seconds): for `retry_backoff`, its next attempt;
    None while it waits for an admission slot."""
    text: str = ""
    """`message` with the countdown a person needs, as of the answer ("half-open in 12 s"
    behind a breaker): what the CLI and the web monitor show (`schemas.waiting.wait_text`)."""
    breaker: BreakerRef | None = None
    """For `breaker_open`: the breaker layer that refused the step (None for a refusal
    recorded before refusals named their destination)."""


class WaitingChildren(View):
    """A run's children that wait for one reason."""

    reason: WaitReason
    children: int
    message: str
    """What is true of every one of them: their message when they share it, else what their
    messages share (`engine.store.children.common_message`), else empty."""
    until: float | None = None
    """The earliest time one of them is due again."""
    text: str = ""
    """`message` with its countdown to `until` as of the answer (`schemas.waiting.wait_text`),
    or the reason in words when their messages share nothing."""
    breaker: BreakerRef | None = None
    """For `breaker_open`: the breaker layer that refuses them, when it is one for all of
    them (their messages share it)."""


HolderState = Literal["alive", "presumed_dead", "unknown"]


class HolderView(View):
    """Who holds a RUNNING step's claim and whether it is alive (docs/architecture.md, 'Who
    holds a step'), judged by the heartbeat rule `GET /services` applies."""

    worker: str | None = None
    """The holder's service id, as `GET /services` names it. None for a tenant key (a service
    id is operational data, docs/security.md) and for a holder that runs as no service."""
    state: HolderState
    """`alive`: its heartbeat is at most the TTL old; `presumed_dead`: it is older, or gone
    (the step is taken back when the lease ends); `unknown`: no named holder, a holder this
    Redis never heard of (a worker beating into its own embedded Redis), or Redis did not
    answer."""
    last_seen: float | None = None
    """Epoch seconds of its latest heartbeat; None if never seen (or `unknown`)."""
    silent_s: float | None = None
    """Seconds between its latest heartbeat and the read; None if never seen."""


class HeldChildren(View):
    """A fan-out's running children whose steps one worker presumed dead holds: they are
    taken back when their leases end (docs/architecture.md, 'Who holds a step')."""

    holder: HolderView
    children: int
    lease_expires_at: float | None = None
    """The latest end of their leases: every one of them is taken back by then."""


class StepView(View):
    vertex_id: str
    type: VertexType | None
    """GATEWAY, SPAWNER, MERGE or (a `gradual_deploy` run's) DEPLOY_STAGE; None if the version
    no longer has the vertex."""
    status: StepStatus
    attempts: int = Field(
        description="Executions of the step started (claims), including redispatches and "
        "lease recoveries: not HTTP attempts. Each execution makes one or more HTTP attempts "
        "(`history[].execution` and `history[].attempt`; a failure's `error.attempts` is how "
        "many its execution made)."
    )
    auto_retries: int = Field(
        description="Redispatches after an `external_overload` so far (at most the vertex's "
        "`maxAutoRetries`): each starts an execution, so they are counted in `attempts` too."
    )
    output: Any = None
    error: ErrorView | None = None
    not_before: float
    created_at: float
    started_at: float | None = Field(
        None,
        description="When the step's latest execution was claimed; a retry clears it, so "
        "the next claim stamps its own.",
    )
    ended_at: float | None = Field(
        None,
        description="When the step ended. A RESOLVED step's is when the operator resolved "
        "it: `endedAt - startedAt` is then its failed execution plus the wait for the "
        "operator, not a call's duration, and front doors show it as resolved by an operator "
        "rather than as a duration.",
    )
    children: SpawnerCounts | None = None
    waiting: WaitingView | None = None
    """Why the step waits, while it does."""
    lease_expires_at: float | None = None
    """While RUNNING: when its claim's lease ends (epoch seconds) unless its holder renews it;
    a dead holder's step is taken back then and runs again."""
    holder: HolderView | None = None
    """While RUNNING: who holds its claim, and whether that worker is alive."""
    history: list[AttemptView] = []


class FanoutProgress(View):
    """A run's children by status (all its SPAWNERs together). A child run is never PENDING:
    until it ends it is RUNNING, either `running` (a worker holds one of its steps) or
    `waitingChildren` (none does: queued, parked at a cap or breaker, or waiting to retry)."""

    total: int
    pending: int = Field(
        deprecated=True,
        description="Deprecated: the same count as `waitingChildren` under its old name (no "
        "child run is PENDING; these are RUNNING children whose step waits).",
    )
    running: int
    """Children with a step held by a worker right now, including those whose held step
    waits inside its call (for an admission slot, or to retry a call): `waiting` lists
    them too, under `admission_wait` and `retry_backoff`, and front doors say "23 running
    (15 of them waiting for an admission slot)"."""
    waiting_children: int = Field(
        0,
        description="Children still RUNNING with no step held by a worker right now: queued, "
        "parked or waiting to retry (`waiting` says why, by reason).",
    )
    succeeded: int
    failed: int
    cancelled: int
    waiting: list[WaitingChildren] = []
    """Children with a waiting step, by reason, most first."""
    presumed_dead: list[HeldChildren] = []
    """Of the `running` children, those held by a worker presumed dead (its heartbeat older
    than `HEARTBEAT_TTL_S`), by worker, most first: running in name only until their leases
    end."""


class RunEnd(RunSummary):
    """A run that has ended, as a synchronous submission (`?wait=true`) answers it: its
    summary and its output, without the steps and history the whole detail reads."""

    output: Any = None


class RunDetail(RunSummary):
    """A run with its input, output, steps, attempt history and fan-out progress."""

    input: Any = None
    output: Any = None
    item: Any = None
    """A child run's item when it differs from its input."""
    timeout_tier: TimeoutTier
    idempotency_key: str | None = None
    """The key the run was submitted with (a child's is derived from its parent)."""
    created_by: str | None = None
    """Who created the run, in the words operator actions' log lines use: `key:<id>` (the
    REST API key that submitted it, started it over or started the deployment a system run
    drives), `demo` (authentication off), `cli` (`schemabridge run`). None on a child run
    (its root's creator submitted the tree: read `rootRunId`) and on runs created before it
    was recorded. Shown to every key that may read the run, as its log shows operator
    actions' actors (docs/security.md, 'What a tenant key reads')."""
    pinned_versions: dict[str, int] | None = None
    restarts: list[str] = []
    """Runs started over from this one, oldest first (`restartedFrom` links back)."""
    restarted_from_purged: bool = False
    """The run `restartedFrom` names was deleted by run retention (it ended more than
    `SCHEMABRIDGE_RUN_RETENTION_S` ago, or an operator purged it): its id is all that is left,
    and `GET /runs/{id}` answers 404 for it."""
    steps: list[StepView] = []
    fanout: FanoutProgress
    deployment_id: str | None = None
    """The deployment the run belongs to: the one whose candidate it was routed to (route
    `candidate`), or the one a `gradual_deploy` run drives (`GET /deployments/{id}`, admin
    keys); None for any other run."""
    fix_first: str | None = None
    """When the run FAILED for a cause the workflow or its input makes (a step's error kind
    `invalid_input`, `invalid_config`, `expression_error` or `too_many_items`, or a failed
    join's children's commonest): the sentence its retry, reprocess and start over lead with
    (they would fail the same way; a start over is offered instead when a step an operator
    resolved upstream of the failure may be the cause) and what to do instead, as the retry's
    preview answers it. None otherwise."""

    def as_progress(self) -> RunProgress:
        """The run as its progress stream shows it, from what was read already: what a
        `?wait=true` that ran out of time answers, so a client learns why without a second
        call."""
        return RunProgress(
            id=self.id,
            status=self.status,
            ended=self.status != RunStatus.RUNNING,
            ended_at=self.ended_at,
            error=self.error,
            steps=[
                StepProgress(
                    vertex_id=step.vertex_id,
                    status=step.status,
                    children=step.children,
                    waiting=step.waiting,
                )
                for step in self.steps
            ],
            fanout=self.fanout,
        )


class StepProgress(View):
    """One step as a progress stream shows it: its status and, for a SPAWNER, its counters."""

    vertex_id: str
    status: StepStatus
    children: SpawnerCounts | None = None
    waiting: WaitingView | None = None
    """Why the step waits, while it does."""


class RunProgress(View):
    """What changes while a run goes on: its status, its steps' statuses and its fan-out
    progress (cheap to read several times a second, whatever the fan-out's size)."""

    id: str
    status: RunStatus
    ended: bool
    """True once the status is final (SUCCEEDED, FAILED or CANCELLED)."""
    ended_at: float | None = None
    error: ErrorView | None = None
    steps: list[StepProgress] = []
    fanout: FanoutProgress


class ChildDuration(View):
    """A child of a fan-out and how long it took (ended) or has been running (running)."""

    run: RunSummary
    duration_s: float


class LongTail(View):
    """The long tail of one SPAWNER's fan-out: how its children's durations spread, the
    slowest ended ones and the ones running longest. Durations are a child's `endedAt -
    startedAt` (latest start to end, queueing included), of SUCCEEDED and FAILED children;
    percentiles are nearest-rank; None while no child has ended. A child run again by an
    operator (retry, reprocess) starts anew then (`RunSummary.startedAt`), so its duration is
    its latest run's, not its time as a dead letter."""

    run_id: str
    vertex_id: str
    total: int
    """Children the spawner has (0 before it started them)."""
    ended: int
    """Children whose durations the figures are taken from."""
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None
    mean_s: float | None = None
    slowest: list[ChildDuration] = []
    """The ended children that took longest, slowest first."""
    running_longest: list[ChildDuration] = []
    """Children still RUNNING that started first, with how long they have been running."""


class LogEntry(View):
    id: int
    """Increasing; pass the last one seen as `cursor` (`GET /runs/{id}/logs?cursor=`) to read
    on."""
    at: float
    level: str
    message: str
    vertex_id: str | None = None
    data: Any = None


class LogList(Page[LogEntry]):
    """A page of a run's log lines (`GET /runs/{id}/logs`), named as `RunList` is."""


class IdMatches(View):
    """The ids that start with a prefix, in id order (`engine.operations.id_prefixes`)."""

    prefix: str
    """The prefix as ids are written: lower case, with the id's hyphens."""
    ids: list[str]
    """At most the `limit` asked for; one id: the prefix names that one."""
    more: bool = False
    """More ids start with the prefix than `ids` lists."""


class RunIdMatches(IdMatches):
    """The runs whose id starts with a prefix (`runs.match_prefix`), in id order."""


class DeploymentIdMatches(IdMatches):
    """The deployments whose id starts with a prefix (`deployments.match_prefix`), in id
    order."""
