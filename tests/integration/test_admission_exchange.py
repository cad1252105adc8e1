"""Batched admission on fakeredis and on a real Redis: many operations in one script call
behave exactly like the same operations one by one; the tenant item and the retry budget are
decided in the same atomic step as the slot."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from admission import (
    GLOBAL_DEFAULT,
    Admission,
    Aimd,
    AimdConfig,
    AimdState,
    CallOutcome,
    DestinationCaps,
    TenantRateConfig,
    TenantRateLimited,
)
from schemas.clock import FakeClock
from schemas.errors import FailureKind, StepFailure
from tests.integration.test_admission_coordination import DEST, Connect, admit_n
from tests.integration.test_admission_coordination import make as make_with


def make(connect: Connect, **overrides: object) -> Admission:
    return make_with(connect, FakeClock(), **overrides)


async def in_flight(admission: Admission) -> int:
    (state,) = (await admission.snapshot()).destinations
    return state.in_flight


async def test_concurrent_admits_share_exchanges_and_respect_the_limit(connect: Connect) -> None:
    admission = make(connect, aimd=AimdConfig(initial_limit=10))

    async def one() -> bool:
        try:
            await admission.admit(DEST, "t", wait_timeout_s=0)
        except StepFailure:
            return False
        return True

    before = admission.batcher.exchanges
    granted = await asyncio.gather(*(one() for _ in range(30)))
    # All 30 went in one script call, applied one after another: exactly 10 slots.
    assert sum(granted) == 10
    assert admission.batcher.exchanges - before == 1
    assert await in_flight(admission) == 10


async def test_settlements_in_one_exchange_update_the_limit_in_order(connect: Connect) -> None:
    config = AimdConfig(initial_limit=4, slow_start=False)
    admission = make(connect, aimd=config)
    tickets = [await admission.admit(DEST, "t", wait_timeout_s=0) for _ in range(4)]
    before = admission.batcher.exchanges
    await asyncio.gather(*(t.success() for t in tickets))
    assert admission.batcher.exchanges - before == 1
    # The same samples one after another, each on the limit the one before left; all four
    # ended together, so each saw the four in flight (not 4, 3, 2, 1: with the app-limited
    # rule that would make a large batch grow the limit less than the same calls one by one).
    aimd, expected = Aimd(config), AimdState(4.0)
    for _ in range(4):
        expected = aimd.on_success(expected, in_flight=4, cap=100)
    (state,) = (await admission.snapshot()).destinations
    assert state.limit == pytest.approx(expected.limit)
    assert state.in_flight == 0


async def test_the_first_attempt_takes_a_tenant_item_with_its_slot(connect: Connect) -> None:
    admission = make(connect, tenant_rate=TenantRateConfig(limit=3))
    for _ in range(3):
        await admission.admit(DEST, "acme", wait_timeout_s=0, take_item=True)
    with pytest.raises(TenantRateLimited) as caught:
        await admission.admit(DEST, "acme", wait_timeout_s=0, take_item=True)
    assert (caught.value.decision.used, caught.value.decision.limit) == (3, 3)
    assert caught.value.decision.delay_s == 5.0
    assert await in_flight(admission) == 3  # the refused call took no slot
    # Retries within a step take no item; another tenant has its own window.
    await admission.admit(DEST, "acme", wait_timeout_s=0)
    await admission.admit(DEST, "globex", wait_timeout_s=0, take_item=True)
    assert (await admission.rate.usage("acme"))[0] == 3


async def test_an_item_is_taken_only_when_the_call_is_admitted(connect: Connect) -> None:
    admission = make(connect, aimd=AimdConfig(initial_limit=1))
    await admission.admit(DEST, "acme", wait_timeout_s=0)
    with pytest.raises(StepFailure, match="admission wait exhausted"):
        await admission.admit(DEST, "acme", wait_timeout_s=0, take_item=True)
    assert (await admission.rate.usage("acme"))[0] == 0


async def test_retries_stop_while_the_budget_is_low(connect: Connect) -> None:
    admission = make(connect, aimd=AimdConfig(initial_limit=100))
    for _ in range(50):  # 50 failures take the bucket from 100 to its half
        await (await admission.admit(DEST, "t", wait_timeout_s=0)).failure()
    with pytest.raises(StepFailure) as caught:
        await admission.admit(DEST, "t", wait_timeout_s=0, retry=True)
    assert caught.value.kind is FailureKind.EXTERNAL_OVERLOAD
    assert "retry budget" in caught.value.message
    first = await admission.admit(DEST, "t", wait_timeout_s=0)  # a first attempt still goes
    for _ in range(10):  # ten successes earn one token back
        await first.success()
        first = await admission.admit(DEST, "t", wait_timeout_s=0)
    await first.success()
    await admission.admit(DEST, "t", wait_timeout_s=0, retry=True)


async def test_a_cancelled_admit_never_leaks_its_slot(connect: Connect) -> None:
    admission = make(connect, aimd=AimdConfig(initial_limit=5))
    callers = [
        asyncio.ensure_future(admission.admit(DEST, "t", wait_timeout_s=0)) for _ in range(5)
    ]
    await asyncio.sleep(0)  # queued, the exchange not answered yet
    for caller in callers:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    async with asyncio.timeout(5):  # the admits' exchange, then the give-back's
        while admission.batcher.exchanges < 2:
            await asyncio.sleep(0.01)
    assert await in_flight(admission) == 0


# ── hand-overs inside one process ─────────────────────────────────────────────────────────


async def one_slot(connect: Connect) -> Admission:
    """A destination capped at one concurrent call (successes cannot grow the limit), whose
    waiters poll Redis only after 5 s: within a test they move only when woken, so whether a
    slot is handed over does not depend on a poll happening at the same moment."""
    admission = make(
        connect, aimd=AimdConfig(initial_limit=1), wait_poll_initial_s=5.0, wait_poll_max_s=5.0
    )
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    return admission


async def one_slot_with_breakers(connect: Connect) -> tuple[Admission, Admission]:
    """`one_slot` with the default global breaker, and another process's `Admission` on the
    same Redis (see `open_global_breaker`). Waiters poll only after 5 s: they move only when
    woken."""
    admission = make(
        connect,
        aimd=AimdConfig(initial_limit=1),
        global_breaker=GLOBAL_DEFAULT,
        wait_poll_initial_s=5.0,
        wait_poll_max_s=5.0,
    )
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    return admission, make(connect, global_breaker=GLOBAL_DEFAULT)


async def open_global_breaker(elsewhere: Admission) -> None:
    """Other tenants' calls fail, in another process: the destination's global layer opens."""
    for i in range(GLOBAL_DEFAULT.threshold):
        await elsewhere.backend.settle(
            DEST, f"other-{i}", f"tok-{i}", CallOutcome.FAILURE, slot_epoch=0,
            now=FakeClock().now(), config=elsewhere.config,
        )  # fmt: skip


async def waiting_admit(admission: Admission, tenant: str = "t") -> asyncio.Task[Any]:
    """An admit that has to wait (the destination is full), started in the background."""
    queued = admission._waiters.waiting(DEST)
    task = asyncio.ensure_future(admission.admit(DEST, tenant, wait_timeout_s=5))
    async with asyncio.timeout(5):  # until it is queued, sleeping
        while admission._waiters.waiting(DEST) <= queued:
            await asyncio.sleep(0.001)
    return task


async def test_a_succeeded_call_hands_its_slot_to_a_waiter_of_its_tenant(
    connect: Connect,
) -> None:
    admission = await one_slot(connect)
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    second = await waiting_admit(admission)
    await first.success()
    async with asyncio.timeout(5):
        handed = await second
    assert admission.handovers == 1 and handed.handovers == 1
    assert await in_flight(admission) == 1  # Redis recorded it on its own lease
    await handed.success()
    assert await in_flight(admission) == 0


@pytest.mark.parametrize("why", ["failure", "other-tenant", "throttled"])
async def test_no_hand_over_when_the_checks_might_not_pass(connect: Connect, why: str) -> None:
    admission = await one_slot(connect)
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    second = await waiting_admit(admission, "other" if why == "other-tenant" else "t")
    if why == "failure":
        await first.failure()
    elif why == "other-tenant":
        await first.success()
    else:
        await first.settle(CallOutcome.THROTTLED)  # at capacity: the limit is cut
    async with asyncio.timeout(5):
        ticket = await second  # admitted through Redis instead
    assert admission.handovers == 0 and ticket.handovers == 0
    await ticket.ignore()


async def test_a_reply_already_in_flight_does_not_undo_an_overload_seen_since(
    connect: Connect,
) -> None:
    """A 429 stops hand-overs until Redis has applied its cut: the reply to an exchange sent
    before the 429 arrived (here a refused admit, saying 'no free slot, none over') must not
    reopen them while the 429's own settlement is still on its way."""
    admission = make(
        connect, aimd=AimdConfig(initial_limit=2), wait_poll_initial_s=5.0, wait_poll_max_s=5.0
    )
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=2))
    throttled, succeeded = await admit_n(admission, 2)
    woken_by_the_429, idle = await waiting_admit(admission), await waiting_admit(admission)
    gates, in_the_air = [asyncio.Event(), asyncio.Event()], asyncio.Event()
    real_exchange = admission.batcher._exchange

    async def gated(ops: Any) -> Any:
        in_the_air.set()
        await (gates[1] if gates[0].is_set() else gates[0]).wait()
        return await real_exchange(ops)

    admission.batcher._exchange = gated
    refused = asyncio.ensure_future(admission.admit(DEST, "t", wait_timeout_s=0))
    before = admission.batcher.exchanges
    async with asyncio.timeout(5):  # the refused admit's exchange is sent, held at gate 0
        await in_the_air.wait()
    settling_429 = asyncio.ensure_future(throttled.settle(CallOutcome.THROTTLED))
    await asyncio.sleep(0)  # queued behind the exchange in flight
    gates[0].set()  # the reply that was in flight arrives: "0 free slots"
    with pytest.raises(StepFailure, match="no slot"):
        async with asyncio.timeout(5):
            await refused
    assert admission.batcher.exchanges == before + 1
    settling_success = asyncio.ensure_future(succeeded.settle(CallOutcome.SUCCESS))
    await asyncio.sleep(0)  # it decides at once whether to hand its slot over: the 429's
    assert admission.handovers == 0  # settlement is still unanswered, so it must not
    gates[1].set()
    async with asyncio.timeout(5):
        await asyncio.gather(settling_429, settling_success)
    assert admission._views.get(DEST).overloads_unanswered == 0  # the stop ends with the reply
    for task in (woken_by_the_429, idle):
        task.cancel()
    await asyncio.gather(woken_by_the_429, idle, return_exceptions=True)


