"""A call's admission slot is leased for its step's lease and renewed with it
(`engine.execution.admission_guard.AdmissionTickets`), on fakeredis and on a real Redis, with
a FakeClock: renewed, the slot outlives its first lease while the call runs; left alone (its
worker died), it is free again once that lease ends, not a 90 s default later. Then a real
worker on both backends keeps a long call's slot past its first lease."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from admission import Admission, AdmissionConfig, AimdConfig, DestinationCaps
from demo.downstream import RunningDownstream
from engine.execution.admission_guard import LEASE_MARGIN_S, AdmissionGuard, AdmissionTickets
from engine.execution.worker import WorkerConfig
from engine.execution.worker_metrics import WorkerMetrics
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.clock import FakeClock
from schemas.errors import StepFailure
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from tests.integration.test_worker_processes import create_runs, single_call
from vertices.gateway_request import destination_key

Connect = Callable[[], Redis]
DEST = "http://127.0.0.1:9"
STEP_LEASE_S = 3.0


async def in_flight(admission: Admission) -> int:
    (state,) = (await admission.snapshot(also=[DEST])).destinations
    return state.in_flight


async def held_slot(admission: Admission, tickets: AdmissionTickets) -> AdmissionGuard:
    guard = AdmissionGuard(admission, "acme", wait_timeout_s=0, tickets=tickets)
    await guard.before_attempt(DEST, retry=False, timeout_s=300)
    return guard


async def one_slot_renewed(
    connect: Connect, clock: FakeClock
) -> tuple[Admission, AdmissionTickets]:
    """A destination capped at one call, and a worker's tickets renewed with `STEP_LEASE_S`."""
    admission = Admission(connect(), clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    tickets = AdmissionTickets()
    tickets.renewed_by(STEP_LEASE_S)
    return admission, tickets


async def test_a_renewed_slot_outlives_its_first_lease(connect: Connect) -> None:
    clock = FakeClock()
    admission, tickets = await one_slot_renewed(connect, clock)
    guard = await held_slot(admission, tickets)
    # A call that may take 300 s holds its slot for the step's lease, not 300 s + 30.
    (ticket,) = tickets._held
    assert ticket.lease_s == STEP_LEASE_S
    for _ in range(4):  # 4 s, past the first lease: renewed every second it still holds
        clock.advance(1.0)
        assert await tickets.renew(admission) == 0
        assert await in_flight(admission) == 1
    with pytest.raises(StepFailure):  # the cap is 1: nobody else gets the slot meanwhile
        await admission.admit(DEST, "acme", wait_timeout_s=0)
    await guard.after_attempt(DEST, 200, None, 4.0)
    assert not tickets._held
    assert await in_flight(admission) == 0


async def test_a_slot_nobody_renews_is_free_when_the_steps_lease_ends(connect: Connect) -> None:
    clock = FakeClock()
    admission, tickets = await one_slot_renewed(connect, clock)
    await held_slot(admission, tickets)  # its worker dies: nothing settles or renews it
    clock.advance(STEP_LEASE_S - 0.5)
    with pytest.raises(StepFailure):
        await admission.admit(DEST, "acme", wait_timeout_s=0)
    clock.advance(1.0)
    ticket = await admission.admit(DEST, "acme", wait_timeout_s=0)
    await ticket.success()


async def test_without_a_renewing_worker_a_slot_covers_the_calls_timeout(
    connect: Connect,
) -> None:
    """A guard outside a worker (nothing renews) leases its slot for the call's timeout plus
    a margin, as before."""
    admission = Admission(connect(), FakeClock())
    guard = await held_slot(admission, AdmissionTickets())
    ticket = guard._ticket
    assert ticket is not None and ticket.lease_s == 330.0
    await guard.after_attempt(DEST, 200, None, 0.1)


async def test_many_slots_are_renewed_in_one_call_and_settled_ones_not(connect: Connect) -> None:
    """A worker with many calls under way renews them in one script call (one connection of
    the pool, not one per call); a ticket settled meanwhile is not renewed, one past its
    call's timeout is let go."""
    clock = FakeClock()
    # Room for 150 calls at once: the cap, and AIMD's limit from the start.
    admission = Admission(connect(), clock, AdmissionConfig(aimd=AimdConfig(initial_limit=200)))
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=200))
    tickets = AdmissionTickets()
    tickets.renewed_by(STEP_LEASE_S)
    guards = [await held_slot(admission, tickets) for _ in range(150)]
    calls: list[int] = []
    script = admission.backend._scripts["renew"]

    async def counted(**kwargs: object) -> object:
        calls.append(len(kwargs["keys"]))  # type: ignore[arg-type]
        return await script(**kwargs)  # type: ignore[arg-type]

    admission.backend._scripts["renew"] = counted  # type: ignore[assignment]
    clock.advance(2.0)
    assert await tickets.renew(admission) == 0
    assert calls == [150 * 3]
    assert all(t.lease_until == clock.now() + STEP_LEASE_S for t in tickets._held)
    settled = guards[0]._ticket
    assert settled is not None
    await settled.success()  # settled without its guard: still held here, not renewed
    (renewed,) = await admission.renew([settled], STEP_LEASE_S)
    assert renewed is False
    # A ticket held past its call's timeout and margin is let go instead of renewed.
    stale = guards[1]._ticket
    assert stale is not None
    tickets.hold(stale, timeout_s=-LEASE_MARGIN_S - 1)
    await tickets.renew(admission)
    assert stale not in tickets._held and len(tickets._held) == 149
    for guard in guards[2:]:
        await guard.after_attempt(DEST, 200, None, 2.0)
    assert len(tickets._held) == 1  # the one settled without its guard


