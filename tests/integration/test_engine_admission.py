"""Admission in the running engine (issue 5): redispatch of overloaded steps, maxAutoRetries,
breakers stopping traffic to a dead destination, destination caps, tenant rate limits."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from demo.downstream import RunningDownstream, start_downstream
from demo.downstream_state import DownstreamConfig
from engine.execution import executor
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.records import ClaimedStep, StepFailed, StepParked, StepSucceeded, Waiting
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from schemas.waiting import WaitReason
from tests.conftest import Backend
from tests.integration.egress_harness import canary
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.operations_harness import ended, gateway
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL
from vertices.egress import LOOPBACK_ALLOW
from vertices.gateway import destination_key

DELAYS = (0.3, 0.6, 1.2)


def call(url: str, *, max_auto_retries: int = 3, attempts: int = 2) -> Workflow:
    return Workflow.model_validate(
        {
            "name": "call",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "maxAutoRetries": max_auto_retries,
                    "config": {"url": url, "retry": {"maxAttempts": attempts, "baseDelayMs": 10}},
                }
            },
        }
    )


@pytest.mark.parametrize("max_auto_retries", [0, 2])
async def test_overloaded_step_is_redispatched_up_to_max_auto_retries(
    backend: Backend, downstream: RunningDownstream, max_auto_retries: int
) -> None:
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=DELAYS))
    try:
        # One attempt per dispatch keeps the failures under the tenant breaker's threshold (5).
        workflow = call(
            f"{downstream.url}/busy?status=429", max_auto_retries=max_auto_retries, attempts=1
        )
        run_id = await start(runtime, [workflow], {})
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id, timeout_s=30)
        (step,) = await runtime.store.get_steps(run_id)
    finally:
        await runtime.close()
    assert run.status == "FAILED"
    assert run.error.kind == "external_overload"
    assert step.auto_retries == max_auto_retries
    assert step.attempts == max_auto_retries + 1
    # One request per dispatch; the dispatches are at least 0.3 s, then 0.6 s apart.
    arrivals = sorted(downstream.stats.arrivals("/busy"))
    assert len(arrivals) == max_auto_retries + 1
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(gap >= delay for gap, delay in zip(gaps, DELAYS, strict=False)), gaps


async def test_other_failures_are_not_redispatched(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=DELAYS))
    try:
        run_id = await start(runtime, [call(f"{downstream.url}/bad?status=400")], {})
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id)
        (step,) = await runtime.store.get_steps(run_id)
    finally:
        await runtime.close()
    assert run.error.kind == "http_error"
    assert (step.attempts, step.auto_retries) == (1, 0)
    assert downstream.stats.total == 1


async def _quiet(runtime: Runtime, run_ids: list[str], clock: FakeClock) -> bool:
    """True when no step of `run_ids` is running or due now (only timers are left)."""
    for run_id in run_ids:
        for step in await runtime.store.get_steps(run_id):
            if step.status == "RUNNING":
                return False
            if step.status == "READY" and step.not_before <= clock.now():
                return False
    return True


async def test_breakers_stop_traffic_to_a_dead_destination(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=DELAYS), clock=clock)
    try:
        workflow = call(f"{downstream.url}/dead?status=503", max_auto_retries=3, attempts=4)
        version = await runtime.store.publish(workflow)
        run_ids = [(await runtime.store.create_run(version, {}))[0].id for _ in range(6)]
        async with running_worker(runtime):
            # Redispatches wait for the breaker's reset (30 s of the fake clock): move time on
            # whenever only timers are left, a bounded number of times. The bound is on turns
            # of this loop (at least 60 s), not on advances: a loaded host's worker needs more
            # turns between two advances (6 to 11 turns in all on a lightly loaded one).
            reasons: set[str | None] = set()
            for _ in range(600):
                runs = [await runtime.store.get_run(run_id) for run_id in run_ids]
                if all(r is not None and r.status == "FAILED" for r in runs):
                    break
                for run_id in run_ids:
                    reasons |= {s.wait_reason for s in await runtime.store.get_steps(run_id)}
                if await _quiet(runtime, run_ids, clock):
                    clock.advance(31)
                await asyncio.sleep(0.1)
            runs = [await wait_for_run(runtime, run_id, timeout_s=10) for run_id in run_ids]
    finally:
        await runtime.close()
    assert {r.status for r in runs} == {"FAILED"}
    assert {r.error.kind for r in runs} == {"external_overload"}
    # Without breakers: 6 runs x 4 dispatches x 4 attempts = 96 requests. The tenant breaker
    # opens after 5 consecutive failures; later attempts are refused without a request, and
    # each half-open probe that fails reopens it.
    assert downstream.stats.total < 30
    assert "circuit open" in " ".join(str(r.error) for r in runs)
    # A step the open breaker refused waits for the breaker, not for an ordinary redispatch.
    assert "breaker_open" in reasons


async def test_destination_cap_bounds_concurrency(backend: Backend) -> None:
    server = await start_downstream(config=DownstreamConfig(latency_ms=150))
    runtime = await Runtime.open(settings_for(backend))
    try:
        await Operations(runtime).settings.set_caps("capped", 2)
        workflow = Workflow.model_validate(
            {
                "name": "capped",
                "vertices": {
                    "call": {
                        "type": "GATEWAY",
                        "config": {"url": f"{server.url}/c", "destination": "capped"},
                    }
                },
            }
        )
        version = await runtime.store.publish(workflow)
        run_ids = [(await runtime.store.create_run(version, {}))[0].id for _ in range(8)]
        async with running_worker(runtime):
            runs = [await wait_for_run(runtime, run_id) for run_id in run_ids]
        snapshot = await runtime.admission.snapshot()
    finally:
        await runtime.close()
        await server.stop()
    assert {r.status for r in runs} == {"SUCCEEDED"}
    assert server.stats.max_concurrent <= 2
    assert server.stats.total == 8
    (state,) = [d for d in snapshot.destinations if d.destination == "capped"]
    assert (state.cap, state.cap_configured) == (2, True)


async def test_tenant_at_its_rate_limit_is_delayed_not_failed(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, tenant_rate_per_minute=2), clock=clock)
    try:
        version = await runtime.store.publish(call(f"{downstream.url}/ok"))
        for _ in range(3):
            await runtime.store.create_run(version, {}, tenant_id="acme")
        claimed = await runtime.store.claim(10, lease_s=30)
        deps = runtime.executor_deps()
        results = [await executor.execute(step, version.workflow, deps) for step in claimed]
    finally:
        await runtime.close()
    parked = [result for result, _ in results if isinstance(result, StepParked)]
    assert len(parked) == 1
    assert parked[0].not_before == clock.now() + 5.0
    assert "rate limit" in parked[0].reason
    assert parked[0].waiting == Waiting(WaitReason.TENANT_RATE_LIMIT, parked[0].reason)
    assert downstream.stats.total == 2


async def test_redispatches_spend_the_retry_budget(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """With the destination's retry budget spent, a redispatch is refused without a request:
    redispatches and in-process retries draw on the same budget."""
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=DELAYS))
    try:
        destination = destination_key(downstream.url, None)
        for _ in range(60):  # failures seen elsewhere take the bucket to 40 of 100 (refill 1/s)
            await runtime.admission.budget.record_failure(destination)
        workflow = call(f"{downstream.url}/busy?status=429", max_auto_retries=2, attempts=1)
        run_id = await start(runtime, [workflow], {})
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id, timeout_s=30)
        (step,) = await runtime.store.get_steps(run_id)
    finally:
        await runtime.close()
    assert run.status == "FAILED"
    assert run.error.kind == "external_overload"
    assert "retry budget" in run.error.message
    assert step.auto_retries == 2
    assert downstream.stats.total == 1  # only the first dispatch was sent


async def test_a_step_waits_while_admission_cannot_reach_redis(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """Redis down: nothing is sent and the step parks briefly; it neither fails nor runs
    without admission."""
    settings = settings_for(backend, redis_url=UNREACHABLE_REDIS_URL)
    runtime = await Runtime.open(settings)
    try:
        version = await runtime.store.publish(call(f"{downstream.url}/ok"))
        await runtime.store.create_run(version, {})
        (claimed,) = await runtime.store.claim(10, lease_s=30)
        result, _ = await executor.execute(claimed, version.workflow, runtime.executor_deps())
    finally:
        await runtime.close()
    assert isinstance(result, StepParked)
    assert "admission unavailable" in result.reason
    assert result.waiting == Waiting(WaitReason.COORDINATION_UNAVAILABLE, result.reason)
    assert downstream.stats.total == 0
    # What the step says waits is every reader's, a tenant key's too: never where Redis is
    # (which the worker's log says, for operators), as a tenant is never told which worker.
    host = UNREACHABLE_REDIS_URL.split("//", 1)[1].split(":", 1)[0]
    assert host not in result.reason, result.reason
    assert result.reason == (
        "admission unavailable: Redis does not answer (ConnectionError); the step waits and "
        "tries again (the workers' log says why)"
    )


async def test_tenant_rate_limits_are_durable(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """An operator's tenant limit lives in the database: a process that starts after Redis
    lost its copy still applies it."""
    clock = FakeClock()
    tenant = f"acme-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared by this process
    first = await Runtime.open(settings_for(backend), clock=clock)
    try:
        await Operations(first).settings.set_tenant_rate(tenant, 2)
        await first.admission.backend.write_tenant_limit(tenant, None)  # Redis forgot it
        version = await first.store.publish(call(f"{downstream.url}/ok"))
        for _ in range(3):
            await first.store.create_run(version, {}, tenant_id=tenant)
    finally:
        await first.close()
    second = await Runtime.open(settings_for(backend), clock=clock)
    try:
        claimed = await second.store.claim(10, lease_s=30)
        deps = second.executor_deps()
        results = [await executor.execute(step, version.workflow, deps) for step in claimed]
        assert await second.store.list_tenant_rates() == [(tenant, 2)]
        await Operations(second).settings.reset_tenant_rate(tenant)
        assert await second.store.get_tenant_rate(tenant) is None
    finally:
        await second.close()
    assert sum(isinstance(result, StepParked) for result, _ in results) == 1
    assert downstream.stats.total == 2


async def test_a_redispatch_runs_when_due_not_at_the_next_idle_poll(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """The worker that parked a step wakes up when it is due: with a 5 s idle poll, a 0.3 s
    redispatch still happens about 0.3 s later (and redispatches spread over time are not
    gathered into one burst at the next poll)."""
    settings = settings_for(backend, redispatch_delays_s=(0.3,), idle_poll_s=5.0)
    runtime = await Runtime.open(settings)
    try:
        workflow = call(f"{downstream.url}/busy?status=429", max_auto_retries=1, attempts=1)
        run_id = await start(runtime, [workflow], {})
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id, timeout_s=20)
    finally:
        await runtime.close()
    assert run.status == "FAILED"
    first, second = sorted(downstream.stats.arrivals("/busy"))
    assert 0.3 <= second - first < 2.0


async def execute_claimed(runtime: Runtime, workflow: Workflow) -> tuple[Any, ClaimedStep]:
    """Claim the one ready step, execute it, record the result."""
    (step,) = await runtime.store.claim(10, lease_s=30)
    result, lines = await executor.execute(step, workflow, runtime.executor_deps())
    await runtime.store.complete([result], lines)
    return result, step


async def test_a_step_refused_before_sending_takes_its_tenant_item_when_redispatched(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """No slot in time on the first execution: nothing sent, no item taken. The redispatch
    that is admitted takes the step's item (it used to skip it, so steps redispatched after an
    outage flooded back past their tenant's rate limit)."""
    clock, tenant = FakeClock(), f"acme-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    settings = settings_for(backend, tenant_rate_per_minute=100, admission_wait_s=0)
    runtime = await Runtime.open(settings, clock=clock)
    try:
        version = await runtime.store.publish(call(f"{downstream.url}/ok"))
        destination = destination_key(downstream.url, None)
        await Operations(runtime).settings.set_caps(destination, 2)
        overloaded, holder = [
            await runtime.admission.admit(destination, "other", wait_timeout_s=0) for _ in "ab"
        ]
        # A 503 cuts the limit under the cap: no slot is the destination's overload (a cap
        # that holds would park the step instead, see the paced fan-out below).
        await overloaded.overload()
        await runtime.store.create_run(version, {}, tenant_id=tenant)
        refused, first = await execute_claimed(runtime, version.workflow)
        assert isinstance(refused, StepFailed) and refused.retry_at is not None
        assert not refused.tenant_item_taken
        assert (await runtime.admission.rate.usage(tenant))[0] == 0
        await holder.ignore()
        clock.advance(30)
        succeeded, second = await execute_claimed(runtime, version.workflow)
        used, _ = await runtime.admission.rate.usage(tenant)
    finally:
        await runtime.close()
    assert isinstance(succeeded, StepSucceeded)
    assert (first.tenant_item_taken, second.tenant_item_taken) == (False, False)
    assert used == 1


