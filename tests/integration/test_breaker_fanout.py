"""A fan-out behind an open breaker (docs/architecture.md, 'Redispatch'): a child counts one
redispatch per breaker opening it is refused under, not one per refusal, and parks (wait
reason `breaker_open`) while the same opening refuses it again. So a fan-out outlives a
downstream outage of a few openings, and dies only when the destination fails its probes
across `maxAutoRetries + 1` openings. On both backends, against a real loopback downstream,
with breakers of short reset timeouts."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from admission import AdmissionConfig
from admission.breaker import BreakerConfig
from demo.downstream import start_downstream
from demo.downstream_state import DownstreamConfig
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.test_breaker_reset_flow import fan_out

TENANT_LAYER = BreakerConfig(threshold=5, reset_s=1.0, successes_to_close=2, max_probes=2)
"""The tenant layer of the defaults, but half-open after 1 s instead of 30 s."""
QUIET_GLOBAL_LAYER = BreakerConfig(
    threshold=10_000, reset_s=1.0, successes_to_close=3, max_probes=3
)
"""A global layer that never opens here, so every opening counted is the tenant layer's."""
DELAYS = (0.3, 0.6, 1.2)
LATENCY_MS = 1200
"""Each call takes a while, so a half-open trial's probes are in flight while the children
parked behind the breaker come back and are refused again."""


async def open_runtime(backend: Backend) -> Runtime:
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=DELAYS))
    runtime.admission.config = dataclasses.replace(
        AdmissionConfig(), tenant_breaker=TENANT_LAYER, global_breaker=QUIET_GLOBAL_LAYER
    )
    return runtime


async def openings(runtime: Runtime, destination: str) -> set[float]:
    """The opening the destination's tenant layers are in now, if any (as a set)."""
    snapshot = await runtime.admission.snapshot(also=[destination])
    (state,) = [d for d in snapshot.destinations if d.destination == destination]
    return {layer.opened_at for layer in state.tenant_breakers.values() if layer.opened_at}


async def test_a_fan_out_outlives_an_outage_of_several_openings(backend: Backend) -> None:
    server = await start_downstream(
        config=DownstreamConfig(fail_rate=1.0, seed=7, latency_ms=LATENCY_MS)
    )
    runtime = await open_runtime(backend)
    destination = f"outage-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    children = 200
    try:
        ops = Operations(runtime)
        run_id = await start(
            runtime, fan_out(f"{server.url}/push", destination, 4), list(range(children))
        )
        seen: set[float] = set()
        reasons: set[str] = set()
        texts: set[str] = set()
        breakers: set[tuple[str, str | None]] = set()
        calls_while_down = None
        async with running_worker(runtime):
            # The downstream fails until its breaker has opened twice (the first trip and a
            # failed half-open trial), then recovers. A child counts at most: its own first
            # call, the first opening, a failed probe, the second opening: 4, its
            # `maxAutoRetries`. Bounded looks, 50 ms apart.
            for _ in range(600):
                now_open = await openings(runtime, destination)
                seen |= now_open
                progress = await ops.runs.progress(run_id)
                reasons |= {group.reason for group in progress.fanout.waiting}
                texts |= {g.text for g in progress.fanout.waiting if g.reason == "breaker_open"}
                breakers |= {
                    (g.breaker.destination, g.breaker.tenant_id)
                    for g in progress.fanout.waiting
                    if g.breaker is not None
                }
                if len(seen) >= 2 and calls_while_down is None:
                    calls_while_down = server.stats.total
                    server.config.fail_rate = 0.0
                elif calls_while_down is not None and not now_open:
                    # Closed again: the latency kept the half-open trial's probes in flight
                    # while parked children came back; past it, 1.2 s calls only make the
                    # rest of the 200 wait.
                    server.config.latency_ms = 0
                if progress.ended:
                    break
                await asyncio.sleep(0.05)
            run = await wait_for_run(runtime, run_id, timeout_s=60)
            ended = await runtime.store.children(run_id, limit=children)
    finally:
        await runtime.close()
        await server.stop()
    assert calls_while_down is not None, "the breaker never opened twice"
    assert run.status == "SUCCEEDED", run.error
    assert len(ended) == children and {c.status for c in ended} == {"SUCCEEDED"}
    # Counted per refusal, each child would have been refused (and resent) until dead: up to
    # 4 dispatches each. Behind the breaker the downstream heard from a fraction of them.
    assert calls_while_down < children, calls_while_down
    assert "breaker_open" in reasons, reasons
    # What the children summary says: the layer, the countdown and the way to close it.
    assert any(
        "the tenant breaker" in text and "half-open in" in text and "reset-breaker" in text
        for text in texts
    ), texts
    # And which breaker, as data: what the monitor links to the destination's Reset with.
    assert breakers == {(destination, "default")}, breakers


async def test_children_fail_only_after_max_auto_retries_plus_one_openings(
    backend: Backend,
) -> None:
    server = await start_downstream(
        config=DownstreamConfig(fail_rate=1.0, seed=7, latency_ms=LATENCY_MS)
    )
    runtime = await open_runtime(backend)
    destination = f"down-{uuid.uuid4().hex[:8]}"
    children, max_auto_retries = 100, 2
    try:
        ops = Operations(runtime)
        run_id = await start(
            runtime,
            fan_out(f"{server.url}/push", destination, max_auto_retries),
            list(range(children)),
        )
        seen: set[float] = set()
        early: list[tuple[int, int]] = []
        async with running_worker(runtime):
            for _ in range(1200):
                seen |= await openings(runtime, destination)
                progress = await ops.runs.progress(run_id)
                if len(seen) <= max_auto_retries:
                    # Before the (max + 1)th opening only a child that spent redispatches on
                    # calls it sent (a 503, a failed probe) can have died.
                    early.append((progress.fanout.failed, server.stats.total))
                if progress.ended:
                    break
                await asyncio.sleep(0.05)
            run = await wait_for_run(runtime, run_id, timeout_s=60)
            ended = await runtime.store.children(run_id, limit=children)
            steps = [s for c in ended for s in await runtime.store.get_steps(c.id)]
    finally:
        await runtime.close()
        await server.stop()
    assert run.status == "FAILED"
    assert {c.status for c in ended} == {"FAILED"} and len(ended) == children
    assert {c.error["kind"] for c in ended} == {"external_overload"}
    assert {s.auto_retries for s in steps} == {max_auto_retries}
    assert len(seen) >= max_auto_retries + 1, seen
    assert early and all(failed <= calls for failed, calls in early), early
    # Most children never sent anything: they died of openings, not of their own calls.
    assert server.stats.total < children