async def test_a_slot_handed_over_is_not_lost_while_its_record_is_on_its_way(
    connect: Connect,
) -> None:
    """A call that ended hands its slot to a waiter here, and the record of that goes to
    Redis in the next exchange. A renewal sent before it lands must not call the slot lost
    (it would find no lease yet); once it has landed, the slot renews as any other."""
    clock = FakeClock()
    # The waiter polls once, then waits idle (10 s between polls): the ended call's slot is
    # handed to it, never taken by a poll of its own.
    quiet = AdmissionConfig(wait_poll_initial_s=10.0, wait_poll_max_s=10.0)
    admission = Admission(connect(), clock, quiet)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    holder = await admission.admit(DEST, "acme", wait_timeout_s=0, lease_s=STEP_LEASE_S)
    waiter = asyncio.create_task(
        admission.admit(DEST, "acme", wait_timeout_s=5, lease_s=STEP_LEASE_S)
    )
    # Queued once its first admit was refused (a Redis round trip, no fixed time on a loaded
    # host): only then is the slot handed to it.
    async with asyncio.timeout(5):
        while not admission._waiters.waiting(DEST):
            await asyncio.sleep(0.001)
    exchange = admission.backend.exchange
    landed = asyncio.Event()

    async def slow_exchange(ops: Any, *args: Any, **kwargs: Any) -> Any:
        if any(getattr(op, "handover", False) for op in ops):  # only the hand-over's record
            await landed.wait()
        return await exchange(ops, *args, **kwargs)

    admission.backend.exchange = slow_exchange  # type: ignore[method-assign]
    settled = asyncio.create_task(holder.success())
    async with asyncio.timeout(5):
        handed = await waiter
    assert handed.handovers == 1 and handed.recorded is not None
    assert await admission.renew([handed], STEP_LEASE_S) == [True]
    landed.set()
    async with asyncio.timeout(5):
        await settled
        await handed.recorded
    assert await admission.renew([handed], STEP_LEASE_S) == [True]
    await handed.success()


