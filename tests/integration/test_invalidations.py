"""engine.coordination.invalidations and engine.operations.row_cache, on the embedded server
and on a real Redis. Two `Invalidations` on two clients stand for two processes; each test
uses its own channel (pub/sub channels are server-wide)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import fakeredis
import pytest
import redis.asyncio as redis

from engine import coordination
from engine.coordination.invalidations import LIVENESS_S, PING_S, Invalidations
from engine.operations.row_cache import RowCache
from engine.settings import Settings
from schemas.clock import FakeClock
from tests.integration.scripts.helpers import (
    UNREACHABLE_REDIS_URL,
    open_client,
    unique,
    wait_until,
)


def fast(client: redis.Redis, channel: str) -> Invalidations:
    """Short restart backoff and read timeout, so failure tests finish in milliseconds."""
    return Invalidations(
        client, channel=channel, restart_backoff_s=0.01, max_restart_backoff_s=0.05,
        read_timeout_s=0.05,
    )  # fmt: skip


@pytest.fixture
async def pair(coord_url: str | None) -> AsyncIterator[tuple[Invalidations, Invalidations]]:
    """Two started channels on separate clients ("two processes"), neither listening yet."""
    channel = unique("sb:invalidations-test")
    async with AsyncExitStack() as stack:
        first = Invalidations(
            await stack.enter_async_context(open_client(coord_url)), channel=channel
        )
        second = Invalidations(
            await stack.enter_async_context(open_client(coord_url)), channel=channel
        )
        await stack.enter_async_context(first)
        await stack.enter_async_context(second)
        yield first, second


class Store:
    """The rows a cache reads, and how often it read them."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {"k": "v1"}
        self.reads = 0
        self.during_read: asyncio.Event | None = None

    async def read(self, key: str) -> str | None:
        self.reads += 1
        row = self.rows.get(key)
        if self.during_read is not None:
            await self.during_read.wait()
        return row


def cache_on(channel: Invalidations, clock: FakeClock, max_age_s: float = 5.0) -> RowCache[str]:
    return RowCache(channel, "things", clock, max_age_s=max_age_s, max_rows=3)


