"""engine.coordination.wakeup on the embedded server and on a real Redis.

Two `Wakeup` instances on two clients stand for two processes. Every test uses its own channel:
pub/sub channels are server-wide, and other test runs may share the Redis.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

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
        first.listen()
        assert await first.wait_ready(5.0)
        second.listen()
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
            listening.listen()
            assert await listening.wait_ready(5.0)
            await cold.notify()
            assert cold.published == 1
            assert await listening.wait(5.0)
            assert await cold.wait(0.0), "local wake even when not started"


async def test_only_a_process_that_waits_reads_the_channel(
    coord_url: str | None, channel: str
) -> None:
    """An API process only notifies: it never subscribes, so it never reads what the other
    processes publish. The first `wait()` (or `listen()`) subscribes."""
    async with open_client(coord_url) as client, Wakeup(client, channel=channel) as wakeup:
        await wakeup.notify()
        assert not await wakeup.wait_ready(0.2), "no waiter, no subscription"
        assert await client.pubsub_numsub(channel) == [(channel.encode(), 0)]
        assert await wakeup.wait(0.0), "its own notify still wakes it locally"
        assert await wakeup.wait_ready(5.0), "a wait subscribes"
        assert await client.pubsub_numsub(channel) == [(channel.encode(), 1)]


async def test_stop_is_idempotent_and_releases_the_subscription(
    coord_url: str | None, channel: str
) -> None:
    async with open_client(coord_url) as client:
        wakeup = Wakeup(client, channel=channel)
        await wakeup.start()
        await wakeup.start()
        wakeup.listen()
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
            waiter.listen()
            assert await waiter.wait_ready(5.0)
            with caplog.at_level(logging.DEBUG, logger="engine.coordination.wakeup"):
                server.connected = False
                await wait_until(lambda: waiter.restarts >= 3, what="the listener to die")
                assert not await waiter.wait(0.02)
                server.connected = True
                await wait_until(lambda: waiter.subscriptions >= 2, what="resubscription")
            assert "died" in caplog.text
            assert await waiter.wait(0.0), "a resubscription wakes waiters: messages were lost"
            await notifier.notify()
            assert await waiter.wait(5.0)
        one_warning_then_listening_again(outage_lines(caplog, channel))
    finally:
        await coordination.close_redis(listening)
        await coordination.close_redis(notifying)


def outage_lines(caplog: pytest.LogCaptureFixture, channel: str) -> list[tuple[str, str]]:
    """(level, message) of what the wake-up channel logged at info and above about `channel`."""
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "engine.coordination.wakeup"
        and r.levelno >= logging.INFO
        and channel in r.getMessage()
    ]


def one_warning_then_listening_again(lines: list[tuple[str, str]]) -> None:
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "listening again after" in lines[1][1], lines


@asynccontextmanager
async def watched(
    client: redis.Redis, redis_url: str, channel: str, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[Wakeup, Wakeup, redis.Redis]]:
    """A subscribed waiter on `client`, a notifier on a client of its own to `redis_url` (and
    that client), with the wake-up channel's log captured from then on at every level."""
    async with (
        open_client(redis_url) as direct,
        fast_wakeup(client, channel) as waiter,
        Wakeup(direct, channel=channel) as notifier,
    ):
        waiter.listen()
        assert await waiter.wait_ready(5.0)
        caplog.set_level(logging.DEBUG, logger="engine.coordination.wakeup")
        yield waiter, notifier, direct


async def listening_again(
    waiter: Wakeup, notifier: Wakeup, caplog: pytest.LogCaptureFixture
) -> None:
    """Once `waiter` resubscribes after losing its connection: the outage was one warning
    and one line, the resubscription woke it, and a notify from `notifier` wakes it again."""
    await wait_until(lambda: waiter.subscriptions >= 2, what="resubscription")
    one_warning_then_listening_again(outage_lines(caplog, waiter.channel))
    assert await waiter.wait(0.0), "a resubscription wakes waiters: messages were lost"
    await notifier.notify()
    assert await waiter.wait(5.0)


async def test_listener_recovers_when_redis_drops_its_connection(
    redis_url: str, channel: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`CLIENT KILL ID` of the listener's own connection (Redis stays up): one warning, one
    line when it listens again, and a notify after that still wakes the waiter."""
    name = unique("wakeup-kill")
    client = await coordination.open_redis(Settings(redis_url=redis_url), client_name=name)
    try:
        async with watched(client, redis_url, channel, caplog) as (waiter, notifier, admin):
            victims = [c for c in await admin.client_list(_type="pubsub") if c["name"] == name]
            assert len(victims) == 1
            await admin.client_kill_filter(_id=victims[0]["id"])
            await listening_again(waiter, notifier, caplog)
    finally:
        await coordination.close_redis(client)


class Proxy:
    """A TCP relay on loopback to the real Redis, which can go away and come back on the same
    port: a Redis that is unreachable for a while, without touching the server others use."""

    def __init__(self, port: int) -> None:
        self.target_port = port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


async def test_an_outage_is_one_warning_however_many_retries_then_one_line(
    redis_url: str, channel: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis unreachable (behind a relay that stops) while the listener retries several
    times: one warning, not one a retry; one line when it listens again; notifies wake."""
    prefix, _, db = redis_url.rpartition("/")
    proxy = Proxy(int(prefix.rpartition(":")[2]))
    await proxy.start()
    client = await coordination.open_redis(
        Settings(redis_url=f"redis://127.0.0.1:{proxy.port}/{db}")
    )
    try:
        async with watched(client, redis_url, channel, caplog) as (waiter, notifier, _):
            await proxy.stop()
            await wait_until(lambda: waiter.restarts >= 4, what="several failed restarts")
            assert outage_lines(caplog, channel)[0][0] == "WARNING"
            await proxy.start()
            await listening_again(waiter, notifier, caplog)
    finally:
        await coordination.close_redis(client)
        await proxy.stop()
