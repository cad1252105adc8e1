"""Prometheus metrics of one app: its HTTP requests, and the engine's figures at scrape time.

Each app has its own `CollectorRegistry` (never the process-global one), so two apps in one
process (a test, `serve`) never mix their series. Series:

- `schemabridge_http_request_duration_seconds{method,route,status}`: histogram; `route` is the
  route template (`/keys/{key_id}`), `<unmatched>` when no route matched. An event stream
  (`/runs/{run_id}/events`) is timed to its first byte: it lasts as long as it is watched.
- `schemabridge_runs{status}`, `schemabridge_ready_steps`: from the database.
- `schemabridge_admission_limit{destination}`, `schemabridge_admission_in_flight{destination}`,
  `schemabridge_admission_cap{destination}`,
  `schemabridge_breaker_state{destination,layer,tenant,state}` (1 for the layer's state, 0 for
  the other two): from Redis.
- `schemabridge_deployments{status}`, and for each running deployment
  `schemabridge_deployment_stage{workflow,deployment}`,
  `schemabridge_deployment_candidate_weight{workflow,deployment,candidate_version}`,
  `schemabridge_deployment_runs{workflow,deployment,version,role,outcome}` and
  `schemabridge_deployment_failure_ratio{workflow,deployment,version,role}` (role `candidate`
  or `serving`): from the database.
- `schemabridge_dependency_up{dependency}`: 1 when the source answered this scrape, else 0
  (its series are then left out rather than reported stale).

`serve` runs a worker in the same process: its app serves that worker's series too
(`engine.execution.worker_metrics`). A worker's health port serves those alone
(`render_worker`).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from engine.operations.health import Dependency
from engine.operations.metrics import (
    DEPLOYMENT_RUNS_SHOWN,
    DeploymentMetrics,
    DestinationMetrics,
    MetricsSnapshot,
    WorkerMetrics,
)

BREAKER_STATES = ("closed", "open", "half_open")
DEPENDENCIES: tuple[Dependency, ...] = ("database", "redis")


def _destination_families(destinations: list[DestinationMetrics]) -> Iterator[Metric]:
    labels = ["destination"]
    limit = GaugeMetricFamily(
        "schemabridge_admission_limit", "AIMD concurrency limit per destination.", labels=labels
    )
    in_flight = GaugeMetricFamily(
        "schemabridge_admission_in_flight", "Calls in flight per destination.", labels=labels
    )
    cap = GaugeMetricFamily(
        "schemabridge_admission_cap", "maxConcurrency in force per destination.", labels=labels
    )
    breaker = GaugeMetricFamily(
        "schemabridge_breaker_state",
        "Circuit breaker layers: 1 for the state each layer is in.",
        labels=["destination", "layer", "tenant", "state"],
    )
    for destination in destinations:
        name = destination.destination
        limit.add_metric([name], destination.limit)
        in_flight.add_metric([name], destination.in_flight)
        cap.add_metric([name], destination.cap)
        for layer in destination.breakers:
            for state in BREAKER_STATES:
                value = 1.0 if layer.state == state else 0.0
                breaker.add_metric([name, layer.layer, layer.tenant or "", state], value)
    yield from (limit, in_flight, cap, breaker)


OUTCOMES = ("succeeded", "failed", "cancelled", "running")


def _deployment_families(
    by_status: dict[str, int], deployments: list[DeploymentMetrics]
) -> Iterator[Metric]:
    total = GaugeMetricFamily(
        "schemabridge_deployments", "Deployments by status.", labels=["status"]
    )
    for status, count in sorted(by_status.items()):
        total.add_metric([status], count)
    yield total
    labels = ["workflow", "deployment"]
    stage = GaugeMetricFamily(
        "schemabridge_deployment_stage", "The stage a running deployment is in.", labels=labels
    )
    weight = GaugeMetricFamily(
        "schemabridge_deployment_candidate_weight",
        "Percent of new runs a running deployment's candidate gets.",
        labels=[*labels, "candidate_version"],
    )
    runs = GaugeMetricFamily(
        "schemabridge_deployment_runs",
        f"Runs a running deployment routed to each version (its latest {DEPLOYMENT_RUNS_SHOWN:,}), "
        "by outcome.",
        labels=[*labels, "version", "role", "outcome"],
    )
    ratio = GaugeMetricFamily(
        "schemabridge_deployment_failure_ratio",
        "FAILED among the finished runs of schemabridge_deployment_runs.",
        labels=[*labels, "version", "role"],
    )
    for deployment in deployments:
        ids = [deployment.workflow, deployment.id]
        stage.add_metric(ids, deployment.stage)
        weight.add_metric([*ids, str(deployment.candidate_version)], deployment.weight)
        for version in deployment.versions:
            keys = [*ids, str(version.version), version.role]
            ended = version.succeeded + version.failed + version.cancelled
            counts = (version.succeeded, version.failed, version.cancelled, version.runs - ended)
            for outcome, count in zip(OUTCOMES, counts, strict=True):
                runs.add_metric([*keys, outcome], count)
            if version.failure_ratio is not None:
                ratio.add_metric(keys, version.failure_ratio)
    yield from (stage, weight, runs, ratio)


class EngineCollector(Collector):
    """Yields the snapshot it is handed for the scrape under way (nothing between scrapes)."""

    def __init__(self) -> None:
        self.snapshot: MetricsSnapshot | None = None

    def describe(self) -> list[Metric]:
        return []  # the series depend on each scrape's snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot is None:
            return
        up = GaugeMetricFamily(
            "schemabridge_dependency_up",
            "1 when the dependency answered this scrape.",
            labels=["dependency"],
        )
        for dependency in DEPENDENCIES:
            up.add_metric([dependency], 0.0 if dependency in snapshot.failing else 1.0)
        yield up
        if snapshot.runs_by_status is not None:
            runs = GaugeMetricFamily("schemabridge_runs", "Runs by status.", labels=["status"])
            for status, count in sorted(snapshot.runs_by_status.items()):
                runs.add_metric([status], count)
            yield runs
        if snapshot.ready_steps is not None:
            yield GaugeMetricFamily(
                "schemabridge_ready_steps", "Steps READY to be claimed.", value=snapshot.ready_steps
            )
        if snapshot.destinations is not None:
            yield from _destination_families(snapshot.destinations)
        if snapshot.deployments_by_status is not None and snapshot.deployments is not None:
            yield from _deployment_families(snapshot.deployments_by_status, snapshot.deployments)


class ApiMetrics:
    """The registry of one app: the HTTP histogram, the engine collector and, with a worker in
    the process (`serve`), the worker's series."""

    def __init__(self, worker: WorkerMetrics | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "schemabridge_http_request_duration_seconds",
            "HTTP request latency by route template and status (an event stream: the time to "
            "its first byte).",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._engine = EngineCollector()
        self.registry.register(self._engine)
        if worker is not None:
            for collector in worker.collectors:
                self.registry.register(collector)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request (`api.rest.middleware.RequestObserver` calls it)."""
        self.requests.labels(method, route, str(status)).observe(seconds)

    def render(self, snapshot: MetricsSnapshot, accept: str | None) -> tuple[bytes, str]:
        """The exposition (body, content type) for an `Accept` header, with `snapshot`'s
        figures. Synchronous from start to end, so concurrent scrapes on one event loop
        never see each other's snapshot."""
        encoder, content_type = choose_encoder(accept or "")
        self._engine.snapshot = snapshot
        try:
            return encoder(self.registry), content_type
        finally:
            self._engine.snapshot = None


def render_worker(worker: WorkerMetrics, accept: str | None) -> tuple[bytes, str]:
    """A worker's own series (its health port's `/metrics`): counters in memory, nothing read
    from the database or Redis."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(worker.registry), content_type