async def test_a_step_whose_item_was_taken_does_not_take_another_when_redispatched(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock, tenant = FakeClock(), f"acme-{uuid.uuid4().hex[:8]}"
    settings = settings_for(backend, tenant_rate_per_minute=100)
    runtime = await Runtime.open(settings, clock=clock)
    try:
        version = await runtime.store.publish(call(f"{downstream.url}/busy?status=503", attempts=1))
        await runtime.store.create_run(version, {}, tenant_id=tenant)
        overloaded, _ = await execute_claimed(runtime, version.workflow)
        assert isinstance(overloaded, StepFailed) and overloaded.tenant_item_taken
        clock.advance(30)
        _, redispatched = await execute_claimed(runtime, version.workflow)
        used, _ = await runtime.admission.rate.usage(tenant)
    finally:
        await runtime.close()
    assert redispatched.tenant_item_taken  # remembered in the store
    assert redispatched.auto_retries == 1
    assert used == 1


class CapsThatFailOnce:
    """A caps source whose second read fails as a lost database connection does."""

    def __init__(self) -> None:
        self.reads = 0

    async def get_caps(self, destination: str) -> None:
        self.reads += 1
        if self.reads == 2:
            raise OperationalError("SELECT", {}, Exception("connection lost"))


async def test_a_park_for_a_store_error_keeps_the_tenant_item_taken(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """Attempt 1 takes the item; attempt 2's admit re-reads the caps and the store fails: the
    step parks to try again, and its next execution must not take a second item."""
    clock, tenant = FakeClock(), f"acme-{uuid.uuid4().hex[:8]}"
    runtime = await Runtime.open(settings_for(backend, tenant_rate_per_minute=100), clock=clock)
    try:
        runtime.admission._caps_source = CapsThatFailOnce()
        runtime.admission._loaded.refresh_s = 0.0  # the caps are re-read before attempt 2
        version = await runtime.store.publish(call(f"{downstream.url}/busy?status=500"))
        await runtime.store.create_run(version, {}, tenant_id=tenant)
        parked, _ = await execute_claimed(runtime, version.workflow)
        clock.advance(5)
        _, again = await execute_claimed(runtime, version.workflow)
        used, _ = await runtime.admission.rate.usage(tenant)
    finally:
        await runtime.close()
    assert isinstance(parked, StepParked) and "store unavailable" in parked.reason
    assert parked.waiting == Waiting(WaitReason.STORE_UNAVAILABLE, parked.reason)
    assert parked.tenant_item_taken and again.tenant_item_taken
    assert used == 1


def paced_fan_out(url: str, destination: str) -> list[Workflow]:
    """parent: a spawner over `input` → merge; child: one call to `destination`, never
    redispatched (`maxAutoRetries: 0`), so a step that failed its admission wait would fail."""
    parent = {
        "name": "paced",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input }}", "workflow": "leaf"}},
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    leaf = {
        "name": "leaf",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "maxAutoRetries": 0,
                "config": {"url": url, "destination": destination, "retry": {"maxAttempts": 1}},
            }
        },
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(leaf)]


