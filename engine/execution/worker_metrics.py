"""Prometheus figures of one worker: what it does with downstreams, and with the steps it runs
(docs/architecture.md, 'Worker metrics').

A `WorkerMetrics` has a registry of its own (never the process-global one), served at
`/metrics` on the worker's health port and, under `serve`, added to the API's registry (one
process, one worker). Series:

- `schemabridge_gateway_attempts_total{destination,outcome}`: every GATEWAY attempt, by its
  admission key and the class of its outcome: `1xx`…`5xx` for an answer, else the failure
  kind the attempt ended with (`timeout`, `network_error`, `invalid_response`, `cancelled`,
  `egress_denied`, `invalid_config`, `internal_error`); `refused` when admission said no
  before anything was sent (an open breaker, the retry budget, no slot in time, the tenant's
  rate window, the destination's cap), `admission_unavailable` when Redis did not answer.
- `schemabridge_gateway_attempt_duration_seconds{destination}`: the time of each attempt that
  went out and ended in a way that says something about the destination (what admission does
  not ignore, `admission_guard.outcome_of`): refused, cancelled and unsendable attempts are
  counted above, not timed.
- `schemabridge_admission_refusals_total{destination,reason}`: the attempts counted `refused`
  above, by why admission said no: `breaker_open`, `retry_budget`, `tenant_rate`,
  `destination_cap` or `no_slot` (`admission_guard.refusal_reason`), so an alert tells an
  open breaker from a tenant at its rate limit.
- `schemabridge_steps_finished_total{vertex_type,outcome}`: the steps this worker finished,
  counted as each flush records them: `succeeded`, `failed` (for good), `redispatched`,
  `parked`, `awaiting_children` (a SPAWNER whose children run), `abandoned` (stopped without a
  result: its run was cancelled or failed under it, or the worker learnt its claim was lost,
  as one frozen past its lease does on waking) and `dropped` (recorded too late: its claim
  had expired, and the store refused the result).

- `schemabridge_expired_leases_total`: the steps this worker's reaper took back because their
  lease expired (the worker that held them died or stalled): they run again, their calls are
  sent again. Counted by whichever worker reaps, so summed over workers it is the engine's.

- `schemabridge_worker_steps_in_flight` and `schemabridge_worker_concurrency`: the steps the
  worker holds now, read at scrape time, and how many it may hold (`--concurrency`): their
  ratio says whether workers are saturated (more workers) or idle (the queue is elsewhere).

Labels stay bounded: a destination is an admission key (a vertex's `destination`, else its
URL's `scheme://host:port`), so there are as many as admission keeps state for; past
`MAX_DESTINATIONS` the rest share `OTHER_DESTINATION`. Never a run id, a URL path or a tenant.

This is every fan-out child's path, so an attempt costs one dict lookup, one `inc` and one
`observe` on label children resolved once per (destination, status, failure kind):
`labels()` itself costs several microseconds.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from admission import CallOutcome
from engine.execution.admission_guard import outcome_of
from engine.store.records import (
    StepAbandoned,
    StepAwaitingChildren,
    StepFailed,
    StepParked,
    StepResult,
    StepSucceeded,
)

MAX_DESTINATIONS = 1_000
"""Destinations labelled by name; calls to any beyond share `OTHER_DESTINATION`, so a url
whose host comes from run input cannot grow a worker's series without bound."""
OTHER_DESTINATION = "<other>"
UNKNOWN_VERTEX = "unknown"
"""The vertex type of a step whose vertex is not in its workflow version (it fails)."""
ATTEMPT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Up to the collect tier's default timeout (60 s), the longest a default attempt may last."""
_STATUS_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}
_OTHER_STATUS = "other"


