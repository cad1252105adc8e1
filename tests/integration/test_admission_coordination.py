"""Admission slots, AIMD in Redis, caps, retry budget, tickets, waiting and visibility.

Every test runs on the embedded fakeredis and on a real Redis (docs/architecture.md, 'Testing').
Time is a FakeClock; the only real waiting is bounded (`asyncio.timeout`) and short.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from admission import (
    Admission,
    AdmissionConfig,
    Aimd,
    AimdConfig,
    AimdState,
    BreakerConfig,
    CallOutcome,
    DestinationCaps,
    RetryBudget,
    RetryBudgetConfig,
    Ticket,
    TicketAlreadySettled,
    controller,
)
from admission.aimd import slots
from admission.refusals import DestinationPaced
from schemas.clock import FakeClock, SystemClock
from schemas.errors import FailureKind, StepFailure
from schemas.waiting import WaitReason

Connect = Callable[[], Redis]
DEST = "https://api.example.com:443"
LENIENT = BreakerConfig(threshold=10_000, reset_s=1, successes_to_close=1, max_probes=1)
"""Breakers that never open, for tests about something else."""


def make(connect: Connect, clock: FakeClock, **overrides: Any) -> Admission:
    base = AdmissionConfig(tenant_breaker=LENIENT, global_breaker=LENIENT)
    return Admission(connect(), clock, dataclasses.replace(base, **overrides))


async def admit_n(admission: Admission, n: int, tenant: str = "t") -> list[Ticket]:
    return [await admission.admit(DEST, tenant, wait_timeout_s=0) for _ in range(n)]


async def limit_of(admission: Admission) -> float:
    (state,) = (await admission.snapshot()).destinations
    return state.limit


# ── AIMD in Redis ─────────────────────────────────────────────────────────────────────────


async def test_twenty_simultaneous_overloads_cut_the_limit_once(connect: Connect) -> None:
    config = AimdConfig(initial_limit=20, backoff_ratio=0.9, slow_start=False)
    admission = make(connect, FakeClock(), aimd=config)
    tickets = await admit_n(admission, 20)
    await asyncio.gather(*(t.overload() for t in tickets))
    assert await limit_of(admission) == pytest.approx(18.0)
    # The next window (a call admitted after the cut) may cut once more.
    (late,) = await admit_n(admission, 1)
    await late.overload()
    state = (await admission.snapshot()).destinations[0]
    assert state.limit == pytest.approx(16.2)
    assert state.cuts == 2


async def test_redis_applies_exactly_the_pure_algorithm(connect: Connect) -> None:
    """Contract: lua/lib_aimd.lua and admission/aimd.py agree sample for sample."""
    config = AimdConfig(initial_limit=6, backoff_ratio=0.7)
    admission = make(connect, FakeClock(), aimd=config, default_max_concurrency=12)
    aimd, expected = Aimd(config), AimdState(6.0)
    script = ["s", "s", "o", "s", "o", "s", "s", "s", "o", "o", "s", "s", "s", "s", "s", "s"]
    for round_ in range(6):
        held = await admit_n(admission, slots(expected.limit, 12))
        for i, ticket in enumerate(held):
            sample = script[(round_ * 5 + i) % len(script)]
            if sample == "s":
                in_flight = len(held) - i  # itself and the ones settled after it
                expected = aimd.on_success(expected, in_flight=in_flight, cap=12)
                await ticket.success()
            else:
                expected = aimd.on_overload(expected, slot_epoch=ticket.epoch, cap=12)
                await ticket.overload()
        state = (await admission.snapshot()).destinations[0]
        assert (state.limit, state.cuts) == (expected.limit, expected.epoch)


async def test_successes_raise_the_limit_up_to_the_cap(connect: Connect) -> None:
    admission = make(connect, FakeClock(), aimd=AimdConfig(initial_limit=4))
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=6))
    for _ in range(40):
        for ticket in await admit_n(admission, slots(await limit_of(admission), 6)):
            await ticket.success()
    assert await limit_of(admission) == 6.0


# ── slots and leases ──────────────────────────────────────────────────────────────────────


async def test_concurrent_admits_never_exceed_the_limit(connect: Connect) -> None:
    config = {"aimd": AimdConfig(initial_limit=10)}
    workers = [make(connect, FakeClock(), **config) for _ in range(2)]  # two "processes"
    in_flight = peak = 0

    async def call(admission: Admission, i: int) -> None:
        nonlocal in_flight, peak
        async with await admission.admit(DEST, f"t{i % 3}", wait_timeout_s=20) as ticket:
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.001)  # the "HTTP call"
            in_flight -= 1
            await ticket.ignore()  # keeps the limit at 10 (success could raise it)

    async with asyncio.timeout(30):
        await asyncio.gather(*(call(workers[i % 2], i) for i in range(200)))
    assert peak == 10
    assert (await workers[0].snapshot()).destinations[0].in_flight == 0


async def test_lease_of_a_dead_worker_is_reclaimed_after_expiry(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    dead_worker, live_worker = make(connect, clock), make(connect, clock)
    await live_worker.set_caps(DEST, DestinationCaps(max_concurrency=2))
    orphans = [await dead_worker.admit(DEST, "t", wait_timeout_s=0, lease_s=10) for _ in range(2)]
    with pytest.raises(StepFailure, match="admission wait exhausted") as refused:
        await live_worker.admit(DEST, "t", wait_timeout_s=0)
    assert refused.value.kind is FailureKind.EXTERNAL_OVERLOAD
    clock.advance(9.9)
    with pytest.raises(StepFailure):
        await live_worker.admit(DEST, "t", wait_timeout_s=0)
    clock.advance(0.1)  # the leases end: the dead worker's capacity comes back
    tickets = await admit_n(live_worker, 2)
    assert (await live_worker.snapshot()).destinations[0].in_flight == 2
    # A "dead" worker that was only slow settles late: nothing breaks, it is logged.
    with caplog.at_level(logging.WARNING, logger="admission.controller"):
        await orphans[0].success()
    assert any(getattr(r, "event", "") == "admission.lease_lost" for r in caplog.records)
    for ticket in tickets:
        await ticket.success()


async def test_a_lease_redis_lost_is_not_blamed_on_lease_s(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis restarted without persistence: the settlement finds no lease 0 s into a 90 s
    one. The warning says Redis lost it, not that `lease_s` is too short."""
    clock = FakeClock()
    admission = make(connect, clock)
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0)
    await connect().flushdb()
    with caplog.at_level(logging.WARNING, logger="admission.controller"):
        await ticket.success()
    (lost,) = [r for r in caplog.records if getattr(r, "event", "") == "admission.lease_lost"]
    assert "Redis held no lease" in lost.getMessage() and lost.expired is False  # type: ignore[attr-defined]


