"""A call's admission slot is leased for its step's lease and renewed with it
(`engine.execution.admission_guard.AdmissionTickets`), on fakeredis and on a real Redis, with
a FakeClock: renewed, the slot outlives its first lease while the call runs; left alone (its
worker died), it is free again once that lease ends, not a 90 s default later."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from admission import Admission, DestinationCaps
from engine.execution.admission_guard import AdmissionGuard, AdmissionTickets
from schemas.clock import FakeClock
from schemas.errors import StepFailure

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


async def test_a_renewed_slot_outlives_its_first_lease(connect: Connect) -> None:
    clock = FakeClock()
    admission = Admission(connect(), clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    tickets = AdmissionTickets()
    tickets.renewed_by(STEP_LEASE_S)
    guard = await held_slot(admission, tickets)
    # A call that may take 300 s holds its slot for the step's lease, not 300 s + 30.
    (ticket,) = tickets._held
    assert ticket.lease_s == STEP_LEASE_S
    for _ in range(4):  # 4 s, past the first lease: renewed every second it still holds
        clock.advance(1.0)
        assert await tickets.renew(clock.now()) == 0
        assert await in_flight(admission) == 1
    with pytest.raises(StepFailure):  # the cap is 1: nobody else gets the slot meanwhile
        await admission.admit(DEST, "acme", wait_timeout_s=0)
    await guard.after_attempt(DEST, 200, None, 4.0)
    assert not tickets._held
    assert await in_flight(admission) == 0


async def test_a_slot_nobody_renews_is_free_when_the_steps_lease_ends(connect: Connect) -> None:
    clock = FakeClock()
    admission = Admission(connect(), clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    tickets = AdmissionTickets()
    tickets.renewed_by(STEP_LEASE_S)
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