async def test_a_429_whose_settlement_fails_keeps_hand_overs_stopped(connect: Connect) -> None:
    """Redis fails the exchange that carried a 429's settlement: nobody knows whether the cut
    was made, so the destination counts as over its limit until a later reply."""
    admission = make(
        connect, aimd=AimdConfig(initial_limit=2), wait_poll_initial_s=5.0, wait_poll_max_s=5.0
    )
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=2))
    throttled, succeeded = await admit_n(admission, 2)
    woken_by_the_429, idle = await waiting_admit(admission), await waiting_admit(admission)
    real_exchange = admission.batcher._exchange
    failures = [ConnectionError("redis down")]

    async def failing_once(ops: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real_exchange(ops)

    admission.batcher._exchange = failing_once
    with pytest.raises(ConnectionError):
        await throttled.settle(CallOutcome.THROTTLED)
    view = admission._views.get(DEST)
    assert view.overloads_unanswered == 0 and view.free_slots < 0
    await succeeded.success()
    assert admission.handovers == 0
    for task in (woken_by_the_429, idle):
        task.cancel()
    await asyncio.gather(woken_by_the_429, idle, return_exceptions=True)


async def test_a_hand_over_record_never_travels_apart_from_its_settlement(
    connect: Connect,
) -> None:
    """A long queue is cut into batches; were a settlement the last of one batch and its
    hand-over record the first of the next, an ordinary admit of the first could take the
    freed slot and the record (which skips the checks) would exceed the cap."""
    admission = await one_slot(connect)
    admission.batcher._max_ops = 2  # stands for a queue longer than DEFAULT_MAX_OPS
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    waiter = await waiting_admit(admission)
    other = asyncio.ensure_future(admission.admit(DEST, "u", wait_timeout_s=0))
    await asyncio.sleep(0)  # queued before the settlement and its hand-over record
    settling = asyncio.ensure_future(first.success())
    async with asyncio.timeout(5):
        results = await asyncio.gather(other, waiter, settling, return_exceptions=True)
    assert admission.handovers == 1
    assert isinstance(results[0], StepFailure)  # the slot went to the hand-over
    assert await in_flight(admission) == 1
    await results[1].ignore()


async def test_hand_overs_in_a_row_are_bounded(connect: Connect) -> None:
    """After MAX_HANDOVERS the slot goes back through Redis, where other processes' waiters
    can take it."""
    from admission.controller import MAX_HANDOVERS

    admission = await one_slot(connect)
    ticket = await admission.admit(DEST, "t", wait_timeout_s=0)
    chain = []
    for _ in range(MAX_HANDOVERS + 1):
        waiting = await waiting_admit(admission)
        await ticket.success()
        async with asyncio.timeout(5):
            ticket = await waiting
        chain.append(ticket.handovers)
    assert chain == [*range(1, MAX_HANDOVERS + 1), 0]
    await ticket.ignore()


async def test_a_waiter_cancelled_after_being_handed_a_slot_gives_it_back(
    connect: Connect,
) -> None:
    admission = await one_slot(connect)
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    second = await waiting_admit(admission)
    settling = asyncio.ensure_future(first.success())
    for _ in range(100):  # the settlement hands the slot over and wakes `second`...
        if admission.handovers:
            break
        await asyncio.sleep(0)
    assert admission.handovers == 1 and not second.done()
    second.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await second
    await settling
    async with asyncio.timeout(5):
        while await in_flight(admission):
            await asyncio.sleep(0.01)


async def test_a_call_refused_for_its_tenant_takes_nothing_from_the_destination(
    connect: Connect,
) -> None:
    """A flooding tenant's refused calls must not use up a rate-capped destination's window
    that other tenants need."""
    admission = make(connect, tenant_rate=TenantRateConfig(limit=1))
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=10, rate_per_second=2))
    await admission.admit(DEST, "flood", wait_timeout_s=0, take_item=True)
    for _ in range(3):
        with pytest.raises(TenantRateLimited):
            await admission.admit(DEST, "flood", wait_timeout_s=0, take_item=True)
    await admission.admit(DEST, "quiet", wait_timeout_s=0, take_item=True)  # the second call
    with pytest.raises(StepFailure, match="ratePerSecond"):  # the third in the same second
        await admission.admit(DEST, "quiet", wait_timeout_s=0)