async def test_after_redis_lost_its_state_a_handed_slot_cuts_at_most_once_per_window(
    connect: Connect,
) -> None:
    """Redis restarted (its cut epoch is 0 again) while this process remembered epoch 3: a
    slot handed over afterwards must carry the new epoch, or its overload would cut a second
    time in the window the first overload already cut."""
    clock = FakeClock()
    admission = make(
        connect,
        clock,
        aimd=AimdConfig(initial_limit=10, slow_start=False),
        default_max_concurrency=10,
        wait_poll_initial_s=5.0,
        wait_poll_max_s=5.0,
    )
    for _ in range(3):  # three congestion windows: epoch 3
        await (await admission.admit(DEST, "t", wait_timeout_s=0)).overload()
    await connect().flushdb()
    tickets = await admit_n(admission, 10)
    assert {t.epoch for t in tickets} == {0}
    waiter = asyncio.ensure_future(admission.admit(DEST, "t", wait_timeout_s=5))
    async with asyncio.timeout(5):
        while not admission._waiters.waiting(DEST):
            await asyncio.sleep(0.001)
        await tickets[0].success()
        handed = await waiter
    assert handed.handovers == 1 and handed.epoch == 0
    await tickets[1].overload()  # the congestion event: one cut, 10 -> 9
    await handed.overload()  # in flight before that cut: no second one
    assert await limit_of(admission) == pytest.approx(9.0)


async def test_renew_extends_a_live_lease_only(connect: Connect) -> None:
    clock = FakeClock()
    admission = make(connect, clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0, lease_s=10)
    clock.advance(8)
    assert await ticket.renew() is True  # now expires at +18
    clock.advance(9)
    with pytest.raises(StepFailure):
        await admission.admit(DEST, "t", wait_timeout_s=0)
    clock.advance(1)
    assert await ticket.renew() is False  # expired: its slot may already be someone else's
    other = await admission.admit(DEST, "t", wait_timeout_s=0)
    await other.success()