async def test_an_announcement_drops_the_other_process_copies(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    announcer, listener = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(listener, clock)
    assert not listener.trusted, "nothing is trusted before the subscription is confirmed"
    assert await listener.wait_ready(5.0)
    assert listener.trusted
    assert await cache.get("k", lambda: store.read("k")) == "v1"
    assert await cache.get("k", lambda: store.read("k")) == "v1"
    assert store.reads == 1, "a found row is kept"

    store.rows["k"] = "v2"
    await announcer.announce("things")
    await wait_until(lambda: len(cache) == 0, what="the copy to be dropped")
    assert await cache.get("k", lambda: store.read("k")) == "v2"
    assert store.reads == 2


async def test_another_topic_keeps_the_copies(pair: tuple[Invalidations, Invalidations]) -> None:
    announcer, listener = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(listener, clock)
    assert await listener.wait_ready(5.0)
    await cache.get("k", lambda: store.read("k"))
    await announcer.announce("other-things")
    await announcer.announce("things")  # after the first: once it is heard, so was the first
    await wait_until(lambda: len(cache) == 0, what="the second announcement")
    assert listener.received == 2


async def test_the_announcing_process_drops_its_own_copies_at_once(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    process, _ = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(process, clock)
    assert await process.wait_ready(5.0)
    await cache.get("k", lambda: store.read("k"))
    await process.announce("things")
    assert len(cache) == 0
    assert process.echoes <= 1 and process.received == 0


async def test_a_read_that_races_an_announcement_is_used_but_not_kept(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    announcer, listener = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(listener, clock)
    assert await listener.wait_ready(5.0)
    store.during_read = asyncio.Event()
    reading = asyncio.create_task(cache.get("k", lambda: store.read("k")))
    await wait_until(lambda: store.reads == 1, what="the read to start")
    store.rows["k"] = "v2"  # the change commits while the read is under way
    await announcer.announce("things")
    await wait_until(lambda: listener.received == 1, what="the announcement")
    store.during_read.set()
    assert await reading == "v1"
    assert len(cache) == 0, "a row read across a change would be stale: not kept"
    store.during_read = None
    assert await cache.get("k", lambda: store.read("k")) == "v2"


async def test_copies_expire_and_misses_are_never_kept(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    _, listener = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(listener, clock, max_age_s=5.0)
    assert await listener.wait_ready(5.0)
    await cache.get("k", lambda: store.read("k"))
    clock.advance(4.9)
    await cache.get("k", lambda: store.read("k"))
    assert store.reads == 1
    clock.advance(0.1)
    await cache.get("k", lambda: store.read("k"))
    assert store.reads == 2, "a copy is read again at its age limit"
    for _ in range(3):
        assert await cache.get("unknown", lambda: store.read("unknown")) is None
    assert store.reads == 5 and len(cache) == 1


async def test_a_full_cache_starts_over(pair: tuple[Invalidations, Invalidations]) -> None:
    _, listener = pair
    store, clock = Store(), FakeClock()
    store.rows |= {"a": "1", "b": "2", "c": "3"}
    cache = cache_on(listener, clock)  # at most 3 rows
    assert await listener.wait_ready(5.0)
    for key in ("k", "a", "b"):
        await cache.get(key, lambda key=key: store.read(key))  # type: ignore[misc]
    assert len(cache) == 3
    await cache.get("c", lambda: store.read("c"))
    assert len(cache) == 1


async def test_nothing_is_kept_while_redis_is_down() -> None:
    store, clock = Store(), FakeClock()
    async with open_client(UNREACHABLE_REDIS_URL) as client, fast(client, unique("sb:inv")) as down:
        cache = cache_on(down, clock)
        await wait_until(lambda: down.restarts >= 1, what="the listener to fail")
        for _ in range(3):
            assert await cache.get("k", lambda: store.read("k")) == "v1"
        assert store.reads == 3 and len(cache) == 0
        await down.announce("things")  # a failed publish is logged, never raised


async def test_an_outage_drops_everything_and_copies_wait_for_the_resubscription() -> None:
    server = fakeredis.FakeServer()  # private: the outage must not reach other tests
    client = fakeredis.FakeAsyncRedis(server=server)
    store, clock = Store(), FakeClock()
    try:
        async with fast(client, unique("sb:inv")) as listener:
            cache = cache_on(listener, clock)
            assert await listener.wait_ready(5.0)
            await cache.get("k", lambda: store.read("k"))
            server.connected = False
            await wait_until(lambda: not listener.trusted, what="the listener to fail")
            await cache.get("k", lambda: store.read("k"))
            assert store.reads == 2, "an untrusted copy is not used"
            server.connected = True
            await wait_until(lambda: listener.subscriptions >= 2, what="resubscription")
            assert len(cache) == 0, "what was announced meanwhile is lost: everything dropped"
            await cache.get("k", lambda: store.read("k"))
            await cache.get("k", lambda: store.read("k"))
            assert store.reads == 3
    finally:
        await coordination.close_redis(client)


async def test_a_killed_connection_drops_everything(redis_url: str) -> None:
    name = unique("invalidations-kill")
    client = await coordination.open_redis(Settings(redis_url=redis_url), client_name=name)
    store, clock = Store(), FakeClock()
    try:
        async with open_client(redis_url) as admin, fast(client, unique("sb:inv")) as listener:
            cache = cache_on(listener, clock)
            assert await listener.wait_ready(5.0)
            await cache.get("k", lambda: store.read("k"))
            victims = [c for c in await admin.client_list(_type="pubsub") if c["name"] == name]
            assert len(victims) == 1
            await admin.client_kill_filter(_id=victims[0]["id"])
            await wait_until(lambda: listener.subscriptions >= 2, what="resubscription")
            assert len(cache) == 0
    finally:
        await coordination.close_redis(client)


async def test_a_listener_that_hears_nothing_is_not_trusted(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    # A half-open connection delivers nothing and raises nothing: only silence tells.
    _, listener = pair
    cache_on(listener, FakeClock())
    assert await listener.wait_ready(5.0)
    assert listener.trusted
    listener.last_heard = asyncio.get_running_loop().time() - LIVENESS_S
    assert not listener.trusted
    # Its PINGs keep a live one trusted: the next PONG is heard within about `PING_S`.
    await wait_until(lambda: listener.trusted, timeout_s=PING_S * 4, what="a PONG")


async def test_a_lost_connection_is_not_trusted_until_resubscribed(redis_url: str) -> None:
    # redis-py reconnects a lost connection inside the listener's read; announcements sent
    # meanwhile are lost, so the copies are not trusted until the subscription is back.
    name = unique("invalidations-lost")
    settings = Settings(redis_url=redis_url)
    client = await coordination.open_redis(settings, client_name=name, retries=False)
    channel = unique("sb:inv")
    store, clock = Store(), FakeClock()
    try:
        async with (
            open_client(redis_url) as admin,
            fast(client, channel) as listener,
            Invalidations(admin, channel=channel) as announcer,
        ):
            cache = cache_on(listener, clock)
            assert await listener.wait_ready(5.0)
            await cache.get("k", lambda: store.read("k"))
            assert listener._pubsub is not None and listener._pubsub.connection is not None
            connection = listener._pubsub.connection
            connect = connection.connect

            async def slow_connect() -> None:  # a reconnection that takes a while (failover)
                await asyncio.sleep(0.5)
                await connect()

            connection.connect = slow_connect  # type: ignore[method-assign]
            victims = [c for c in await admin.client_list(_type="pubsub") if c["name"] == name]
            await admin.client_kill_filter(_id=victims[0]["id"])
            await asyncio.sleep(0.1)
            store.rows["k"] = "v2"
            await announcer.announce("things")  # while nobody here listens: lost
            assert await cache.get("k", lambda: store.read("k")) == "v2", "not while deaf"
            await wait_until(lambda: listener.subscriptions >= 2, what="resubscription")
            assert await cache.get("k", lambda: store.read("k")) == "v2"
    finally:
        await coordination.close_redis(client)
