"""A fan-out whose running children a worker presumed dead holds says so on the parent
(`FanoutProgress.presumed_dead`), on both backends: which worker, how many children and by
when their leases end, in its detail and its progress stream alike, the worker unnamed to a
tenant; children of a live worker, or of one this Redis never heard of, are not counted. A
kill -9 of one of two workers left the parent reading "37 running" and nothing said why."""

from __future__ import annotations

import uuid

from api.cli import text
from api.cli.fanout_words import held_children_line
from api.cli.wire import HeldChildren as WireHeld
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
"""Longer than the dead worker's silence, so no other claim takes its steps back first."""


async def test_children_held_by_a_dead_worker_are_said_on_the_parent(backend: Backend) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    ops = Operations(runtime)
    # Names of their own: the Redis database is shared with the other tests of the run.
    dead, live, stranger = (f"worker-{w}-{uuid.uuid4().hex[:6]}" for w in "dls")

    async def beat(name: str) -> None:
        await Heartbeat(name, runtime.redis, clock, interval_s=1, ttl_s=30).beat()

    try:
        run_id = await submit(runtime, fan_out("http://127.0.0.1:1"), {"items": items(6)})
        (spawner,) = await runtime.store.claim(1, lease_s=60)
        child = await runtime.store.get_version("child")
        rows = [ChildRow(i, "{}", None) for i in range(6)]
        await runtime.store.create_children(spawner, child, 6, rows)
        await runtime.store.complete([StepAwaitingChildren(spawner, 6)])
        await beat(dead)
        await runtime.store.claim(3, LEASE_S, dead)
        assert (await ops.runs.get(run_id)).fanout.presumed_dead == [], "it is alive"

        clock.advance(60.0)  # its beat stale (the TTL is 30 s), its leases still running
        await beat(live)
        await runtime.store.claim(2, LEASE_S, live)
        await runtime.store.claim(1, LEASE_S, stranger)  # never beat here: not known dead
        clock.advance(KEPT_S)  # the process's answer may be that old
        await beat(live)
        fanout = (await ops.runs.get(run_id)).fanout
        assert (fanout.running, fanout.waiting_children) == (6, 0)
        (held,) = fanout.presumed_dead
        assert (held.holder.worker, held.holder.state, held.children) == (
            dead,
            "presumed_dead",
            3,
        )
        assert held.holder.silent_s is not None and held.holder.silent_s > 30
        leases = [
            step.lease_expires_at or 0.0
            for run in await runtime.store.children(run_id)
            for step in await runtime.store.get_steps(run.id)
            if step.claimed_by == dead
        ]
        assert len(leases) == 3 and held.lease_expires_at == max(leases)

        (streamed,) = (await ops.runs.progress(run_id)).fanout.presumed_dead
        assert (streamed.holder.worker, streamed.children) == (dead, 3)
        (told,) = (await ops.runs.get(run_id, tenant="default")).fanout.presumed_dead
        assert (told.holder.worker, told.holder.state, told.children) == (
            None,
            "presumed_dead",
            3,
        )
        wire = WireHeld.model_validate(held.model_dump(mode="json", by_alias=True))
        line = held_children_line(wire, clock.now())
        assert line.startswith(f"3 running children held by worker {dead} (no heartbeat for ")
        ends = text.clock(max(leases))[:8]
        assert line.endswith(f"presumed dead); taken back when their leases end, by {ends}")
    finally:
        await runtime.close()