async def test_hand_overs_stop_once_a_breaker_is_seen_open(connect: Connect) -> None:
    """Another process's failures open the destination's global breaker: this process learns
    it from its next settlement's reply and hands no slot over after that (at most the one
    decided on what it knew before)."""
    admission, elsewhere = await one_slot_with_breakers(connect)
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    second = await waiting_admit(admission)
    third = await waiting_admit(admission)
    await open_global_breaker(elsewhere)
    await first.success()
    async with asyncio.timeout(5):
        handed = await second  # decided before the reply told: handed over
    assert handed.handovers == 1
    await handed.success()  # its reply said the global layer is open: no hand-over
    with pytest.raises(StepFailure, match="global breaker"):
        async with asyncio.timeout(5):
            await third
    assert admission.handovers == 1


async def test_a_caller_that_finds_a_queue_waits_behind_it(connect: Connect) -> None:
    """While callers of this process wait for a destination, a new one joins the back of the
    queue without asking Redis: a slot freed elsewhere goes to the head, not the newcomer."""
    admission = make(
        connect, aimd=AimdConfig(initial_limit=1), wait_poll_initial_s=0.05, wait_poll_max_s=0.05
    )
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    elsewhere = make(connect)  # another process, holding the only slot
    held = await elsewhere.admit(DEST, "t", wait_timeout_s=0)
    first = await waiting_admit(admission)
    await held.success()  # freed in Redis: `first` takes it at its next poll
    second = asyncio.ensure_future(admission.admit(DEST, "t", wait_timeout_s=5))
    async with asyncio.timeout(5):
        ticket = await first
    assert not second.done()
    await ticket.success()  # handed to `second`, which waited behind it
    async with asyncio.timeout(5):
        handed = await second
    assert handed.handovers == 1
    await handed.success()