@pytest.mark.parametrize(
    ("max_concurrency", "rate", "latency_ms", "shown"),
    [(10, 4.0, 0, "(4/s)"), (1, None, 150, "(maxConcurrency 1)")],
    ids=["rate", "concurrency"],
)
async def test_a_fan_out_past_its_destinations_cap_is_paced_not_failed(
    backend: Backend, max_concurrency: int, rate: float | None, latency_ms: int, shown: str
) -> None:
    """More children than the destination's own cap lets through within one admission wait:
    each child whose wait runs out parks and asks again (wait reason `destination_cap`), and
    every one succeeds, none counted against its `maxAutoRetries: 0`."""
    server = await start_downstream(config=DownstreamConfig(latency_ms=latency_ms))
    runtime = await Runtime.open(settings_for(backend, admission_wait_s=0.2))
    destination = f"paced-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    try:
        ops = Operations(runtime)
        await ops.settings.set_caps(destination, max_concurrency, rate)
        run_id = await start(
            runtime, paced_fan_out(f"{server.url}/p", destination), list(range(10))
        )
        reasons: dict[str, str] = {}
        async with running_worker(runtime):
            # Note the children's wait reasons while they run: a bounded number of looks.
            for _ in range(300):
                progress = await ops.runs.progress(run_id)
                reasons |= {w.reason: w.message for w in progress.fanout.waiting}
                if progress.ended:
                    break
                await asyncio.sleep(0.05)
            run = await wait_for_run(runtime, run_id)
            children = await runtime.store.children(run_id)
        refusals = [
            line
            for child in children
            for line in await runtime.store.run_logs(child.id, limit=100)
            if "refused by admission" in line["message"]
        ]
    finally:
        await runtime.close()
        await server.stop()
    # Each turn a child waited out is said, at info: pacing, not a warning.
    assert refusals and {line["level"] for line in refusals} == {"info"}
    assert run.status == "SUCCEEDED", run.error
    assert {c.status for c in children} == {"SUCCEEDED"} and len(children) == 10
    assert server.stats.total == 10  # one request each: nothing failed, nothing resent
    assert "destination_cap" in reasons, reasons
    assert f"waiting for the destination's cap {shown}" in reasons["destination_cap"]
    assert "redispatch" not in reasons


