"""A fan-out whose running children a worker presumed dead holds says so on the parent
(`FanoutProgress.presumed_dead`), on both backends: which worker, how many children and by
when their leases end, in its detail and its progress stream alike, the worker unnamed to a
tenant; children of a live worker, or of one this Redis never heard of, are not counted. A
kill -9 of one of two workers left the parent reading "37 running" and nothing said why."""

from __future__ import annotations

import uuid

import pytest

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


async def six_children_ready(runtime: Runtime) -> str:
    """A fan-out run whose spawner made its 6 children and waits for them: their steps READY."""
    run_id = await submit(runtime, fan_out("http://127.0.0.1:1"), {"items": items(6)})
    (spawner,) = await runtime.store.claim(1, lease_s=60)
    child = await runtime.store.get_version("child")
    rows = [ChildRow(i, "{}", None) for i in range(6)]
    await runtime.store.create_children(spawner, child, 6, rows)
    await runtime.store.complete([StepAwaitingChildren(spawner, 6)])
    return run_id


async def test_children_held_by_a_dead_worker_are_said_on_the_parent(backend: Backend) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    ops = Operations(runtime)
    # Names of their own: the Redis database is shared with the other tests of the run.
    dead, live, stranger = (f"worker-{w}-{uuid.uuid4().hex[:6]}" for w in "dls")

    async def beat(name: str) -> None:
        await Heartbeat(name, runtime.redis, clock, interval_s=1, ttl_s=30).beat()

    try:
        run_id = await six_children_ready(runtime)
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


@pytest.mark.parametrize(
    ("first_lease_s", "second_lease_s"),
    [(LEASE_S, LEASE_S), (LEASE_S, 30.0)],
    ids=["same-lease", "shorter-lease"],
)
async def test_a_worker_restarted_under_its_name_holds_its_predecessors_children_apart(
    backend: Backend, first_lease_s: float, second_lease_s: float
) -> None:
    """A worker killed and started again at once under its name holds its predecessor's
    claims beside its own until their leases end. The parent said "running" for all of them:
    the group's latest lease was the live process's own, so the dead one's children read
    alive too. They are said apart: the predecessor's, with their leases; the live one's not.
    With a shorter lease the second time, the predecessor's leases end later than any the live
    process sets, and are told apart the same way."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    ops = Operations(runtime)
    name = f"worker-r-{uuid.uuid4().hex[:6]}"

    async def beat(lease_s: float) -> None:
        await Heartbeat(
            name, runtime.redis, clock, interval_s=1, ttl_s=30, started_at=started, lease_s=lease_s
        ).beat()

    try:
        run_id = await six_children_ready(runtime)
        started = clock.now()
        await beat(first_lease_s)
        first_claimed = clock.now()
        first = await runtime.store.claim(3, first_lease_s, name)

        clock.advance(5.0)  # killed; its successor starts under the same name
        started = clock.now()
        await beat(second_lease_s)
        clock.advance(1.0)
        second = await runtime.store.claim(2, second_lease_s, name)
        assert len(first) == 3 and len(second) == 2
        clock.advance(KEPT_S)  # the process's answer may be that old
        await beat(second_lease_s)

        fanout = (await ops.runs.get(run_id)).fanout
        assert (fanout.running, fanout.waiting_children) == (5, 1)
        (held,) = fanout.presumed_dead
        assert (held.holder.worker, held.holder.state, held.children) == (
            name,
            "presumed_dead",
            3,
        )
        assert held.lease_expires_at == first_claimed + first_lease_s
        (streamed,) = (await ops.runs.progress(run_id)).fanout.presumed_dead
        assert (streamed.holder.worker, streamed.children) == (name, 3)

        # Its predecessor's claims taken back, the live process holds only its own.
        await runtime.store.give_back([s.claim_token for s in first])
        assert (await ops.runs.get(run_id)).fanout.presumed_dead == []
    finally:
        await runtime.close()
