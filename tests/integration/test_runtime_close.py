"""Closing a runtime leaves nothing of the database open, on every path that can fail: an
unreachable database, a migration that fails while the runtime opens, a store call cancelled
while it waits for a lock, a failed `db upgrade`.

On SQLite "open" means an aiosqlite worker thread: one still running when its event loop closes
reports to the closed loop and dies with "Event loop is closed" in whatever runs next. On
PostgreSQL it means a session of the test's database still connected.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from engine.operations import Operations
from engine.operations.schema import upgrade_database
from engine.runtime import Runtime
from schemas.errors import Unavailable
from tests.conftest import PG_ADMIN_DSN, Backend
from tests.integration.engine_harness import settings_for

# Never migrated: these tests fail migrations and open databases that have none.
pytestmark = pytest.mark.blank_database

WAIT_TIMEOUT_S = 10.0
UNREACHABLE_TRIES = 10
"""Each try left a worker thread running after `Runtime.close` about 6 times in 10 before the
fix (a 2-core machine under load)."""
WORKFLOW = {
    "name": "one",
    "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1"}}},
}

LeftOpen = Callable[[], Awaitable[int]]


def sqlite_workers() -> set[threading.Thread]:
    return {
        thread
        for thread in threading.enumerate()
        if thread.name.endswith("(_connection_worker_thread)")
    }


def database_name(backend: Backend) -> str:
    name = make_url(backend.database_url).database
    assert name is not None
    return name


@pytest.fixture
async def left_open(backend: Backend) -> AsyncIterator[LeftOpen]:
    """Counts what this test left open of its database: aiosqlite worker threads started during
    the test, or PostgreSQL sessions of the test's database."""
    if backend.name == "embedded":
        before = sqlite_workers()

        async def threads() -> int:
            return len(sqlite_workers() - before)

        yield threads
        return
    admin = await asyncpg.connect(PG_ADMIN_DSN)

    async def sessions() -> int:
        count: int = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database_name(backend)
        )
        return count

    try:
        yield sessions
    finally:
        await admin.close()


def unreachable_url(backend: Backend, tmp_path: Path) -> str:
    if backend.name == "embedded":
        return f"sqlite+aiosqlite:///{tmp_path}/missing/dir/sb.db"
    return "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere"  # nothing listens there


def missing_database_url(backend: Backend, tmp_path: Path) -> str:
    if backend.name == "embedded":
        return unreachable_url(backend, tmp_path)
    # A server that answers, then refuses: the database does not exist.
    return backend.database_url + "_missing"


async def add_conflicting_table(backend: Backend) -> None:
    """A table the first migration creates, already there: the migration fails half-way, on a
    connection it has opened."""
    ddl = "CREATE TABLE workflow_version (unrelated INTEGER)"
    if backend.name == "embedded":
        path = make_url(backend.database_url).database
        assert path is not None
        with sqlite3.connect(path) as conn:
            conn.execute(ddl)
        return
    conn = await asyncpg.connect(PG_ADMIN_DSN, database=database_name(backend))
    try:
        await conn.execute(ddl)
    finally:
        await conn.close()


async def test_an_unreachable_database_leaves_nothing_behind_its_event_loop(
    backend: Backend, tmp_path: Path, left_open: LeftOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    settings = settings_for(backend, database_url=unreachable_url(backend, tmp_path))
    before = sqlite_workers()

    async def use_and_close() -> set[threading.Thread]:
        runtime = await Runtime.open(settings, migrate=False)
        try:
            ops = Operations(runtime)
            assert (await ops.health.check()).failing == ["database"]
            for _ in range(2):
                with pytest.raises(Unavailable):
                    await ops.workflows.list()
        finally:
            await runtime.close()
        return sqlite_workers() - before

    for _ in range(UNREACHABLE_TRIES):
        # In an event loop of its own, closed as soon as the runtime is, as a CLI command's
        # (or a test's) is: a worker thread left running would report to the closed loop.
        assert await asyncio.to_thread(asyncio.run, use_and_close()) == set()
        async with asyncio.timeout(WAIT_TIMEOUT_S):
            while await left_open():
                await asyncio.sleep(0.01)
        assert raised == []


async def test_a_migration_failing_while_the_runtime_opens_leaves_nothing_open(
    backend: Backend, left_open: LeftOpen
) -> None:
    await add_conflicting_table(backend)
    with pytest.raises(DBAPIError, match="workflow_version"):
        await Runtime.open(settings_for(backend), migrate=True)
    assert await left_open() == 0


async def test_a_failed_schema_upgrade_leaves_nothing_open(
    backend: Backend, tmp_path: Path, left_open: LeftOpen
) -> None:
    with pytest.raises(DBAPIError):
        await upgrade_database(missing_database_url(backend, tmp_path))
    await add_conflicting_table(backend)
    with pytest.raises(DBAPIError, match="workflow_version"):
        await upgrade_database(backend.database_url)
    assert await left_open() == 0


class WriteLock:
    """Holds the database's write lock from outside SchemaBridge (another process would)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._sqlite: sqlite3.Connection | None = None
        self._pg: asyncpg.Connection | None = None

    async def take(self) -> None:
        if self._backend.name == "embedded":
            path = make_url(self._backend.database_url).database
            assert path is not None
            self._sqlite = sqlite3.connect(path, isolation_level=None)
            self._sqlite.execute("BEGIN IMMEDIATE")
            return
        self._pg = await asyncpg.connect(PG_ADMIN_DSN, database=database_name(self._backend))
        await self._pg.execute("BEGIN; LOCK TABLE workflow_version IN ACCESS EXCLUSIVE MODE")

    async def release(self) -> None:
        if self._sqlite is not None:
            self._sqlite.execute("ROLLBACK")
            self._sqlite.close()
        if self._pg is not None:
            await self._pg.execute("ROLLBACK")
            await self._pg.close()


async def waiting_on_the_lock(backend: Backend, before: set[threading.Thread]) -> bool:
    if backend.name == "embedded":
        # Its connection is open(ing): from then on the worker thread has something pending.
        return bool(sqlite_workers() - before)
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        waiting: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
            database_name(backend),
        )
    finally:
        await conn.close()
    return waiting > 0


async def test_a_store_call_cancelled_while_it_waits_leaves_nothing_open(
    backend: Backend, left_open: LeftOpen
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    await runtime.close()  # migrated; the call below opens the first connection of its own
    runtime = await Runtime.open(settings_for(backend), migrate=False)
    lock = WriteLock(backend)
    await lock.take()
    try:
        before = sqlite_workers()
        publish = asyncio.create_task(Operations(runtime).workflows.publish(WORKFLOW))
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while not await waiting_on_the_lock(backend, before):
            assert time.monotonic() < deadline, "the publish never reached the lock"
            assert not publish.done(), "the publish got past a lock held by someone else"
            await asyncio.sleep(0.01)
        publish.cancel()
    finally:
        await lock.release()
    try:
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(WAIT_TIMEOUT_S):
                await publish
    finally:
        await runtime.close()
    assert await left_open() == 0