async def test_a_local_release_wakes_a_waiter_at_once(connect: Connect) -> None:
    # Polling alone (every 10 s) could not admit the waiter within the 4 s bound (nor before
    # its 5 s wait ends). 4 s, not less: a loaded host once took over 2 s to run the wake-up.
    admission = make(connect, FakeClock(), wait_poll_initial_s=10.0, wait_poll_max_s=10.0)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    holder = await admission.admit(DEST, "t", wait_timeout_s=0)
    waiter = asyncio.create_task(admission.admit(DEST, "t", wait_timeout_s=5))
    # The waiter queues once its first admit is refused (a Redis round trip): a release
    # before that wakes nobody, and the waiter then sleeps its 10 s poll.
    async with asyncio.timeout(5):
        while not admission._waiters.waiting(DEST):
            await asyncio.sleep(0.001)
    assert not waiter.done()
    await holder.success()
    async with asyncio.timeout(4):
        ticket = await waiter
    await ticket.success()


async def test_a_release_in_another_process_is_noticed_by_polling(connect: Connect) -> None:
    clock = FakeClock()
    other_process = make(connect, clock)
    admission = make(connect, clock, wait_poll_initial_s=0.005, wait_poll_max_s=0.02)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    holder = await other_process.admit(DEST, "t", wait_timeout_s=0)
    waiter = asyncio.create_task(admission.admit(DEST, "t", wait_timeout_s=5))
    await asyncio.sleep(0.03)
    await holder.success()
    async with asyncio.timeout(2):
        await (await waiter).success()


async def test_wait_is_bounded_by_its_timeout(connect: Connect) -> None:
    admission = make(connect, FakeClock())
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    holder = await admission.admit(DEST, "t", wait_timeout_s=0)
    async with asyncio.timeout(2):
        with pytest.raises(StepFailure, match=r"admission wait exhausted.*1 calls in flight"):
            await admission.admit(DEST, "t", wait_timeout_s=0.05)
    await holder.success()


async def test_a_wait_held_by_the_cap_is_pacing_and_one_held_by_a_cut_limit_an_overload(
    connect: Connect,
) -> None:
    """The destination's own cap (maxConcurrency at an uncut limit, or ratePerSecond) is the
    operator's pacing: `DestinationPaced`, which the engine parks. A limit AIMD cut below the
    cap is the destination's overload: a plain `external_overload`, redispatched."""
    clock = FakeClock()
    admission = make(connect, clock, aimd=AimdConfig(initial_limit=2))
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=2))
    held = [await admission.admit(DEST, "t", wait_timeout_s=0) for _ in range(2)]
    with pytest.raises(DestinationPaced) as paced:
        await admission.admit(DEST, "t", wait_timeout_s=0)
    assert paced.value.kind is FailureKind.EXTERNAL_OVERLOAD
    assert paced.value.wait_reason is WaitReason.DESTINATION_CAP
    assert "waiting for the destination's cap (maxConcurrency 2)" in paced.value.wait_message
    await held[0].overload()  # a 503: AIMD cuts the limit to 1, under the cap
    with pytest.raises(StepFailure, match=r"admission wait exhausted.*limit 1\.0") as cut:
        await admission.admit(DEST, "t", wait_timeout_s=0)
    assert not isinstance(cut.value, DestinationPaced)
    await held[1].success()
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=10, rate_per_second=1))
    clock.advance(5)
    await (await admission.admit(DEST, "t", wait_timeout_s=0)).success()
    with pytest.raises(DestinationPaced) as rate:
        await admission.admit(DEST, "t", wait_timeout_s=0)
    assert "waiting for the destination's cap (1/s)" in rate.value.wait_message


# ── caps and rate per second ──────────────────────────────────────────────────────────────


async def test_caps_round_trip_and_bound_the_limit(connect: Connect) -> None:
    admission = make(connect, FakeClock(), aimd=AimdConfig(initial_limit=10))
    assert await admission.get_caps(DEST) is None
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=3, rate_per_second=2.5))
    assert await admission.get_caps(DEST) == DestinationCaps(3, 2.5)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=4))
    assert await admission.get_caps(DEST) == DestinationCaps(4, None)
    state = (await admission.snapshot()).destinations[0]
    assert (state.limit, state.slots, state.cap, state.cap_configured) == (4.0, 4, 4, True)
    await admission.caps.delete_caps(DEST)
    assert await admission.get_caps(DEST) is None