def outcome_class(status: int | None, error_kind: str | None) -> str:
    """An attempt's outcome label: the failure kind it ended with, else its status class."""
    if error_kind is not None:
        return error_kind
    if status is None:
        return _OTHER_STATUS
    return _STATUS_CLASSES.get(status // 100, _OTHER_STATUS)


def _timed(status: int | None, error_kind: str | None) -> bool:
    """Whether an attempt's time is the destination's latency: it went out and ended in a way
    admission judges the destination by."""
    return outcome_of(status, error_kind) is not CallOutcome.IGNORE


def step_outcome(result: StepResult | StepAbandoned) -> str:
    """The `outcome` label of a finished step."""
    if isinstance(result, StepSucceeded):
        return "succeeded"
    if isinstance(result, StepFailed):
        return "failed" if result.retry_at is None else "redispatched"
    if isinstance(result, StepParked):
        return "parked"
    if isinstance(result, StepAwaitingChildren):
        return "awaiting_children"
    return "abandoned"


_Record = tuple[Callable[[], None], Callable[[float], None] | None]
"""An attempt's bound `inc` of its counter child, and `observe` of its histogram child (None:
not timed)."""


class WorkerMetrics:
    """One worker's registry and the label children its hot path uses."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.attempts = Counter(
            "schemabridge_gateway_attempts",
            "GATEWAY attempts by destination and outcome class.",
            ["destination", "outcome"],
            registry=self.registry,
        )
        self.attempt_seconds = Histogram(
            "schemabridge_gateway_attempt_duration_seconds",
            "Duration of the GATEWAY attempts that went out, by destination.",
            ["destination"],
            buckets=ATTEMPT_BUCKETS_S,
            registry=self.registry,
        )
        self.refusals = Counter(
            "schemabridge_admission_refusals",
            "GATEWAY attempts admission refused before sending, by destination and reason.",
            ["destination", "reason"],
            registry=self.registry,
        )
        self.steps = Counter(
            "schemabridge_steps_finished",
            "Steps this worker finished, by vertex type and outcome.",
            ["vertex_type", "outcome"],
            registry=self.registry,
        )
        self.expired = Counter(
            "schemabridge_expired_leases",
            "Steps this worker took back because their lease expired (their worker died or "
            "stalled); they run again.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "schemabridge_worker_steps_in_flight",
            "Steps this worker holds now (claimed and not yet recorded).",
            registry=self.registry,
        )
        self.concurrency = Gauge(
            "schemabridge_worker_concurrency",
            "Steps this worker may hold at once (--concurrency).",
            registry=self.registry,
        )
        self._records: dict[tuple[str, int | None, str | None], _Record] = {}
        self._destinations: set[str] = set()
        self._overflow: dict[tuple[int | None, str | None], _Record] = {}
        self._step_children: dict[tuple[str, str], Callable[[float], None]] = {}
        self._refusal_children: dict[tuple[str, str], Callable[[], None]] = {}

    @property
    def collectors(self) -> tuple[Counter | Gauge | Histogram, ...]:
        """What another registry registers to serve these series too (`serve`'s API)."""
        return (
            self.attempts,
            self.attempt_seconds,
            self.refusals,
            self.steps,
            self.expired,
            self.in_flight,
            self.concurrency,
        )

    def attempt(
        self, destination: str, status: int | None, error_kind: str | None, duration_s: float
    ) -> None:
        """Count one attempt (and time it, when it went out): `status` and `error_kind` as
        `vertices.gateway.CallGuard.after_attempt` receives them, or `error_kind` `REFUSED`
        or `ADMISSION_UNAVAILABLE`."""
        record = self._records.get((destination, status, error_kind))
        if record is None:
            record = self._resolve(destination, status, error_kind)
        inc, observe = record
        inc()
        if observe is not None:
            observe(duration_s)

    def _label(self, destination: str) -> str:
        """`destination` as a label value: itself while it is one of the first
        `MAX_DESTINATIONS` seen, else `OTHER_DESTINATION`."""
        if destination in self._destinations or len(self._destinations) < MAX_DESTINATIONS:
            self._destinations.add(destination)
            return destination
        return OTHER_DESTINATION

    def _resolve(self, destination: str, status: int | None, error_kind: str | None) -> _Record:
        if self._label(destination) == destination:
            record = self._children(destination, status, error_kind)
            self._records[(destination, status, error_kind)] = record
            return record
        # Past the bound: cached by outcome alone, since each destination would be a key.
        overflow = self._overflow.get((status, error_kind))
        if overflow is None:
            overflow = self._children(OTHER_DESTINATION, status, error_kind)
            self._overflow[(status, error_kind)] = overflow
        return overflow

    def _children(self, label: str, status: int | None, error_kind: str | None) -> _Record:
        counter = self.attempts.labels(label, outcome_class(status, error_kind))
        if not _timed(status, error_kind):
            return (counter.inc, None)
        return (counter.inc, self.attempt_seconds.labels(label).observe)

    def refusal(self, destination: str, reason: str) -> None:
        """Count why admission refused one attempt (already counted `refused` by
        `attempt`); destinations past `MAX_DESTINATIONS` share `OTHER_DESTINATION`."""
        label = self._label(destination)
        inc = self._refusal_children.get((label, reason))
        if inc is None:
            inc = self.refusals.labels(label, reason).inc
            self._refusal_children[(label, reason)] = inc
        inc()

    def watch(self, in_flight: Callable[[], int], concurrency: int) -> None:
        """The worker these figures are of: its steps in flight are read at each scrape."""
        self.in_flight.set_function(in_flight)
        self.concurrency.set(concurrency)

    def leases_expired(self, steps: int) -> None:
        """Count the steps one reap took back from expired leases."""
        self.expired.inc(steps)

    def steps_finished(self, finished: Iterable[tuple[str, str]]) -> None:
        """Count a flush's steps, given as (vertex type, outcome): one `inc` per distinct
        pair, not per step."""
        for (vertex_type, outcome), count in Tally(finished).items():
            inc = self._step_children.get((vertex_type, outcome))
            if inc is None:
                inc = self.steps.labels(vertex_type, outcome).inc
                self._step_children[(vertex_type, outcome)] = inc
            inc(count)


@dataclass(frozen=True)
class MeteredCalls:
    """The `vertices.gateway.CallGuard` of a worker running without admission
    (`SCHEMABRIDGE_ADMISSION_ENABLED=false`): it only counts and times the attempts."""

    metrics: WorkerMetrics

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None:
        return None

    async def after_attempt(
        self,
        destination: str,
        status: int | None,
        error_kind: str | None,
        duration_s: float,
        *,
        retry_after_s: float | None = None,
    ) -> None:
        self.metrics.attempt(destination, status, error_kind, duration_s)
