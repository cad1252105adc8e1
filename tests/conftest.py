"""Shared fixtures: both backends for every engine test (docs/architecture.md, 'Testing').

`backend` parametrizes a test over the embedded pair (SQLite + fakeredis) and the server pair
(PostgreSQL + Redis). In CI (`CI=true`) a missing service is a failure; on a developer machine
without it the server case is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
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

# Prints the slowest test files and each xdist worker's total after the run.
pytest_plugins = ["tests.file_times"]


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
    # `configure` routes Python's warnings into the log; give them back to pytest (a later
    # `configure` installs the routing only when none is installed).
    logging.captureWarnings(False)


PRODUCT_IDLE_BOUND = "product_idle_bound"
"""The mark of a test that needs the product's bound on idle transactions
(`engine.store.db.IDLE_IN_TRANSACTION_TIMEOUT_MS`, 10 s) in this process."""

PATIENT_IDLE_BOUND_MS = 120_000


@pytest.fixture(autouse=True)
def _patient_idle_transactions(request: pytest.FixtureRequest) -> Iterator[None]:
    """This process's PostgreSQL sessions are ended after 120 s idle in a transaction, not
    the product's 10 s: a loaded CI host has stalled a test process 12-15 s between two
    statements of one transaction (a workflow's publish was ended half-way). The product's
    bound is tested where it is the subject (`PRODUCT_IDLE_BOUND`, and the tests that set
    their own); the `schemabridge` processes a test starts keep it."""
    if request.node.get_closest_marker(PRODUCT_IDLE_BOUND) is not None:
        yield
        return
    from engine.store import db

    product = db.IDLE_IN_TRANSACTION_TIMEOUT_MS
    db.IDLE_IN_TRANSACTION_TIMEOUT_MS = PATIENT_IDLE_BOUND_MS
    try:
        yield
    finally:
        db.IDLE_IN_TRANSACTION_TIMEOUT_MS = product


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


def _run_apart(coroutine: Coroutine[None, None, object]) -> None:
    """Run `coroutine` to its end on a loop of its own, in a thread: session fixtures are set
    up and torn down outside a test's loop, sometimes while one runs."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    if thread.is_alive():
        raise RuntimeError("a test database took over 120 s to set up or drop")
    if failure:
        raise failure[0]


async def _migrate(database_url: str) -> None:
    from engine.store import db

    engines = db.create_engines(database_url)
    try:
        await db.upgrade(engines)
    finally:
        await engines.dispose()


_SCHEMA_FINGERPRINT = """
    SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
        SELECT c.relname || ':' || c.relkind::text || ':' || coalesce(pg_get_indexdef(c.oid), '')
            AS item
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public'
        UNION ALL
        SELECT table_name || '.' || column_name || ':' || data_type || ':'
            || coalesce(column_default, '') || ':' || is_nullable
        FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL
        SELECT 'revision:' || version_num FROM alembic_version
    ) AS schema_items
"""
"""A digest of a database's tables, indexes, columns and revision: a database goes back to
the pool only when a test left its schema as the migrations made it."""


@dataclass
class _MigratedPgPool:
    """This test process's migrated PostgreSQL databases, emptied after each test and used
    again. Creating, migrating and dropping a database cost ~1.3 s of a loaded machine per
    server test (DROP DATABASE waits for a checkpoint); emptying one costs one TRUNCATE."""

    free: list[str]
    every: list[str]
    fingerprint: str | None = None

    async def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = await _create_pg_database()
        self.every.append(name)
        await _migrate(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}")
        if self.fingerprint is None:
            self.fingerprint = await self._emptied(name)
        return name

    async def give_back(self, name: str) -> None:
        """Empty `name` for the next test, or drop it when its schema was changed."""
        if await self._emptied(name) == self.fingerprint:
            self.free.append(name)
        else:
            self.every.remove(name)
            await _drop_pg_database(name)

    async def _emptied(self, name: str) -> str:
        import asyncpg

        conn = await asyncpg.connect(PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}")
        try:
            # Connections a test left behind (a killed process's, a runtime not closed) would
            # hold the locks TRUNCATE needs, or write after it.
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            tables = await conn.fetch(
                "SELECT quote_ident(tablename) AS t FROM pg_tables"
                " WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
            if tables:
                listed = ", ".join(row["t"] for row in tables)
                await conn.execute(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")
            return str(await conn.fetchval(_SCHEMA_FINGERPRINT))
        finally:
            await conn.close()


@pytest.fixture(scope="session")
def _migrated_pg_pool() -> Iterator[_MigratedPgPool]:
    pool = _MigratedPgPool(free=[], every=[])
    yield pool

    async def drop_every() -> None:
        for name in pool.every:
            await _drop_pg_database(name)

    if pool.every:
        _run_apart(drop_every())


@pytest.fixture
async def migrated_pg_database_url(
    _migrated_pg_pool: _MigratedPgPool,
) -> AsyncIterator[str]:
    """A PostgreSQL database at the migrations' head with every table empty, for this test:
    taken from this process's pool and emptied after it (`pg_database_url` is a new, never
    migrated one)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    name = await _migrated_pg_pool.take()
    yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    await _migrated_pg_pool.give_back(name)


@pytest.fixture(scope="session")
def _migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the migrations' head, made once per test process and copied for each
    embedded test (a copy costs a millisecond, migrating a new file ~0.1-0.2 s)."""
    path = tmp_path_factory.mktemp("migrated") / "sb.db"
    _run_apart(_migrate(f"sqlite+aiosqlite:///{path}"))
    # The engine's connections are closed: SQLite has folded its write-ahead log into the file.
    assert not path.with_name("sb.db-wal").exists(), "the migrated file kept its WAL"
    return path


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


BLANK_DATABASE = "blank_database"
"""The mark of a test (or module: `pytestmark`) whose `backend` databases no migration has
touched: tests of migrations and of what opens a database."""


@pytest.fixture(params=["embedded", "server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every engine test runs on SQLite + fakeredis and on PostgreSQL + Redis, each with its
    schema at the migrations' head and no rows (never migrated under `BLANK_DATABASE`)."""
    blank = request.node.get_closest_marker(BLANK_DATABASE) is not None
    if request.param == "embedded":
        _flush_embedded_redis()
        database = tmp_path / "sb.db"
        if not blank:
            shutil.copyfile(request.getfixturevalue("_migrated_sqlite_file"), database)
        return Backend("embedded", f"sqlite+aiosqlite:///{database}", None)
    pg_url = request.getfixturevalue("pg_database_url" if blank else "migrated_pg_database_url")
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