async def test_caps_come_from_the_caps_source_on_first_use(connect: Connect) -> None:
    class Database:
        async def get_caps(self, destination: str) -> DestinationCaps | None:
            return DestinationCaps(1) if destination == DEST else None

    admission = Admission(connect(), FakeClock(), caps_source=Database())
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0)
    with pytest.raises(StepFailure):
        await admission.admit(DEST, "t", wait_timeout_s=0)
    await ticket.success()
    assert await admission.get_caps(DEST) == DestinationCaps(1)


async def test_rate_per_second_spaces_calls(connect: Connect) -> None:
    clock = FakeClock()
    admission = make(connect, clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=50, rate_per_second=2))
    for ticket in await admit_n(admission, 2):
        await ticket.success()
    with pytest.raises(StepFailure, match="ratePerSecond"):
        await admission.admit(DEST, "t", wait_timeout_s=0)
    clock.advance(1.0)
    await (await admission.admit(DEST, "t", wait_timeout_s=0)).success()


@pytest.mark.parametrize("kwargs", [{"max_concurrency": 0}, {"rate_per_second": 0.0}])
def test_invalid_caps_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DestinationCaps(**{"max_concurrency": 1, **kwargs})


# ── retry budget ──────────────────────────────────────────────────────────────────────────


async def test_retry_budget_is_exhausted_by_failures_and_earned_back(connect: Connect) -> None:
    budget = RetryBudgetConfig(max_tokens=10, token_ratio=0.5)
    admission = make(connect, FakeClock(), retry_budget=budget)
    assert await admission.budget.allowed(DEST)
    for outcome in ["failure", "overload"] * 2:
        ticket = await admission.admit(DEST, "t", wait_timeout_s=0)
        await ticket.settle(CallOutcome(outcome))
    assert await admission.budget.allowed(DEST)  # 6 tokens left
    await (await admission.admit(DEST, "t", wait_timeout_s=0)).failure()
    assert not await admission.budget.allowed(DEST)  # 5: not more than half
    await (await admission.admit(DEST, "t", wait_timeout_s=0)).ignore()
    assert not await admission.budget.allowed(DEST)  # ignore earns nothing
    await (await admission.admit(DEST, "t", wait_timeout_s=0)).success()
    assert await admission.budget.allowed(DEST)  # 5.5
    assert (await admission.snapshot()).destinations[0].retry_tokens == 5.5


async def test_shared_budget_matches_the_pure_bucket(connect: Connect) -> None:
    config = RetryBudgetConfig(max_tokens=7, token_ratio=0.3)
    shared, pure = make(connect, FakeClock(), retry_budget=config).budget, RetryBudget(config)
    tokens = pure.full()
    for step in "ffsffffsssfffff":
        if step == "f":
            tokens = pure.on_failure(tokens)
            assert await shared.record_failure(DEST) == tokens
        else:
            tokens = pure.on_success(tokens)
            assert await shared.record_success(DEST) == tokens
        assert await shared.allowed(DEST) is pure.allows_retry(tokens)


# ── tickets and visibility ────────────────────────────────────────────────────────────────


async def test_a_ticket_is_settled_exactly_once(connect: Connect) -> None:
    admission = make(connect, FakeClock())
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0)
    await ticket.success()
    with pytest.raises(TicketAlreadySettled):
        await ticket.overload()
    assert ticket.outcome == "success"
    assert await ticket.renew() is False


async def test_async_with_settles_what_was_left_unsettled(connect: Connect) -> None:
    admission = make(connect, FakeClock())
    async with await admission.admit(DEST, "t", wait_timeout_s=0) as clean:
        pass
    assert clean.outcome == "ignore"
    with pytest.raises(ZeroDivisionError):
        async with await admission.admit(DEST, "t", wait_timeout_s=0) as failed:
            _ = 1 / 0
    assert failed.outcome == "failure"
    tickets: list[Ticket] = []
    calling = asyncio.Event()

    async def cancelled_call() -> None:
        async with await admission.admit(DEST, "t", wait_timeout_s=0) as ticket:
            tickets.append(ticket)
            calling.set()
            await asyncio.Event().wait()  # the "HTTP call" never returns; the step is cancelled

    task = asyncio.create_task(cancelled_call())
    async with asyncio.timeout(2):
        await calling.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tickets[0].outcome == "ignore"
    assert (await admission.snapshot()).destinations[0].in_flight == 0


