"""`GET /health` over real HTTP: 200 on both backends; 503 naming what fails when Redis stops
(a throwaway redis-server of this test), when the database cannot be reached, and — within
the health timeout — when a dependency accepts connections but never answers."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from api.rest import borrowed_runtime, create_app
from engine.runtime import Runtime
from engine.settings import Settings
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import settings_for

UNREACHABLE_PG = "postgresql+asyncpg://postgres@127.0.0.1:1/none"
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"


@contextlib.asynccontextmanager
async def api_on(settings: Settings, *, migrate: bool = False) -> AsyncIterator[str]:
    runtime = await Runtime.open(settings, migrate=migrate)
    try:
        app = create_app(settings, runtime_factory=borrowed_runtime(runtime))
        async with serving(app) as url:
            yield url
    finally:
        await runtime.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test alone, on a free port."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


@contextlib.asynccontextmanager
async def silent_listener() -> AsyncIterator[int]:
    """A port that accepts connections and never answers (a hung server)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_healthy_is_200_ok(backend: Backend) -> None:
    """`GET /health`, and `HEAD /health` as uptime monitors probe it: the same status."""
    async with api_on(settings_for(backend), migrate=True) as url, client(url) as http:
        answer = await http.get("/health")
        head = await http.head("/health")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    assert head.status_code == 200 and head.content == b""


async def test_stopped_redis_is_503_naming_redis(tmp_path: Path) -> None:
    with throwaway_redis(tmp_path) as (redis_url, redis_server):
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}",
            redis_url=redis_url,
            health_timeout_s=1.0,
        )
        async with api_on(settings, migrate=True) as url, client(url) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            redis_server.terminate()
            await asyncio.to_thread(redis_server.wait, 10)
            began = time.monotonic()
            answer = await http.get("/health")
            elapsed = time.monotonic() - began
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "failing": ["redis"]}
    # The probe's 1 s bound, with a stalled host's margin (a wall-clock bound measures the
    # host too): a probe that waited for the dead server would not answer at all.
    assert elapsed < 30.0


async def test_unreachable_database_is_503_naming_the_database() -> None:
    settings = Settings(database_url=UNREACHABLE_PG, health_timeout_s=1.0)
    async with api_on(settings) as url, client(url) as http:
        answer = await http.get("/health")
        head = await http.head("/health")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "failing": ["database"]}
    assert head.status_code == 503


async def test_both_down_names_both() -> None:
    settings = Settings(
        database_url=UNREACHABLE_PG, redis_url=UNREACHABLE_REDIS, health_timeout_s=1.0
    )
    async with api_on(settings) as url, client(url) as http:
        answer = await http.get("/health")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "failing": ["database", "redis"]}


async def test_hung_dependencies_answer_within_the_health_timeout() -> None:
    async with silent_listener() as port:
        settings = Settings(
            database_url=f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none",
            redis_url=f"redis://127.0.0.1:{port}/0",
            health_timeout_s=0.5,
        )
        async with api_on(settings) as url, client(url) as http:
            began = time.monotonic()
            answer = await http.get("/health")
            elapsed = time.monotonic() - began
            stopping = time.monotonic()
        stopped_s = time.monotonic() - stopping
    assert answer.status_code == 503
    assert answer.json()["failing"] == ["database", "redis"]
    # Both are probed at once, each within 0.5 s; the bound leaves a stalled host its margin
    # and still fails a probe that waits for the listener (asyncpg's connect waits 60 s).
    assert elapsed < 30.0
    # And the API stops without waiting out its background reads of the hung database (the
    # connect's own timeout is 60 s).
    assert stopped_s < 20, stopped_s
