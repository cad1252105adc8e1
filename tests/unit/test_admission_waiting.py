"""In-process wake-ups and the jittered backoff of slot waiters."""

from __future__ import annotations

import asyncio
import random

from admission.waiting import Backoff, SlotWaiters, Wake

LONG = 30.0


def test_backoff_doubles_up_to_its_cap_with_bounded_jitter() -> None:
    backoff = Backoff(0.01, 0.25, random.Random(7))
    for attempt, ceiling in [(0, 0.01), (1, 0.02), (3, 0.08), (10, 0.25), (10_000, 0.25)]:
        pause = backoff.pause_s(attempt)
        assert ceiling / 2 <= pause <= ceiling


async def test_only_the_head_polls_the_others_sleep_until_woken() -> None:
    waiters = SlotWaiters()
    head, second = waiters.join("d"), waiters.join("d")
    assert head.is_head and not second.is_head
    async with asyncio.timeout(2):
        assert await head.pause(head_pause_s=0.01, remaining_s=LONG) is Wake.TIMEOUT  # poll due
    sleeper = asyncio.create_task(second.pause(head_pause_s=0.01, remaining_s=LONG))
    await asyncio.sleep(0.05)
    assert not sleeper.done()  # a non-head never polls
    waiters.leave("d", head)  # the head leaves: the next one is woken to take over
    async with asyncio.timeout(2):
        assert await sleeper is Wake.PROMOTED  # (it pauses as head before it polls)
    assert second.is_head
    waiters.leave("d", second)
    assert waiters.waiting("d") == 0


async def test_notify_wakes_waiters_in_order_one_per_release() -> None:
    waiters = SlotWaiters()
    first, second, third = (waiters.join("d") for _ in range(3))
    waiters.notify_one("d")
    waiters.notify_one("d")
    async with asyncio.timeout(2):
        assert await first.pause(head_pause_s=LONG, remaining_s=LONG) is Wake.SLOT
        assert await second.pause(head_pause_s=LONG, remaining_s=LONG) is Wake.SLOT
    assert not third.woken
    waiters.notify_one("other")  # another destination's release wakes nobody here
    assert not third.woken
    for waiter in (first, second, third):
        waiters.leave("d", waiter)


async def test_a_wake_up_is_not_lost_while_the_waiter_is_busy() -> None:
    waiters = SlotWaiters()
    waiter = waiters.join("d")
    waiters.notify_one("d")  # arrives before the waiter pauses
    async with asyncio.timeout(2):
        assert await waiter.pause(head_pause_s=LONG, remaining_s=LONG) is Wake.SLOT
    assert await waiter.pause(head_pause_s=LONG, remaining_s=0.01) is Wake.TIMEOUT  # consumed
    waiters.leave("d", waiter)


async def test_a_promoted_head_still_gets_a_slot_signal() -> None:
    """Promotion wakes the new head without a signal; a slot freed before it runs must
    still reach it as a signal (or it would pause before asking)."""
    waiters = SlotWaiters()
    head, second, third = (waiters.join("d") for _ in range(3))
    waiters.leave("d", head)
    assert second.woken and not second.signalled
    waiters.notify_one("d")
    assert second.signalled and not third.woken
    async with asyncio.timeout(2):
        assert await second.pause(head_pause_s=LONG, remaining_s=LONG) is Wake.SLOT
    for waiter in (second, third):
        waiters.leave("d", waiter)