async def test_snapshot_shows_destinations_and_tenants(connect: Connect) -> None:
    admission = make(connect, FakeClock())
    await admission.set_caps("b", DestinationCaps(max_concurrency=5, rate_per_second=1))
    held = await admission.admit(DEST, "acme", wait_timeout_s=0)
    await admission.tenant_check("acme")
    snapshot = await admission.snapshot()
    assert [d.destination for d in snapshot.destinations] == ["b", DEST]
    b, dest = snapshot.destinations
    assert (b.cap, b.rate_per_second, b.in_flight) == (5, 1.0, 0)
    assert (dest.cap, dest.cap_configured, dest.in_flight, dest.limit) == (100, False, 1, 10.0)
    assert dest.global_breaker.state == "closed"
    assert [(t.tenant_id, t.used, t.limit) for t in snapshot.tenants] == [("acme", 1, 1000)]
    as_json = snapshot.as_dict()
    assert as_json["destinations"][1]["global_breaker"]["state"] == "closed"
    await held.success()


async def test_redis_holds_growth_after_a_cut_exactly_like_the_pure_algorithm(
    connect: Connect,
) -> None:
    """Contract for the Retry-After hold: the same samples at the same times, in Redis and in
    admission/aimd.py, give the same limit, cuts and hold."""
    config = AimdConfig(initial_limit=8, backoff_ratio=0.5, max_hold_s=8)
    clock = FakeClock()
    admission = make(connect, clock, aimd=config)
    aimd, expected = Aimd(config), AimdState(8.0)
    # (seconds later, outcome, Retry-After): a cut with Retry-After 1 (hold 1 s), successes
    # during and after the hold; cuts soon after each hold ends (holds of 2, 4, 8 s), one
    # without a Retry-After in between, one with a Retry-After longer than max_hold_s during
    # a hold (it doubles, bounded; the ceiling drops to one below the limit cut second); a
    # quiet spell, then a cut long after the hold (1 s again), successes after it.
    script = [
        (0.0, "t", 1.0), (0.5, "s", 0.0), (1.0, "s", 0.0), (0.2, "t", 1.0), (0.1, "o", 0.0),
        (0.3, "s", 0.0), (1.7, "s", 0.0), (0.1, "t", 1.0), (0.5, "s", 0.0), (3.7, "s", 0.0),
        (0.1, "t", 1.0), (0.1, "t", 60.0), (0.5, "s", 0.0), (8.1, "s", 0.0), (0.1, "s", 0.0),
        (9.0, "s", 0.0), (0.1, "t", 2.0), (0.5, "s", 0.0), (1.6, "s", 0.0), (0.1, "s", 0.0),
    ]  # fmt: skip
    holds = []
    for later, sample, retry_after in script:
        clock.advance(later)
        held = await admit_n(admission, slots(expected.limit, 100))
        ticket, others = held[0], held[1:]
        now = clock.now()
        if sample == "s":
            expected = aimd.on_success(expected, in_flight=len(held), cap=100, now=now)
            await ticket.success()
        else:
            expected = aimd.on_overload(
                expected, slot_epoch=ticket.epoch, cap=100, now=now, retry_after_s=retry_after
            )
            outcome = CallOutcome.THROTTLED if sample == "t" else CallOutcome.OVERLOAD
            await ticket.settle(outcome, retry_after_s=retry_after)
        await asyncio.gather(*(t.ignore() for t in others))
        state = (await admission.snapshot()).destinations[0]
        assert (state.limit, state.cuts) == (pytest.approx(expected.limit), expected.epoch)
        assert state.growth_held_s == pytest.approx(max(0.0, expected.hold_until - now))
        holds.append(expected.hold_s)
    # The script reaches every case it names: doubling, the bound, the fresh start.
    assert sorted(set(holds)) == [1.0, 2.0, 4.0, 8.0]
    assert holds[-1] == 2.0


