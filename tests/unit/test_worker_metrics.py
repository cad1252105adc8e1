"""The worker's metrics on a real prometheus_client registry: the outcome classes of attempts,
what is timed, the bound on destinations, refusals counted by the admission guard, finished
steps counted per flush."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from admission import AdmissionConfig, DestinationPaced, TenantRateLimited
from admission.rate_limit import RateDecision
from engine.execution import worker_metrics
from engine.execution.admission_guard import (
    ADMISSION_UNAVAILABLE,
    REFUSED,
    AdmissionGuard,
    CoordinationDown,
)
from engine.execution.worker_metrics import WorkerMetrics, outcome_class
from schemas.errors import BreakerOpen, FailureKind, RetryRefused, StepFailure

ATTEMPTS = "schemabridge_gateway_attempts_total"
SECONDS = "schemabridge_gateway_attempt_duration_seconds_count"
STEPS = "schemabridge_steps_finished_total"
REFUSALS = "schemabridge_admission_refusals_total"


def _value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (200, None, "2xx"),
        (204, None, "2xx"),
        (301, None, "3xx"),
        (404, None, "4xx"),
        (429, None, "4xx"),
        (500, None, "5xx"),
        (503, None, "5xx"),
        (200, "invalid_response", "invalid_response"),
        (None, "timeout", "timeout"),
        (None, "network_error", "network_error"),
        (None, "cancelled", "cancelled"),
        (None, REFUSED, "refused"),
        (None, ADMISSION_UNAVAILABLE, "admission_unavailable"),
        (999, None, "other"),
    ],
)
def test_outcome_classes(status: int | None, kind: str | None, expected: str) -> None:
    assert outcome_class(status, kind) == expected


def test_attempts_that_went_out_are_timed_and_the_others_only_counted() -> None:
    metrics = WorkerMetrics()
    for status, kind in [(200, None), (201, None), (500, None), (None, "timeout")]:
        metrics.attempt("https://a:443", status, kind, 0.02)
    for kind in (REFUSED, ADMISSION_UNAVAILABLE, "cancelled", "egress_denied"):
        metrics.attempt("https://a:443", None, kind, 0.0)
    assert _value(metrics, ATTEMPTS, destination="https://a:443", outcome="2xx") == 2
    assert _value(metrics, ATTEMPTS, destination="https://a:443", outcome="5xx") == 1
    assert _value(metrics, ATTEMPTS, destination="https://a:443", outcome="refused") == 1
    assert _value(metrics, SECONDS, destination="https://a:443") == 4


def test_destinations_past_the_bound_share_one_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_metrics, "MAX_DESTINATIONS", 2)
    metrics = WorkerMetrics()
    for destination in ["a", "b", "c", "d", "a", "c"]:
        metrics.attempt(destination, 200, None, 0.01)
    assert _value(metrics, ATTEMPTS, destination="a", outcome="2xx") == 2
    assert _value(metrics, ATTEMPTS, destination="b", outcome="2xx") == 1
    assert _value(metrics, ATTEMPTS, destination="<other>", outcome="2xx") == 3
    assert _value(metrics, ATTEMPTS, destination="c", outcome="2xx") is None


def test_steps_are_counted_by_vertex_type_and_outcome() -> None:
    metrics = WorkerMetrics()
    metrics.steps_finished([("GATEWAY", "succeeded")] * 3 + [("MERGE", "parked")])
    metrics.steps_finished([("GATEWAY", "succeeded"), ("GATEWAY", "failed")])
    assert _value(metrics, STEPS, vertex_type="GATEWAY", outcome="succeeded") == 4
    assert _value(metrics, STEPS, vertex_type="GATEWAY", outcome="failed") == 1
    assert _value(metrics, STEPS, vertex_type="MERGE", outcome="parked") == 1


class Refusing:
    """Stands in for `Admission` (only `admit` is used): raises what it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.config = AdmissionConfig()

    async def admit(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "raised", "outcome"),
    [
        (
            BreakerOpen("open", destination="d", layer="global", retry_after_s=1.0),
            BreakerOpen,
            REFUSED,
        ),
        (TenantRateLimited("t", RateDecision(False, 1.0, 5, 5, 1.0)), TenantRateLimited, REFUSED),
        (RedisConnectionError("down"), CoordinationDown, ADMISSION_UNAVAILABLE),
    ],
)
async def test_the_guard_counts_a_refusal(
    error: Exception, raised: type[Exception], outcome: str
) -> None:
    metrics = WorkerMetrics()
    guard = AdmissionGuard(Refusing(error), "t", 1.0, meter=metrics)  # type: ignore[arg-type]
    with pytest.raises(raised):
        await guard.before_attempt("d", retry=False, timeout_s=30)
    assert _value(metrics, ATTEMPTS, destination="d", outcome=outcome) == 1
    assert _value(metrics, SECONDS, destination="d") is None, "nothing was sent"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (BreakerOpen("open", destination="d", layer="tenant", retry_after_s=1.0), "breaker_open"),
        (RetryRefused("budget"), "retry_budget"),
        (TenantRateLimited("t", RateDecision(False, 1.0, 5, 5, 1.0)), "tenant_rate"),
        (DestinationPaced("cap", "waiting for the cap"), "destination_cap"),
        (StepFailure(FailureKind.EXTERNAL_OVERLOAD, "no slot"), "no_slot"),
    ],
)
async def test_a_refusal_is_counted_by_its_reason(error: Exception, reason: str) -> None:
    """An alert on an open breaker, or on a tenant at its rate limit, needs to tell them
    apart: both are `refused` attempts, and only the reason says which."""
    metrics = WorkerMetrics()
    guard = AdmissionGuard(Refusing(error), "t", 1.0, meter=metrics)  # type: ignore[arg-type]
    with pytest.raises(type(error)):
        await guard.before_attempt("d", retry=False, timeout_s=30)
    assert _value(metrics, ATTEMPTS, destination="d", outcome=REFUSED) == 1
    assert _value(metrics, REFUSALS, destination="d", reason=reason) == 1
    counted = [
        sample
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == REFUSALS
    ]
    assert len(counted) == 1, counted


