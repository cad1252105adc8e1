"""Plain, immutable records the store hands out and takes in.

The rest of the engine works with these instead of ORM rows, so no session ever leaks out of
`engine.store` and a record can cross task boundaries safely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.definitions import Workflow
from schemas.errors import BreakerOpening, BreakerRefusal
from schemas.waiting import WaitReason


@dataclass(frozen=True)
class VersionRecord:
    """A published, immutable workflow version."""

    name: str
    version: int
    definition_hash: str
    workflow: Workflow
    created_at: float


@dataclass(frozen=True)
class RunRecord:
    id: str
    workflow_name: str
    workflow_version: int
    tenant_id: str
    status: str
    input: Any
    output: Any
    error: Any
    created_at: float
    started_at: float | None
    ended_at: float | None
    timeout_tier: str
    idempotency_key: str | None = None
    parent_run_id: str | None = None
    parent_vertex_id: str | None = None
    item_index: int | None = None
    root_run_id: str | None = None
    restarted_from: str | None = None
    dlq_at: float | None = None
    item: Any = None
    pinned_versions: dict[str, int] | None = None
    request_hash: str | None = None
    route: str | None = None
    """How a submission chose the version (`engine.store.models.RunRoute`); None on child
    runs, start overs and older runs."""
    created_by: str | None = None
    """Who created the run (`key:<id>`, `demo`, `cli`); None on child runs and older runs."""


@dataclass(frozen=True)
class RunHeader:
    """A run as lists show it, without its input, output, item and pins: a page of 500 runs
    would otherwise read and decode all of them for nothing."""

    id: str
    workflow_name: str
    workflow_version: int
    tenant_id: str
    status: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    parent_run_id: str | None
    parent_vertex_id: str | None
    item_index: int | None
    root_run_id: str | None
    restarted_from: str | None
    dlq_at: float | None
    route: str | None
    """How its version was chosen (`engine.store.models.RunRoute`)."""
    error: Any


@dataclass(frozen=True)
class StepRecord:
    id: int
    run_id: str
    vertex_id: str
    status: str
    attempts: int
    auto_retries: int
    output: Any
    error: Any
    not_before: float
    created_at: float
    started_at: float | None
    ended_at: float | None
    claim_token: str | None = None
    lease_expires_at: float | None = None
    claimed_by: str | None = None
    """The service id of the worker holding the claim (RUNNING steps; None: no named holder)."""
    children_total: int | None = None
    children_succeeded: int = 0
    children_failed: int = 0
    children_cancelled: int = 0
    wait_reason: str | None = None
    """Why the step waits (a `WaitReason` value) while READY or RUNNING; None otherwise."""
    wait_message: str | None = None


@dataclass(frozen=True)
class Waiting:
    """Why a parked or redispatched step waits, recorded with its result (`schemas.waiting`)."""

    reason: WaitReason
    message: str


@dataclass(frozen=True)
class HeldChildren:
    """Children of a run with a RUNNING step claimed by one worker (`step.claimed_by`)."""

    worker: str
    children: int
    lease_until: float | None
    """The latest end of those claims' leases: by then every one of them is taken back unless
    renewed."""
    lease_from: float | None = None
    """The earliest end of those claims' leases: with `lease_until`, whether one process set
    them all (a worker restarted under its name holds its predecessor's claims beside its own
    until they are taken back)."""


@dataclass(frozen=True)
class LeaseRanges:
    """Claims' lease ends that only a worker's predecessor under its name could have set:
    before `before` (renewed before the live process started) or after `after` (further off
    than the live process's own lease reaches; None when its lease is not known)."""

    before: float
    after: float | None = None

    def hold(self, lease_expires_at: float) -> bool:
        """Whether a lease ending at `lease_expires_at` is one of them."""
        return lease_expires_at < self.before or (
            self.after is not None and lease_expires_at > self.after
        )


@dataclass(frozen=True)
class RunningChildren:
    """Children of a run still going with a step claimed right now: how many, and of them
    those each named service holds (one child may be in two groups: two running steps)."""

    count: int
    held: list[HeldChildren]


@dataclass(frozen=True)
class WaitingGroup:
    """Children of a run whose steps wait for one reason (`schemas.waiting.WaitReason`)."""

    reason: str
    children: int
    message: str
    """What is true of all of them: their message when they share it, else what their
    messages share (`engine.store.children.common_message`), else empty."""
    until: float | None
    """The earliest time one of them is due again (None: running, waiting in-process)."""
    breaker: BreakerRefusal | None = None
    """For `breaker_open` children whose messages share the breaker: the breaker layer (read
    from one of their steps' stored refusal)."""
    tenant_id: str | None = None
    """That step's tenant (the tenant layer's)."""


@dataclass(frozen=True)
class ClaimedStep:
    """A step this worker holds a live claim on, with what it needs to execute."""

    step_id: int
    claim_token: str
    run_id: str
    vertex_id: str
    tenant_id: str
    attempts: int
    auto_retries: int
    workflow_name: str
    workflow_version: int
    timeout_tier: str
    run_input: Any
    outputs: dict[str, Any]
    """Outputs of the run's completed steps by vertex id (the `vertices` expression context)."""
    parent_run_id: str | None = None
    parent_vertex_id: str | None = None
    root_run_id: str | None = None
    item_index: int | None = None
    item: Any = None
    """A child run's item when it differs from its input (see `Run.item`)."""
    tenant_item_taken: bool = False
    """An earlier execution took the step's item from its tenant's rate window."""
    breaker_opening: BreakerOpening | None = None
    """The breaker opening the step's last counted redispatch was refused under (from its
    stored error): a refusal by the same opening parks it without counting another."""
    pinned_versions: dict[str, int] | None = None
    """The run tree's child workflow versions by name (see `engine.store.pins`); None on runs
    created before versions were pinned (their spawners start the latest version)."""
    route: str | None = None
    """How the run got its version (`Run.route`; None on child runs): a deployment
    candidate's run (`candidate`) calls through breaker layers of its own."""


@dataclass(frozen=True)
class ChildRow:
    """One child run to insert (built by the spawner from an item)."""

    index: int
    input_json: str
    """The child's input as compact JSON text, stored as it is: the spawner serialized it
    once, to size it (`vertices.spawner`)."""
    item: Any


@dataclass(frozen=True)
class LogLine:
    run_id: str
    level: str
    message: str
    vertex_id: str | None = None
    data: dict[str, Any] | None = None
    at: float | None = None
    """None = the time the store writes it."""


@dataclass(frozen=True)
class StepSucceeded:
    """Record `output` for a claimed step."""

    step: ClaimedStep
    output: Any


@dataclass(frozen=True)
class StepFailed:
    """Record a failure; `retry_at` set = redispatch then (READY again), else terminal."""

    step: ClaimedStep
    error: dict[str, Any]
    retry_at: float | None = None
    tenant_item_taken: bool = False
    """This execution took the step's tenant item (kept for the redispatch)."""
    waiting: Waiting | None = None
    """Why a redispatched step waits (None for a terminal failure)."""


@dataclass(frozen=True)
class StepParked:
    """Put a claimed step back, not to be claimed before `not_before`."""

    step: ClaimedStep
    not_before: float
    reason: str
    tenant_item_taken: bool = False
    """This execution took the step's tenant item (kept for the next one)."""
    waiting: Waiting | None = None
    """Why it waits, as front doors show it (None: recorded without a reason)."""
    error: dict[str, Any] | None = None
    """The error the step keeps while parked (a breaker park keeps the refusal that names the
    opening its redispatch was counted under); None clears it, as for every other park."""


@dataclass(frozen=True)
class StepAwaitingChildren:
    """A spawner created its `total` children: park the step until the join closes."""

    step: ClaimedStep
    total: int


StepResult = StepSucceeded | StepFailed | StepParked | StepAwaitingChildren
"""What `Store.complete` records for a claimed step. The executor builds one from the vertex's
decision (`vertices.contract.VertexOutcome`) or from the failure it raised."""


@dataclass(frozen=True)
class StepAbandoned:
    """A step its worker stopped because its claim is gone (its run was cancelled, or its
    lease was lost): nothing is recorded for it but its log lines (the store would drop a
    result as late anyway). Never passed to `Store.complete`."""

    step: ClaimedStep
    reason: str


@dataclass
class CompletionReport:
    """What one `Store.complete` call changed."""

    recorded: int = 0
    dropped: list[int] = field(default_factory=list)
    """Step ids whose claim was no longer live: the late result was discarded."""
    newly_ready: int = 0
    finished_runs: list[tuple[str, str]] = field(default_factory=list)
    """(run id, final status) of runs that ended in this call."""
    changed_runs: set[str] = field(default_factory=set)
    """Runs whose status, steps or fan-out progress this call changed (the runs of the
    recorded results, their parents when they are children, and the parents of the children
    that ended up the tree)."""


@dataclass(frozen=True)
class ServingRecord:
    """Which version a workflow's submissions get (`engine.store.models.WorkflowServing`)."""

    name: str
    serving_version: int
    candidate_version: int | None
    candidate_weight: float
    """Percent of routed submissions the candidate gets (0 without a deployment)."""
    deployment_id: str | None
    updated_at: float
    updated_by: str | None


@dataclass(frozen=True)
class DeploymentRecord:
    """A deployment as stored (`engine.store.models.Deployment`); `stages`, `rollback`,
    `outcome` and `timeline` are the stored JSON (see `vertices.deploy` for their shapes)."""

    id: str
    workflow_name: str
    serving_version: int
    candidate_version: int
    status: str
    stages: list[dict[str, Any]]
    rollback: dict[str, Any]
    check_interval_s: float
    stage_index: int
    stage_started_at: float
    run_id: str
    created_at: float
    created_by: str
    ended_at: float | None
    outcome: dict[str, Any] | None
    timeline: list[dict[str, Any]]
    candidate_refused: int = 0
    """Submissions routed to the candidate that its inputSchema refused (no run exists)."""
    refused_before_stage: int = 0
    """`candidate_refused` when the stage in force began."""


@dataclass(frozen=True)
class StatusCounts:
    """Root runs of one workflow version created in a window, by status; `since_stage` counts
    those created from a later time on (a stage's start)."""

    by_status: dict[str, int]
    since_stage: int = 0


@dataclass(frozen=True)
class RunsPurged:
    """What a deletion of ended run trees removed (or, counted for a dry run, would remove):
    root runs, their descendant runs, and those runs' steps, log lines and payload chunks."""

    roots: int = 0
    children: int = 0
    steps: int = 0
    log_lines: int = 0
    payload_chunks: int = 0

    @property
    def runs(self) -> int:
        return self.roots + self.children

    def __add__(self, other: RunsPurged) -> RunsPurged:
        return RunsPurged(
            self.roots + other.roots,
            self.children + other.children,
            self.steps + other.steps,
            self.log_lines + other.log_lines,
            self.payload_chunks + other.payload_chunks,
        )