async def test_spellings_of_one_server_in_a_templated_host_share_one_admission_key(
    backend: Backend,
) -> None:
    """A submitter who chooses the host (`http://{{ input.host }}:…`) and spells one server
    three ways (the resolver connects `0x7f000001` and `0x7f.0.0.1` to 127.0.0.1) still meets
    one AIMD limit, cap and set of breakers: admission sees one key, the address."""
    spellings = ["127.0.0.1", "0x7f000001", "0x7f.0.0.1"]
    runtime = await Runtime.open(settings_for(backend, egress_allow=LOOPBACK_ALLOW))
    try:
        async with canary("127.0.0.1") as server:
            ops = Operations(runtime)
            url = f"http://{{{{ input.host }}}}:{server.port}/same"
            await ops.workflows.publish({"name": "spelled", "vertices": {"call": gateway(url)}})
            submitted = [await ops.runs.submit("spelled", {"host": h}) for h in spellings]
            async with running_worker(runtime):
                runs = [await ended(ops, s.run.id) for s in submitted]
            snapshot = await runtime.admission.snapshot()
    finally:
        await runtime.close()
    assert [r.status for r in runs] == ["SUCCEEDED"] * len(spellings)
    assert server.connections == len(spellings)  # every spelling reached the one server
    keys = {d.destination for d in snapshot.destinations if f":{server.port}" in d.destination}
    assert keys == {f"http://127.0.0.1:{server.port}"}