def test_refusals_past_the_destination_bound_share_one_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_metrics, "MAX_DESTINATIONS", 1)
    metrics = WorkerMetrics()
    for destination in ("a", "b", "c"):
        metrics.refusal(destination, "tenant_rate")
    assert _value(metrics, REFUSALS, destination="a", reason="tenant_rate") == 1
    assert _value(metrics, REFUSALS, destination="<other>", reason="tenant_rate") == 2


class _Reaped:
    """The two reads of a reap: two steps whose lease expired, nothing stranded."""

    async def requeue_expired(self) -> list[tuple[int, str, str]]:
        return [(1, "run-1", "a"), (2, "run-2", "a")]

    async def release_stranded(self, *, every_run: bool) -> list[tuple[int, str, str]]:
        return []


class _Wakeups:
    async def notify(self) -> None:
        return None


async def test_steps_taken_back_from_expired_leases_are_counted() -> None:
    """A worker killed while it held steps shows as the steps another worker takes back when
    their leases end: the series an alert on dying workers reads."""
    from types import SimpleNamespace

    from engine.execution.worker import Worker, WorkerConfig

    metrics = WorkerMetrics()
    deps = SimpleNamespace(metrics=metrics)
    worker = Worker(_Reaped(), deps, _Wakeups(), WorkerConfig())  # type: ignore[arg-type]
    await worker._reap()
    assert _value(metrics, "schemabridge_expired_leases_total") == 2


class _ReapedOne(_Reaped):
    async def requeue_expired(self) -> list[tuple[int, str, str]]:
        return [(1, "run-1", "a")]


async def test_one_step_taken_back_is_logged_as_one_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's log said "requeued 1 steps whose lease expired"."""
    from types import SimpleNamespace

    from engine.execution.worker import Worker, WorkerConfig

    deps = SimpleNamespace(metrics=WorkerMetrics())
    worker = Worker(_ReapedOne(), deps, _Wakeups(), WorkerConfig())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="engine.execution.worker"):
        await worker._reap()
    assert "requeued 1 step whose lease expired" in caplog.messages, caplog.messages


def test_a_workers_steps_in_flight_are_read_at_scrape_time() -> None:
    """Whether workers are saturated (add workers) or idle (the queue waits on something
    else): the steps a worker holds against how many it may hold."""
    from types import SimpleNamespace

    from engine.execution.worker import Worker, WorkerConfig

    metrics = WorkerMetrics()
    deps = SimpleNamespace(metrics=metrics)
    worker = Worker(_Reaped(), deps, _Wakeups(), WorkerConfig(concurrency=8))  # type: ignore[arg-type]
    assert _value(metrics, "schemabridge_worker_concurrency") == 8
    assert _value(metrics, "schemabridge_worker_steps_in_flight") == 0
    worker._in_flight.update({"claim-1": None, "claim-2": None})  # type: ignore[dict-item]
    assert _value(metrics, "schemabridge_worker_steps_in_flight") == 2
