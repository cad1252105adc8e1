"""The progress stream of a fan-out whose running children a worker presumed dead holds, on both
backends: it sends an event when what its readers see changes (one more child held by that
worker), not at every read. A dead holder's `silentS` (seconds since its last heartbeat) is
counted anew at each read, and the stream, comparing the whole progress, sent the same run
again at every fallback read for as long as the dead holder held children."""

from __future__ import annotations

import asyncio
import uuid

from api.rest import sse
from engine.coordination.heartbeat import Heartbeat
from engine.operations import Operations
from engine.operations.worker_liveness import KEPT_S
from engine.runtime import Runtime
from engine.store.records import ChildRow, StepAwaitingChildren
from schemas.clock import FakeClock
from tests.conftest import Backend
from tests.integration.actions_harness import fan_out, items, submit
from tests.integration.engine_harness import settings_for

LEASE_S = 600.0
"""Longer than the test: the dead worker's children stay held throughout."""
READS_S = 0.05
"""The stream's fallback read: about twenty reads of the idle run in a second."""


async def test_an_idle_stream_is_quiet_while_a_dead_holder_holds_children(
    backend: Backend,
) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    ops = Operations(runtime)
    dead = f"worker-dead-{uuid.uuid4().hex[:6]}"  # the Redis database is shared
    try:
        run_id = await submit(runtime, fan_out("http://127.0.0.1:1"), {"items": items(4)})
        (spawner,) = await runtime.store.claim(1, lease_s=60)
        child = await runtime.store.get_version("child")
        await runtime.store.create_children(
            spawner, child, 4, [ChildRow(i, "{}", None) for i in range(4)]
        )
        await runtime.store.complete([StepAwaitingChildren(spawner, 4)])
        await Heartbeat(dead, runtime.redis, clock, interval_s=1, ttl_s=30).beat()
        await runtime.store.claim(2, LEASE_S, dead)
        clock.advance(60.0 + KEPT_S)  # its beat stale, its leases still running

        async def time_passes() -> None:
            # The clock the reads judge silence by moves on between reads, as a real one does.
            while True:
                await asyncio.sleep(READS_S / 2)
                clock.advance(1.0)

        async def one_more_child_held() -> None:
            await asyncio.sleep(1.0)
            await runtime.store.claim(1, LEASE_S, dead)

        events: list[str] = []
        ticking = asyncio.create_task(time_passes())
        with ops.runs.watch(run_id) as watch:
            first = await ops.runs.progress(run_id)
            assert [held.children for held in first.fanout.presumed_dead] == [2], first
            claiming = asyncio.create_task(one_more_child_held())
            stream = sse.progress_events(
                ops, first, watch, tenant=None, fallback_s=READS_S, min_read_s=0.01,
                heartbeat_s=60.0, max_s=2.0,
            )  # fmt: skip
            events = [text async for text in stream if text.startswith(("retry", "event"))]
            await claiming
        ticking.cancel()
        assert len(events) == 2, f"{len(events)} events in 2 s of an idle run"
        assert '"children":2' in events[0] and '"children":3' in events[1], events
    finally:
        await runtime.close()
