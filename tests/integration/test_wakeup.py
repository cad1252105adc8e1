"""engine.coordination.wakeup on the embedded server and on a real Redis.

Two `Wakeup` instances on two clients stand for two processes. Every test uses its own channel:
pub/sub channels are server-wide, and other test runs may share the Redis.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import fakeredis
import pytest
import redis.asyncio as redis

from engine import coordination
from engine.coordination.wakeup import Wakeup
from engine.settings import Settings
from tests.integration.scripts.helpers import (
    UNREACHABLE_REDIS_URL,
    open_client,
    unique,
    wait_until,
)


def fast_wakeup(client: redis.Redis, channel: str) -> Wakeup:
    """Short restart backoff and read timeout, so failure tests finish in milliseconds."""
    return Wakeup(
        client,
        channel=channel,
        restart_backoff_s=0.01,
        max_restart_backoff_s=0.05,
        read_timeout_s=0.05,
    )


@pytest.fixture
def channel() -> str:
    return unique("sb:wakeup-test")


@pytest.fixture
async def pair(coord_url: str | None, channel: str) -> AsyncIterator[tuple[Wakeup, Wakeup]]:
    """Two started, subscribed wake-ups on separate clients ("two processes")."""
    async with AsyncExitStack() as stack:
        first = Wakeup(await stack.enter_async_context(open_client(coord_url)), channel=channel)
        second = Wakeup(await stack.enter_async_context(open_client(coord_url)), channel=channel)
        await stack.enter_async_context(first)
        await stack.enter_async_context(second)
        assert await first.wait_ready(5.0)
        assert await second.wait_ready(5.0)
        yield first, second


async def test_a_notify_wakes_the_other_process(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, waiter = pair
    pending_wait = asyncio.create_task(waiter.wait(5.0))
    await asyncio.sleep(0)  # let the waiter block first
    await notifier.notify()
    assert await asyncio.wait_for(pending_wait, 6.0)
    assert waiter.received == 1


async def test_a_notification_waits_for_the_next_wait(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, waiter = pair
    await notifier.notify()
    await wait_until(lambda: waiter.received == 1, what="delivery")
    assert await waiter.wait(0.0), "level-triggered: pending until consumed"
    assert not await waiter.wait(0.0), "consumed once"


async def test_wait_times_out_without_notifications(pair: tuple[Wakeup, Wakeup]) -> None:
    _, waiter = pair
    assert not await waiter.wait(0.02)


async def test_local_waiters_wake_without_redis(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, _ = pair
    waiters = [asyncio.create_task(notifier.wait(5.0)) for _ in range(3)]
    await asyncio.sleep(0)
    await notifier.notify()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1.0) == [True, True, True]


async def test_own_publications_are_ignored(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, waiter = pair
    await notifier.notify()
    assert await notifier.wait(0.0)  # the local wake
    await wait_until(lambda: notifier.echoes == 1 and waiter.received == 1, what="the echo")
    assert not await notifier.wait(0.0), "the echo must not wake it a second time"


async def test_a_burst_of_notifies_is_coalesced(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, waiter = pair
    for _ in range(200):
        await notifier.notify()
    await wait_until(lambda: waiter.received >= 1, what="delivery")
    await wait_until(lambda: notifier.echoes == notifier.published, what="all echoes")
    assert 1 <= notifier.published <= 2
    assert waiter.received == notifier.published


async def test_a_notify_during_the_window_is_not_lost(pair: tuple[Wakeup, Wakeup]) -> None:
    notifier, waiter = pair
    await notifier.notify()
    await wait_until(lambda: notifier.published == 1, what="first publish")
    await notifier.notify()  # lands inside the 5 ms window: published after it
    await wait_until(lambda: waiter.received == 2, what="second delivery")


async def test_notify_before_start_publishes_inline(coord_url: str | None, channel: str) -> None:
    async with open_client(coord_url) as a, open_client(coord_url) as b:
        cold = Wakeup(a, channel=channel)
        async with Wakeup(b, channel=channel) as listening:
            assert await listening.wait_ready(5.0)
            await cold.notify()
            assert cold.published == 1
            assert await listening.wait(5.0)
            assert await cold.wait(0.0), "local wake even when not started"


async def test_stop_is_idempotent_and_releases_the_subscription(
    coord_url: str | None, channel: str
) -> None:
    async with open_client(coord_url) as client:
        wakeup = Wakeup(client, channel=channel)
        await wakeup.start()
        await wakeup.start()
        assert await wakeup.wait_ready(5.0)
        assert await client.pubsub_numsub(channel) == [(channel.encode(), 1)]
        await wakeup.stop()
        await wakeup.stop()
        assert not wakeup.subscribed
        await wait_until(
            lambda: _numsub(client, channel, 0), what="the server to drop the subscription"
        )


async def _numsub(client: redis.Redis, channel: str, expected: int) -> bool:
    reply = await client.pubsub_numsub(channel)
    return bool(reply == [(channel.encode(), expected)])


# ── losing Redis: fallback polling, supervised restarts ─────────────────────────────────────


async def test_redis_down_means_wait_times_out_and_notify_stays_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_client(UNREACHABLE_REDIS_URL) as client:
        with caplog.at_level(logging.WARNING, logger="engine.coordination.wakeup"):
            async with fast_wakeup(client, unique("sb:wakeup-down")) as wakeup:
                assert not await wakeup.wait(0.05), "the timeout is the slow-poll fallback"
                await wait_until(lambda: wakeup.restarts >= 2, what="listener restarts")
                await wakeup.notify()
                assert await wakeup.wait(0.0), "local waiters still wake"
                await wait_until(lambda: "publish" in caplog.text, what="the publish failure log")
        assert "wake-up listener" in caplog.text and "died" in caplog.text
        assert wakeup.published == 0


async def test_listener_restarts_after_an_embedded_outage(
    channel: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = fakeredis.FakeServer()  # private: the outage must not reach other tests
    listening = fakeredis.FakeAsyncRedis(server=server)
    notifying = fakeredis.FakeAsyncRedis(server=server)
    try:
        async with (
            fast_wakeup(listening, channel) as waiter,
            Wakeup(notifying, channel=channel) as notifier,
        ):
            assert await waiter.wait_ready(5.0)
            with caplog.at_level(logging.WARNING, logger="engine.coordination.wakeup"):
                server.connected = False
                await wait_until(lambda: waiter.restarts >= 1, what="the listener to die")
                assert not await waiter.wait(0.02)
                server.connected = True
                await wait_until(lambda: waiter.subscriptions >= 2, what="resubscription")
            assert "died" in caplog.text
            assert await waiter.wait(0.0), "a resubscription wakes waiters: messages were lost"
            await notifier.notify()
            assert await waiter.wait(5.0)
    finally:
        await coordination.close_redis(listening)
        await coordination.close_redis(notifying)


async def test_listener_recovers_when_redis_drops_its_connection(
    redis_url: str, channel: str
) -> None:
    name = unique("wakeup-kill")
    client = await coordination.open_redis(Settings(redis_url=redis_url), client_name=name)
    try:
        async with (
            open_client(redis_url) as admin,
            fast_wakeup(client, channel) as waiter,
            Wakeup(admin, channel=channel) as notifier,
        ):
            assert await waiter.wait_ready(5.0)
            victims = [c for c in await admin.client_list(_type="pubsub") if c["name"] == name]
            assert len(victims) == 1
            await admin.client_kill_filter(_id=victims[0]["id"])

            await wait_until(lambda: waiter.subscriptions >= 2, what="resubscription")
            assert await waiter.wait(0.0), "a resubscription wakes waiters: messages were lost"
            await notifier.notify()
            assert await waiter.wait(5.0)
    finally:
        await coordination.close_redis(client)
