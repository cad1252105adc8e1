"""One tenant cannot open the global breaker layer by itself (docs/architecture.md, 'Circuit
breakers'; docs/security.md, 'Breakers shared by tenants'), on both backends, with the default
thresholds, a real worker and the demo downstream on loopback.

Tenant a has many calls to one destination in flight when they start failing (a slow path
that answers 500): its tenant layer opens at the 5th failure, and the failures after it, of
calls sent before it opened, count in neither layer. Tenant b's calls to the same destination
go on. Counted in the global layer, they would have opened it (15 failures) and refused b for
60 s, and tenant a could do it again every minute. The global layer still opens when several
tenants fail: each one's failures count until its own layer opens."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from admission import AdmissionConfig, AimdConfig, BreakerState
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, gateway

SLOW_FAILURE = "slow?status=500&sleep_ms=2000"
"""Answers 500 after 2 s: long enough for every child of a fan-out to be in flight."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    # As after a successful fan-out has raised the destination's limit: room for every call
    # at once (the breakers keep their defaults: 5 / 30 s and 15 / 60 s).
    aimd = AimdConfig(initial_limit=60, slow_start=False)
    runtime.admission.config = dataclasses.replace(AdmissionConfig(), aimd=aimd)
    yield runtime
    await runtime.close()


def once(url: str) -> dict[str, Any]:
    """One call, one attempt, never redispatched: a refusal fails the step at once."""
    return {**gateway(url, retry={"maxAttempts": 1}), "maxAutoRetries": 0}


async def publish(ops: Operations, base: str) -> None:
    await ops.workflows.publish(
        {"name": "hit", "vertices": {"call": once(f"{base}/{SLOW_FAILURE}")}}
    )
    each = {"type": "SPAWNER", "config": {"items": "{{ input.items }}", "workflow": "hit"}}
    await ops.workflows.publish({"name": "storm", "vertices": {"each": each}})
    await ops.workflows.publish({"name": "healthy", "vertices": {"call": once(f"{base}/ok")}})


async def storms(ops: Operations, tenants: str, children: int) -> None:
    """Each tenant fans out `children` failing calls at once; returns when all have ended."""
    submitted = [
        await ops.runs.submit("storm", {"items": list(range(children))}, tenant_id=tenant)
        for tenant in tenants
    ]
    await asyncio.gather(*(ended(ops, s.run.id, timeout_s=60) for s in submitted))


async def breakers(runtime: Runtime, destination: str) -> tuple[Any, dict[str, BreakerState]]:
    snapshot = await runtime.admission.snapshot(also=[destination])
    (state,) = [d for d in snapshot.destinations if d.destination == destination]
    tenants = {tenant: layer.state for tenant, layer in state.tenant_breakers.items()}
    return state.global_breaker, tenants


async def test_one_tenants_calls_in_flight_leave_the_other_tenants_calls_going(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    ops = Operations(runtime)
    await publish(ops, downstream.url)
    async with running_worker(runtime):
        await storms(ops, "a", children=20)
        healthy = await ops.runs.submit("healthy", {}, tenant_id="b")
        run = await ended(ops, healthy.run.id)
    assert run.status == "SUCCEEDED", run.error
    assert downstream.stats.total == 21  # a's 20 calls were all sent, and failed
    global_layer, tenants = await breakers(runtime, f"http://127.0.0.1:{downstream.port}")
    assert tenants == {"a": BreakerState.OPEN}
    # a's first 5 failures counted, then b's success reset the count.
    assert (global_layer.state, global_layer.failures) == (BreakerState.CLOSED, 0)


async def test_several_failing_tenants_still_open_the_global_layer(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    ops = Operations(runtime)
    await publish(ops, downstream.url)
    async with running_worker(runtime):
        await storms(ops, "cdef", children=5)  # 20 failures, none after its tenant's 5th
        healthy = await ops.runs.submit("healthy", {}, tenant_id="b")
        run = await ended(ops, healthy.run.id)
    assert run.status == "FAILED" and run.error is not None
    assert run.error.kind == "external_overload"
    assert "the global breaker" in run.error.message and "(all tenants) is open" in (
        run.error.message
    )
    global_layer, _ = await breakers(runtime, f"http://127.0.0.1:{downstream.port}")
    assert global_layer.state is BreakerState.OPEN