async def test_a_new_head_pauses_before_it_polls(connect: Connect) -> None:
    """The head handed a slot leaves; the waiter behind it becomes head but does not poll at
    once (the slot that freed up was just handed over; Redis would say no)."""
    admission = await one_slot(connect)  # waiters poll after 5 s
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    second, third = await waiting_admit(admission), await waiting_admit(admission)
    before = admission.batcher.exchanges
    await first.success()  # one exchange: the settlement and the hand-over's record
    async with asyncio.timeout(5):
        handed = await second
    await asyncio.sleep(0.2)  # a poll by the new head would have happened by now
    assert admission.batcher.exchanges == before + 1
    assert not third.done()
    await handed.success()  # handed on to `third`
    async with asyncio.timeout(5):
        await (await third).success()


async def test_a_queue_learns_of_an_open_breaker_in_one_pass(connect: Connect) -> None:
    """Each waiter refused by an open breaker wakes the next one to ask at once: a queue of
    waiters (polling only every 5 s here) fails within moments, not a poll interval each."""
    admission, elsewhere = await one_slot_with_breakers(connect)
    first = await admission.admit(DEST, "t", wait_timeout_s=0)
    queued = [await waiting_admit(admission) for _ in range(5)]
    await open_global_breaker(elsewhere)
    await first.ignore()  # no hand-over: the head is woken and asks
    async with asyncio.timeout(2):
        results = await asyncio.gather(*queued, return_exceptions=True)
    assert all(isinstance(r, StepFailure) and "global breaker" in r.message for r in results)
    assert admission._waiters.waiting(DEST) == 0


