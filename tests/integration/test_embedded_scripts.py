"""The embedded Redis compiles each Lua script once and otherwise runs it as fakeredis does:
the same replies, the same errors, KEYS and ARGV fresh on every call."""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest
from fakeredis import FakeAsyncRedis

from engine.coordination.embedded_scripts import (
    COMPILED_SCRIPTS_KEPT,
    CompilingRuntime,
    compile_scripts_once,
)
from engine.coordination.redis_client import embedded_server

COUNTER = b"""
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
return {KEYS[1], n}
"""


def test_the_embedded_server_compiles_its_scripts_once() -> None:
    # Fails when fakeredis no longer keeps its runtime where compile_scripts_once wraps it.
    assert isinstance(embedded_server()._lua_runtime, CompilingRuntime)  # type: ignore[attr-defined]


async def test_a_script_is_compiled_once_and_sees_each_calls_keys_and_arguments() -> None:
    server = fakeredis.FakeServer()
    runtime = compile_scripts_once(server)
    assert runtime is not None
    assert compile_scripts_once(server) is runtime
    client = fakeredis.FakeAsyncRedis(server=server)
    sha = await client.script_load(COUNTER)
    before = runtime.compiled.cache_info()

    replies = [await client.evalsha(sha, 1, f"k{i % 2}", i) for i in range(1, 7)]

    assert replies == [[b"k1", 1], [b"k0", 2], [b"k1", 4], [b"k0", 6], [b"k1", 9], [b"k0", 12]]
    after = runtime.compiled.cache_info()
    # Each call runs the script and fakeredis's clean-up chunk: both compiled on the first.
    assert (after.misses - before.misses, after.hits - before.hits) == (2, 10)
    assert await client.eval(COUNTER, 1, "k1", 1) == [b"k1", 10]  # EVAL shares the compiled one
    assert runtime.compiled.cache_info().misses == after.misses
    await client.aclose()


REPLIES = {
    "tables": b"return {1, {2, 'three'}, KEYS[1]}",
    "nil and false": b"return {nil, false, 1}",
    "status reply": b"return redis.status_reply('FINE')",
    "pcall": b"return redis.pcall('NO_SUCH_COMMAND')['err'] ~= nil and 1 or 0",
    "a chunk's local table": b"local t = {} t[#t + 1] = ARGV[1] return #t",
}


@pytest.fixture
async def stock_and_compiling() -> AsyncIterator[tuple[FakeAsyncRedis, FakeAsyncRedis]]:
    """A client of a stock fakeredis server, and one of a server that compiles once."""
    compiling_server = fakeredis.FakeServer()
    assert compile_scripts_once(compiling_server) is not None
    clients = (
        FakeAsyncRedis(server=fakeredis.FakeServer()),
        FakeAsyncRedis(server=compiling_server),
    )
    yield clients
    for client in clients:
        await client.aclose()


async def replies_of(client: FakeAsyncRedis, script: bytes) -> list[object]:
    return [await client.eval(script, 1, "key", str(i)) for i in range(3)]


@pytest.mark.parametrize("script", REPLIES.values(), ids=REPLIES.keys())
async def test_a_script_replies_as_it_does_in_fakeredis(
    script: bytes, stock_and_compiling: tuple[FakeAsyncRedis, FakeAsyncRedis]
) -> None:
    stock, compiling = stock_and_compiling
    assert await replies_of(compiling, script) == await replies_of(stock, script)


BROKEN = {
    "runtime error": b"return redis.call('NO_SUCH_COMMAND')",
    "syntax error": b"return +",
    "a global set": b"leaked = 1 return 1",
    "error_reply": b"return redis.error_reply('MY failure')",
    "a wrong type": b"redis.call('SET', KEYS[1], 'x') return redis.call('LPUSH', KEYS[1], 'y')",
}


@pytest.mark.parametrize("script", BROKEN.values(), ids=BROKEN.keys())
async def test_a_failing_script_fails_as_it_does_in_fakeredis(
    script: bytes, stock_and_compiling: tuple[FakeAsyncRedis, FakeAsyncRedis]
) -> None:
    errors = []
    for client in stock_and_compiling:
        for _ in range(2):  # the second time from the cache, where there is one
            with pytest.raises(Exception) as raised:
                await client.eval(script, 1, "key")
            errors.append((type(raised.value), str(raised.value)))
    assert len(set(errors)) == 1, errors


async def test_the_compiled_scripts_kept_are_bounded() -> None:
    server = fakeredis.FakeServer()
    runtime = compile_scripts_once(server)
    assert runtime is not None
    client = fakeredis.FakeAsyncRedis(server=server)
    for i in range(COMPILED_SCRIPTS_KEPT + 20):
        assert await client.eval(f"return {i}", 0) == i
    assert runtime.compiled.cache_info().currsize == COMPILED_SCRIPTS_KEPT
    await client.aclose()


def no_lua(self: fakeredis.FakeRedis, *args: object) -> object:
    raise RuntimeError("no Lua here")


def lua_kept_elsewhere(self: fakeredis.FakeRedis, *args: object) -> object:
    return None  # runs nothing, so no runtime where compile_scripts_once looks


@pytest.mark.parametrize("eval_", [no_lua, lua_kept_elsewhere], ids=["no Lua", "elsewhere"])
async def test_a_server_that_cannot_be_wrapped_still_serves(
    eval_: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fakeredis.FakeRedis, "eval", eval_)
    server = fakeredis.FakeServer()
    assert compile_scripts_once(server) is None
    assert "embedded Redis scripts will compile on every call" in caplog.text
    client = fakeredis.FakeAsyncRedis(server=server)
    await client.set("key", "value")
    assert await client.get("key") == b"value"
    await client.aclose()