async def test_the_hold_doubles_up_to_exactly_one_hold_after_it_in_redis_as_in_python(
    connect: Connect,
) -> None:
    """The boundary of the back-off rule: a cut exactly one hold's length after the hold
    ended still doubles; a moment later it starts again. Times are exact binary fractions."""
    config = AimdConfig(initial_limit=8, backoff_ratio=0.5, max_hold_s=8)
    clock = FakeClock()
    admission = make(connect, clock, aimd=config)
    aimd, expected = Aimd(config), AimdState(8.0)
    # (seconds later, Retry-After): hold 1 s until 1.0; cut at 2.0 = 1.0 + 1 → 2 s until 4.0;
    # cut at 6.0 = 4.0 + 2 → 4 s until 10.0; cut at 14.25 > 10.0 + 4 → 1 s again.
    holds = []
    for later, retry_after in [(0.0, 1.0), (2.0, 1.0), (4.0, 1.0), (8.25, 1.0)]:
        clock.advance(later)
        (ticket,) = await admit_n(admission, 1)
        expected = aimd.on_overload(
            expected, slot_epoch=ticket.epoch, cap=100, now=clock.now(), retry_after_s=retry_after
        )
        await ticket.settle(CallOutcome.THROTTLED, retry_after_s=retry_after)
        state = (await admission.snapshot()).destinations[0]
        assert (state.limit, state.cuts) == (pytest.approx(expected.limit), expected.epoch)
        assert state.growth_held_s == pytest.approx(expected.hold_until - clock.now())
        holds.append(state.growth_held_s)
    assert holds == pytest.approx([1.0, 2.0, 4.0, 1.0])


async def test_an_exhausted_budget_refills_with_time(connect: Connect) -> None:
    """After an outage only retries may be left: time alone must bring them back, or no call
    would ever succeed to refill the bucket."""
    clock = FakeClock()
    admission = make(connect, clock, retry_budget=RetryBudgetConfig(refill_per_s=1.0))
    for _ in range(60):
        await (await admission.admit(DEST, "t", wait_timeout_s=0)).failure()
    assert await admission.budget.tokens(DEST) == pytest.approx(40.0)
    with pytest.raises(StepFailure, match="retry budget"):
        await admission.admit(DEST, "t", wait_timeout_s=0, retry=True)
    clock.advance(10.5)
    assert await admission.budget.tokens(DEST) == pytest.approx(50.5)
    (state,) = (await admission.snapshot()).destinations
    assert state.retry_tokens == pytest.approx(50.5) and state.retry_allowed
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0, retry=True)
    await ticket.failure()  # a failed retry spends a token: under half again
    assert await admission.budget.tokens(DEST) == pytest.approx(49.5)


async def test_slots_of_a_sigkilled_process_come_back_when_their_leases_end(
    redis_url: str,
) -> None:
    """A real process takes every slot of a destination and is killed with SIGKILL mid-call:
    no settlement ever comes, and the capacity returns when the leases end."""
    # The leases (4 s) must outlast reading "held", the kill and the first admit below on a
    # loaded host, yet end well within the 10 s wait.
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.scripts.hold_slots", redis_url, DEST, "2", "4",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), timeout=30)
        assert line.strip() == b"held"
    finally:
        holder.kill()  # SIGKILL
        await asyncio.wait_for(holder.wait(), timeout=10)
    client = Redis.from_url(redis_url)
    admission = Admission(client, SystemClock())
    try:
        with pytest.raises(StepFailure, match="admission wait exhausted"):
            await admission.admit(DEST, "t", wait_timeout_s=0)  # still held by the dead one
        started = time.monotonic()
        # A wait far longer than the 4 s leases: the slots come back when the leases end (a
        # lease that never ended would exhaust the wait), with a stalled host's margin.
        tickets = [await admission.admit(DEST, "t", wait_timeout_s=30) for _ in range(2)]
        assert time.monotonic() - started < 25
        assert (await admission.snapshot()).destinations[0].in_flight == 2
        for ticket in tickets:
            await ticket.success()
    finally:
        await client.aclose()


async def test_calls_settling_after_their_leases_are_one_line_not_one_each(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker frozen past its leases (SIGSTOP) wakes with all its calls settling at once:
    one warning says so, the others are counted into the next line, not logged one each."""
    clock = FakeClock()
    admission = make(connect, clock)
    tickets = [await admission.admit(DEST, "t", wait_timeout_s=0, lease_s=10) for _ in range(10)]
    clock.advance(60)  # frozen: nothing renewed
    with caplog.at_level(logging.WARNING, logger="admission.controller"):
        for ticket in tickets[:9]:
            await ticket.success()
        lost = [r for r in caplog.records if getattr(r, "event", "") == "admission.lease_lost"]
        assert len(lost) == 1
        assert "after its slot lease expired" in lost[0].getMessage()
        clock.advance(controller.LEASE_LOST_LOGGED_EVERY_S)
        await tickets[9].success()
    lost = [r for r in caplog.records if getattr(r, "event", "") == "admission.lease_lost"]
    assert len(lost) == 2
    assert "and 8 more calls to it since the last such line" in lost[1].getMessage()
