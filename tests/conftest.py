"""Shared fixtures: both backends for every engine test (docs/architecture.md, 'Testing').

`backend` parametrizes a test over the embedded pair (SQLite + fakeredis) and the server pair
(PostgreSQL + Redis). In CI (`CI=true`) a missing service is a failure; on a developer machine
without it the server case is skipped with the reason.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio
from hypothesis import settings

from api.cli import log_setup
from demo.downstream import RunningDownstream, start_downstream
from vertices.egress import ALLOW_ENV, LOOPBACK_ALLOW

# Every downstream of this suite listens on loopback, which the egress policy refuses by
# default: admit it once for the whole session, here (not per test) so that every Settings a
# test builds and every process it starts inherits it. The egress tests set their own policy.
os.environ[ALLOW_ENV] = LOOPBACK_ALLOW

# Property tests assert properties, never timings: Hypothesis's default 200 ms deadline per
# example failed a parsing test once on a machine busy with other suites.
settings.register_profile("schemabridge", deadline=None)
settings.load_profile("schemabridge")


@pytest.fixture(autouse=True)
def _process_logging_put_back() -> Iterator[None]:
    """A test that runs a command in this process sets the process's logging up
    (`log_setup.configure`: a root handler whose outage filter turns a database error into
    one WARNING, library levels, the access log's handler). Take that down after the test,
    or a later test of the same process sees its records rewritten: a `caplog` at ERROR then
    caught nothing (`test_audit`'s breaker reset, after `tests/unit` in one process)."""
    touched = [logging.getLogger(), *map(logging.getLogger, log_setup.QUIET_LOGGERS)]
    access = logging.getLogger(log_setup.ACCESS_LOGGER)
    levels = [(logger, logger.level) for logger in (*touched, access)]
    access_state = (access.propagate, list(access.handlers))
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        # pytest's own capture handlers come and go around each phase: leave those.
        if type(handler).__module__ == log_setup.__name__:
            root.removeHandler(handler)
    for logger, level in levels:
        logger.setLevel(level)
    access.propagate, access.handlers[:] = access_state[0], access_state[1]


PG_ADMIN_DSN = os.environ.get(
    "SCHEMABRIDGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _redis_test_url() -> str:
    """The Redis database of this test process: `SCHEMABRIDGE_TEST_REDIS` (default db 15), or
    under pytest-xdist one database below it per worker (gw0: 15, gw1: 14, …), so parallel
    workers never flush each other's state."""
    base = os.environ.get("SCHEMABRIDGE_TEST_REDIS", "redis://127.0.0.1:6379/15")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return base
    prefix, _, db = base.rpartition("/")
    index = int(worker.removeprefix("gw"))
    if not db.isdigit() or int(db) - index < 0:
        raise RuntimeError(f"cannot give xdist worker {worker} a Redis database below {base}")
    return f"{prefix}/{int(db) - index}"


REDIS_TEST_URL = _redis_test_url()
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Fail in CI, skip elsewhere, when a service a test needs is not reachable."""
    if _port_open(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (.ci/run starts it)")
    pytest.skip(f"{message}; start it to run this test")


@dataclass(frozen=True)
class Backend:
    """Where a test's store and coordination state live."""

    name: str
    database_url: str
    redis_url: str | None
    """None = embedded fakeredis."""


async def _create_pg_database() -> str:
    import asyncpg  # local: only the server backend needs it

    name = f"sb_test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def _drop_pg_database(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real Redis (database 15), flushed before and after the test."""
    require_service("Redis", "127.0.0.1", 6379)
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    yield REDIS_TEST_URL
    client.flushdb()
    client.close()


@pytest.fixture
async def pg_database_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for this test, dropped afterwards."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    name = await _create_pg_database()
    yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    await _drop_pg_database(name)


def _flush_embedded_redis() -> None:
    """The embedded server is shared by the whole process (as `serve` needs); empty it so an
    embedded test starts as clean as a server test does on its flushed Redis database."""
    import fakeredis

    from engine.coordination.redis_client import embedded_server

    fakeredis.FakeRedis(server=embedded_server()).flushall()


@pytest.fixture(params=["embedded", "server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every engine test runs on SQLite + fakeredis and on PostgreSQL + Redis."""
    if request.param == "embedded":
        _flush_embedded_redis()
        return Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    pg_url = request.getfixturevalue("pg_database_url")
    r_url = request.getfixturevalue("redis_url")
    return Backend("server", pg_url, r_url)


@pytest.fixture
async def downstream() -> AsyncIterator[RunningDownstream]:
    """The shipped demo downstream on 127.0.0.1 (a free port), for the test's duration."""
    server = await start_downstream()
    yield server
    await server.stop()


Connect = Callable[[], "redis.asyncio.Redis"]


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
async def connect(request: pytest.FixtureRequest) -> AsyncIterator[Connect]:
    """Opens clients on one shared store (a new client = another process's view of it):
    the embedded fakeredis, then a real Redis."""
    import fakeredis
    from redis.asyncio import Redis

    from engine.coordination.embedded_scripts import compile_scripts_once

    clients: list[Redis] = []
    server = fakeredis.FakeServer()
    compile_scripts_once(server)  # as the embedded server runs scripts
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None

    def open_client() -> Redis:
        client = Redis.from_url(url) if url else fakeredis.FakeAsyncRedis(server=server)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.aclose()
