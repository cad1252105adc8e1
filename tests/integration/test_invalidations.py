"""engine.coordination.invalidations and engine.operations.row_cache, on the embedded server
and on a real Redis. Two `Invalidations` on two clients stand for two processes; each test
keeps its tokens under a prefix of its own (other tests may share the Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from engine.coordination import invalidations
from engine.coordination.invalidations import TOPICS, Invalidations, request_scope
from engine.operations.row_cache import RowCache
from schemas.clock import FakeClock
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL, open_client, unique


@pytest.fixture
async def pair(
    coord_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Invalidations, Invalidations]]:
    """Two processes' views of the same tokens, on separate clients. A read may take 10 s
    here, not 50 ms: these tests are about what tokens say, not how fast Redis answers. On a
    loaded host a first read (three round trips) once took over 50 ms, and in a full CI run
    (three test processes, browsers, 2 cores) over 2 s, read None and failed one of them;
    Redis's slow log showed nothing over 27 ms then, so the wait was the test process's."""
    monkeypatch.setattr(invalidations, "READ_TIMEOUT_S", 10.0)
    prefix = unique("sb:rows-epoch-test") + ":"
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_client(coord_url))
        second = await stack.enter_async_context(open_client(coord_url))
        yield Invalidations(first, prefix=prefix), Invalidations(second, prefix=prefix)


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

    async def through(self, cache: RowCache[str], key: str) -> str | None:
        """`key` from `cache`, read from this store when the cache has no usable copy."""
        return await cache.get(key, lambda: self.read(key))


def cache_on(tokens: Invalidations, clock: FakeClock, max_age_s: float = 5.0) -> RowCache[str]:
    return RowCache(tokens, "things", clock, max_age_s=max_age_s, max_rows=3)


async def test_every_process_reads_one_token_until_a_change_replaces_it(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    first, second = pair
    token = await first.token("things")
    assert token is not None and await second.token("things") == token
    assert await first.token("things") == token, "stable while nothing changes"
    assert await second.announce("things")
    assert await first.token("things") not in (None, token)
    assert await first.token("other-things") != await first.token("things")


async def test_a_change_elsewhere_is_seen_by_the_very_next_read(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    changer, reader = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(reader, clock)
    for _ in range(3):
        assert await store.through(cache, "k") == "v1"
    assert store.reads == 1, "a found row is kept"
    store.rows["k"] = "v2"
    await changer.announce("things")  # no wait of any kind after it
    assert await store.through(cache, "k") == "v2"
    await changer.announce("other-things")
    assert await store.through(cache, "k") == "v2"
    assert store.reads == 2, "another topic's change keeps the copies"


async def test_a_read_that_races_a_change_is_used_but_not_kept(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    changer, reader = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(reader, clock)
    store.during_read = asyncio.Event()
    reading = asyncio.create_task(store.through(cache, "k"))
    while store.reads == 0:
        await asyncio.sleep(0.001)
    store.rows["k"] = "v2"  # the change commits while the read is under way
    await changer.announce("things")
    store.during_read.set()
    store.during_read = None
    newer = await store.through(cache, "k")  # sees the new token: reads again
    assert (await reading, newer) == ("v1", "v2")
    assert await store.through(cache, "k") == "v2", "the old row was not kept"


async def test_copies_expire_and_misses_are_never_kept(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    _, reader = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(reader, clock, max_age_s=5.0)
    await store.through(cache, "k")
    clock.advance(4.9)
    await store.through(cache, "k")
    assert store.reads == 1
    clock.advance(0.1)
    await store.through(cache, "k")
    assert store.reads == 2, "a copy is read again at its age limit"
    for _ in range(3):
        assert await store.through(cache, "unknown") is None
    assert store.reads == 5 and len(cache) == 1


async def test_a_full_cache_starts_over(pair: tuple[Invalidations, Invalidations]) -> None:
    _, reader = pair
    store, clock = Store(), FakeClock()
    store.rows |= {"a": "1", "b": "2", "c": "3"}
    cache = cache_on(reader, clock)  # at most 3 rows
    for key in ("k", "a", "b"):
        await store.through(cache, key)
    assert len(cache) == 3
    await store.through(cache, "c")
    assert len(cache) == 1


async def test_a_redis_that_lost_its_tokens_starts_a_new_era(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    # A restarted Redis hands out a new random token, never one a copy was kept under.
    changer, reader = pair
    store, clock = Store(), FakeClock()
    cache = cache_on(reader, clock)
    await store.through(cache, "k")
    await changer._client.delete(changer.prefix + "things")
    store.rows["k"] = "v2"
    assert await store.through(cache, "k") == "v2"


async def test_announcements_made_soon_are_sent_when_settled(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    changer, reader = pair
    before = await reader.token("things")
    changer.announce_soon("things")
    await changer.settled()
    assert await reader.token("things") != before


async def test_nothing_is_kept_while_redis_is_down() -> None:
    store, clock = Store(), FakeClock()
    async with open_client(UNREACHABLE_REDIS_URL) as client:
        down = Invalidations(client, prefix=unique("sb:rows-epoch-test") + ":")
        cache = cache_on(down, clock)
        for _ in range(3):
            assert await store.through(cache, "k") == "v1"
        assert store.reads == 3 and len(cache) == 0
        assert not await down.announce("things"), "a failed change of token says so"


def counting_mgets(tokens: Invalidations) -> list[int]:
    counter = [0]
    mget = tokens._client.mget

    async def counted(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return await mget(*args, **kwargs)

    tokens._client.mget = counted  # type: ignore[method-assign]
    return counter


async def test_one_request_reads_every_token_once(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    changer, reader = pair
    store, clock = Store(), FakeClock()
    keys, routes = (RowCache(reader, topic, clock, max_age_s=5.0, max_rows=3) for topic in TOPICS)
    await reader.token(TOPICS[0])  # the tokens exist (their first read sets them)
    mgets = counting_mgets(reader)
    with request_scope():
        await store.through(keys, "k")
        await store.through(routes, "k")
        await store.through(keys, "k")
    assert mgets[0] == 1, "both topics in one MGET, read once in the request"
    await changer.announce(TOPICS[0])
    with request_scope():  # the next request reads again, and sees the change
        store.rows["k"] = "v2"
        assert await store.through(keys, "k") == "v2"
        assert await store.through(routes, "k") == "v1"
    assert mgets[0] == 2
    await store.through(keys, "k")
    await store.through(keys, "k")
    assert mgets[0] == 4, "outside a request every call reads Redis"


async def test_a_change_made_in_a_request_is_seen_later_in_it(
    pair: tuple[Invalidations, Invalidations],
) -> None:
    _, process = pair
    store, clock = Store(), FakeClock()
    routes = RowCache(process, TOPICS[1], clock, max_age_s=5.0, max_rows=3)
    with request_scope():
        assert await store.through(routes, "k") == "v1"
        store.rows["k"] = "v2"
        process.announce_soon(TOPICS[1])  # the store's report of its committed change
        assert await store.through(routes, "k") == "v2"
        await process.settled()