async def test_a_worker_keeps_its_calls_slots_past_their_first_lease(
    backend: Backend, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    """A destination that takes one call at a time and two steps whose calls take 5 s, in a
    worker whose lease is 2 s: the first call's slot is renewed while it runs, so the second
    call waits for it instead of being admitted once a second lease would have ended.
    Without the renewal the downstream would see both calls at once. (A 1 s lease failed
    once under a CI run sharing the machine with other work: a renewal two thirds of a
    second late lost the slot, which is what a lease is for.)"""
    runtime = await Runtime.open(settings_for(backend))
    try:
        await Operations(runtime).settings.set_caps(destination_key(downstream.url, None), 1)
        workflow = single_call(downstream.url, sleep_ms=5000)
        run_ids = await create_runs(runtime, workflow, 2)
        config = WorkerConfig(concurrency=4, claim_batch=4, lease_s=2.0, idle_poll_s=0.05)
        async with running_worker(runtime, config):
            for run_id in run_ids:
                assert (await wait_for_run(runtime, run_id, timeout_s=40)).status == "SUCCEEDED"
    finally:
        await runtime.close()
    assert downstream.stats.total == 2
    assert downstream.stats.max_concurrent == 1
    assert "lost their admission slot" not in caplog.text


@pytest.mark.parametrize("status", [None, 503])
async def test_a_timeout_across_a_freeze_says_nothing_about_the_destination(
    connect: Connect, status: int | None
) -> None:
    """A worker frozen with calls on the wire (SIGSTOP, a paused VM) past its slots' lease
    wakes to every such call timing out at once, although the answers may be waiting in its
    sockets: its own stall, not the destination's. Such a timeout neither cuts the AIMD
    limit nor counts in the breakers (one worker woken with 64 calls out halved a healthy
    destination's limit and opened its tenant breaker). An answer read after a freeze (a
    503) is the destination's and counts as ever."""
    clock = FakeClock()
    admission, tickets = await one_slot_renewed(connect, clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=50))
    guard = await held_slot(admission, tickets)
    (before,) = (await admission.snapshot(also=[DEST])).destinations
    clock.advance(STEP_LEASE_S + 40.0)  # frozen: nothing renewed the slot meanwhile
    kind = "timeout" if status is None else None
    await guard.after_attempt(DEST, status, kind, 30.0)
    (after,) = (await admission.snapshot(also=[DEST])).destinations
    if status is None:
        assert after.limit == before.limit and after.cuts == before.cuts
        assert after.global_breaker.failures == 0 and not after.tenant_breakers
    else:
        assert after.cuts == before.cuts + 1 and after.global_breaker.failures == 1
    assert after.in_flight == 0


@pytest.mark.parametrize("status", [None, 503], ids=["timeout", "503"])
async def test_a_timeout_across_a_freeze_is_counted_stalled_not_timeout(
    connect: Connect, status: int | None
) -> None:
    """The attempts metric tells the same: a woken worker's 64 timeouts counted `timeout`
    fed the destination's error-ratio alert (`SchemaBridgeDestinationErrors`) with its own
    stall. They count `stalled` (and are not timed as the destination's latency); an answer
    read after a freeze counts as its status."""
    clock = FakeClock()
    admission, tickets = await one_slot_renewed(connect, clock)
    metrics = WorkerMetrics()
    guard = AdmissionGuard(admission, "acme", wait_timeout_s=0, tickets=tickets, meter=metrics)
    await guard.before_attempt(DEST, retry=False, timeout_s=300)
    clock.advance(STEP_LEASE_S + 40.0)
    await guard.after_attempt(DEST, status, "timeout" if status is None else None, 30.0)

    def counted(outcome: str) -> float | None:
        labels = {"destination": DEST, "outcome": outcome}
        return metrics.registry.get_sample_value("schemabridge_gateway_attempts_total", labels)

    if status is None:
        assert (counted("stalled"), counted("timeout")) == (1.0, None)
        timed = "schemabridge_gateway_attempt_duration_seconds_count"
        assert not metrics.registry.get_sample_value(timed, {"destination": DEST})
    else:
        assert (counted("5xx"), counted("stalled")) == (1.0, None)


async def test_slots_let_go_after_a_freeze_are_one_line_per_destination(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker frozen past its calls' timeouts wakes holding every such slot unsettled; its
    renewer lets them go. One warning per slot was 64 identical lines from one woken worker,
    each calling it a defect: one line per destination with the count, naming the freeze."""
    clock = FakeClock()
    admission = Admission(connect(), clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=10))
    tickets = AdmissionTickets()
    tickets.renewed_by(STEP_LEASE_S)
    guards = [await held_slot(admission, tickets) for _ in range(3)]
    for ticket in list(tickets._held):
        tickets.hold(ticket, timeout_s=-LEASE_MARGIN_S - 1)  # their timeouts long past
    with caplog.at_level("WARNING", logger="engine.execution.admission_guard"):
        await tickets.renew(admission)
    lines = [r.getMessage() for r in caplog.records if "let go of" in r.getMessage()]
    assert lines == [
        f"let go of the admission slots of 3 calls to {DEST}, unsettled past their timeout "
        "(this worker was frozen past it, or a defect)"
    ]
    assert not tickets._held
    for guard in guards:
        await guard.after_attempt(DEST, None, "timeout", 30.0)
