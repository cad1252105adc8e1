"""engine.coordination on the embedded server and on a real Redis (one contract, two backends)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import fakeredis
import pytest
import redis.asyncio as redis

from engine import coordination
from engine.settings import Settings
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL, open_client, unique


@pytest.fixture
async def client(coord_url: str | None) -> AsyncIterator[redis.Redis]:
    async with open_client(coord_url) as opened:
        yield opened


async def test_round_trip_returns_bytes(client: redis.Redis) -> None:
    key = unique("coord")
    await client.set(key, "value", ex=60)
    assert await client.get(key) == b"value"


async def test_lua_scripts_run(client: redis.Redis) -> None:
    key = unique("coord-lua")
    script = "redis.call('SET', KEYS[1], ARGV[1], 'EX', 60); return redis.call('INCR', KEYS[1])"
    assert await client.eval(script, 1, key, "41") == 42
    registered = client.register_script("return redis.call('GET', KEYS[1])")
    assert await registered(keys=[key]) == b"42"


async def test_redis_ok_on_a_live_backend(client: redis.Redis) -> None:
    assert await coordination.redis_ok(client)


async def test_clients_opened_in_one_process_share_a_keyspace(coord_url: str | None) -> None:
    key = unique("coord-shared")
    async with open_client(coord_url) as first, open_client(coord_url) as second:
        await first.set(key, b"seen", ex=60)
        assert await second.get(key) == b"seen"


def test_embedded_server_is_one_per_process() -> None:
    assert coordination.embedded_server() is coordination.embedded_server()


async def test_embedded_clients_use_the_process_server() -> None:
    client = await coordination.open_redis(Settings(redis_url=None))
    try:
        assert isinstance(client, fakeredis.FakeAsyncRedis)
        key = unique("coord-direct")
        await client.set(key, b"1", ex=60)
        probe = fakeredis.FakeAsyncRedis(server=coordination.embedded_server())
        try:
            assert await probe.get(key) == b"1"
        finally:
            await probe.aclose()
    finally:
        await coordination.close_redis(client)


async def test_redis_ok_is_false_when_the_server_is_down() -> None:
    async with open_client(UNREACHABLE_REDIS_URL) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert not await coordination.redis_ok(client, timeout_s=3.0)
        assert loop.time() - started < 3.0, "a refused connection must fail fast"


async def test_redis_ok_is_false_during_an_embedded_outage() -> None:
    # A private server: switching the shared one off would disturb other tests.
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server)
    try:
        assert await coordination.redis_ok(client)
        server.connected = False
        assert not await coordination.redis_ok(client)
        server.connected = True
        assert await coordination.redis_ok(client)
    finally:
        await coordination.close_redis(client)


async def test_close_is_quiet_for_a_server_that_is_gone() -> None:
    client = await coordination.open_redis(Settings(redis_url=UNREACHABLE_REDIS_URL))
    assert not await coordination.redis_ok(client)
    await coordination.close_redis(client)


@pytest.mark.redis
async def test_admission_gets_a_client_that_never_resends(redis_url: str, tmp_path: Path) -> None:
    """Its exchange script is not idempotent (tests/integration/test_admission_lost_reply.py);
    everything else keeps the quick retries. (The embedded server has no connections to lose.)"""
    from engine.runtime import Runtime

    database_url = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    runtime = await Runtime.open(Settings(database_url=database_url, redis_url=redis_url))
    try:
        assert runtime.admission_redis.get_retry().get_retries() == 0
        assert runtime.redis.get_retry().get_retries() == 2
        assert runtime.admission.backend._redis is runtime.admission_redis
    finally:
        await runtime.close()
