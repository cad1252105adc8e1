"""What `/metrics` reports about the engine, read at scrape time.

Two sources, each read within a timeout and independently: the database (runs by status, the
ready-queue depth, deployments by status and the running ones' per-version figures) and Redis
(admission: each destination's AIMD limit, in-flight calls, cap and breaker states). A source
that fails or times out is listed in `failing` and its figures are None, so a scrape still
answers, with the HTTP figures and whatever did answer.

A worker's own figures (GATEWAY attempts, finished steps) are counted in its process, not read:
`WorkerMetrics`, re-exported here for the front doors that serve them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from admission import DestinationState
from engine.execution.worker_metrics import WorkerMetrics
from engine.operations.health import Dependency
from engine.operations.views import View
from engine.store.deployments import DeploymentCounts
from engine.store.models import DeploymentStatus, RunStatus
from engine.store.records import DeploymentRecord
from vertices.deploy import JUDGED_RUNS, VersionCounts

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from engine.runtime import Runtime

logger = logging.getLogger(__name__)

DEPLOYMENT_RUNS_SHOWN = JUDGED_RUNS
"""Runs of each version a running deployment's figures cover (its latest ones)."""

T = TypeVar("T")


class BreakerMetric(View):
    """One breaker layer of one destination."""

    layer: Literal["global", "tenant"]
    tenant: str | None
    """The tenant of a tenant layer (only layers that are not closed with zero failures are
    listed per tenant); None for the global layer."""
    state: str
    """`closed`, `open` or `half_open`, as the next request would see it."""


class DestinationMetrics(View):
    destination: str
    limit: float
    """The AIMD concurrency limit (fractional)."""
    in_flight: int
    cap: int
    """`maxConcurrency` in force (configured, or the default)."""
    breakers: list[BreakerMetric]


class VersionMetrics(View):
    """The runs a running deployment routed to one version, by outcome: its latest
    `DEPLOYMENT_RUNS_SHOWN` (what the deployment's checks judge), so a scrape costs the same however
    long the deployment has run."""

    version: int
    role: Literal["candidate", "serving"]
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    failure_ratio: float | None
    """FAILED among SUCCEEDED + FAILED; None before any finished."""


class DeploymentMetrics(View):
    """A RUNNING deployment."""

    id: str
    workflow: str
    stage: int
    """1-based."""
    weight: float
    """Percent of new runs the candidate gets."""
    candidate_version: int
    versions: list[VersionMetrics]


class MetricsSnapshot(View):
    """The engine's figures at one scrape. A None field: its source is in `failing`."""

    runs_by_status: dict[str, int] | None
    """Every run status, with 0 for the ones no run has."""
    ready_steps: int | None
    """Steps READY to be claimed (the backpressure signal)."""
    destinations: list[DestinationMetrics] | None
    failing: list[Dependency]
    deployments_by_status: dict[str, int] | None = None
    """Every deployment status, with 0 for the ones no deployment has."""
    deployments: list[DeploymentMetrics] | None = None
    """The deployments running now, with their per-version figures."""


def _destination(state: DestinationState) -> DestinationMetrics:
    breakers = [BreakerMetric(layer="global", tenant=None, state=state.global_breaker.state)]
    breakers += [
        BreakerMetric(layer="tenant", tenant=tenant, state=layer.state)
        for tenant, layer in sorted(state.tenant_breakers.items())
    ]
    return DestinationMetrics(
        destination=state.destination,
        limit=state.limit,
        in_flight=state.in_flight,
        cap=state.cap,
        breakers=breakers,
    )


class MetricsOperations:
    """Read-only figures for monitoring."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def snapshot(self, *, timeout_s: float | None = None) -> MetricsSnapshot:
        """Read both sources concurrently, each within `timeout_s` (default
        `Settings.health_timeout_s`). Never raises for a failing source."""
        timeout = self._runtime.settings.health_timeout_s if timeout_s is None else timeout_s
        queue, admission = await asyncio.gather(
            _within("database", self._queue_figures(), timeout),
            _within("redis", self._runtime.admission.snapshot(), timeout),
        )
        failing: list[Dependency] = []
        if queue is None:
            failing.append("database")
        if admission is None:
            failing.append("redis")
        return MetricsSnapshot(
            runs_by_status=None if queue is None else queue.runs_by_status,
            ready_steps=None if queue is None else queue.ready_steps,
            deployments_by_status=None if queue is None else queue.deployments_by_status,
            deployments=None if queue is None else queue.deployments,
            destinations=None
            if admission is None
            else [_destination(state) for state in admission.destinations],
            failing=failing,
        )

    async def _queue_figures(self) -> _DatabaseFigures:
        store = self._runtime.store
        # One count per status (each an index range of ix_run_status_created) rather than a
        # GROUP BY over the whole table.
        counts = {status.value: await store.count_runs(status.value) for status in RunStatus}
        by_status = await store.deployments_by_status()
        deployments = [
            _deployment(record, await store.deployment_counts(record, recent=DEPLOYMENT_RUNS_SHOWN))
            for record in await store.running_deployments()
        ]
        return _DatabaseFigures(
            runs_by_status=counts,
            ready_steps=await store.ready_depth(),
            deployments_by_status={s.value: by_status.get(s.value, 0) for s in DeploymentStatus},
            deployments=deployments,
        )


@dataclass(frozen=True)
class _DatabaseFigures:
    runs_by_status: dict[str, int]
    ready_steps: int
    deployments_by_status: dict[str, int]
    deployments: list[DeploymentMetrics]


def _version(
    version: int, role: Literal["candidate", "serving"], counts: VersionCounts
) -> VersionMetrics:
    return VersionMetrics(
        version=version,
        role=role,
        runs=counts.runs,
        succeeded=counts.succeeded,
        failed=counts.failed,
        cancelled=counts.cancelled,
        failure_ratio=counts.failure_ratio,
    )


def _deployment(record: DeploymentRecord, counts: DeploymentCounts) -> DeploymentMetrics:
    return DeploymentMetrics(
        id=record.id,
        workflow=record.workflow_name,
        stage=record.stage_index + 1,
        weight=float(record.stages[record.stage_index]["weight"]),
        candidate_version=record.candidate_version,
        versions=[
            _version(record.candidate_version, "candidate", counts.candidate),
            _version(record.serving_version, "serving", counts.serving),
        ],
    )


async def _within(source: Dependency, figures: Awaitable[T], timeout_s: float) -> T | None:
    """`figures` within `timeout_s`; None (logged) when the source fails or is too slow."""
    try:
        return await asyncio.wait_for(figures, timeout_s)
    except Exception as error:  # a failing source is reported, whatever it raised
        logger.warning("metrics: the %s did not answer: %r", source, error)
        return None


__all__ = [
    "DEPLOYMENT_RUNS_SHOWN",
    "BreakerMetric",
    "DeploymentMetrics",
    "DestinationMetrics",
    "MetricsOperations",
    "MetricsSnapshot",
    "VersionMetrics",
    "WorkerMetrics",
]