async def test_a_caller_that_cannot_wait_asks_even_behind_a_queue(connect: Connect) -> None:
    admission = await one_slot(connect)
    held = await admission.admit(DEST, "t", wait_timeout_s=0)
    queued = await waiting_admit(admission)
    before = admission.batcher.exchanges
    with pytest.raises(StepFailure, match="no slot"):
        await admission.admit(DEST, "t", wait_timeout_s=0)
    assert admission.batcher.exchanges == before + 1
    await held.success()  # handed to the queued caller
    async with asyncio.timeout(5):
        await (await queued).success()


async def test_a_caller_cancelled_just_after_its_grant_gives_the_slot_back(
    connect: Connect,
) -> None:
    """The window: Redis granted the slots and the replies are set, but the callers have not
    run yet when they are cancelled. Their slots go back in the next exchange."""
    admission = make(connect, aimd=AimdConfig(initial_limit=3))
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=3))
    before = admission.batcher.exchanges
    callers = [asyncio.ensure_future(admission.admit(DEST, "t", wait_timeout_s=5)) for _ in "abc"]
    async with asyncio.timeout(5):
        while admission.batcher.exchanges == before:  # bounded by the timeout
            await asyncio.sleep(0)
    assert not any(caller.done() for caller in callers)
    for caller in callers:
        caller.cancel()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    async with asyncio.timeout(5):
        while await in_flight(admission):
            await asyncio.sleep(0.01)


async def test_raises_are_logged_at_debug_and_cuts_at_info(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reads INFO: a cut is news, a raise is the limit doing its job."""
    admission = make(connect, aimd=AimdConfig(initial_limit=2))
    with caplog.at_level(logging.DEBUG, logger="admission.controller"):
        for window in (2, 4, 8):  # slow start: each full window doubles the limit
            tickets = await admit_n(admission, window)
            await asyncio.gather(*(t.success() for t in tickets))
        (ticket,) = await admit_n(admission, 1)
        await ticket.settle(CallOutcome.THROTTLED)
    changes = [
        (r.levelno, r.cut)
        for r in caplog.records
        if getattr(r, "event", "") == "admission.limit_changed"
    ]
    assert (logging.DEBUG, False) in changes
    assert changes[-1] == (logging.INFO, True)
    assert all(level == (logging.INFO if cut else logging.DEBUG) for level, cut in changes)
