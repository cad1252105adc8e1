"""libpq's query parameters on the real PostgreSQL: what a URL's `application_name`,
`options` and `connect_timeout` become reaches the server (or bounds the connect), and
`open_runtime` tells a missing database, a missing role and a missing root certificate
apart."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url

from engine.operations.startup import StartupRefused, open_runtime
from engine.settings import Settings
from engine.store import db


def plain(pg_database_url: str, **query: str) -> str:
    """The test database as libpq writes its URL, with `query`."""
    url = make_url(pg_database_url).set(drivername="postgresql", query=query)
    return url.render_as_string(hide_password=False)


async def test_application_name_and_options_reach_the_server(pg_database_url: str) -> None:
    name = f"sb-test-{uuid.uuid4().hex[:8]}"
    url = plain(
        pg_database_url,
        application_name=name,
        options="-c statement_timeout=4321 --lock-timeout=1234",
        connect_timeout="10",
    )
    engines = db.create_engines(url)
    watcher = db.create_engines(pg_database_url)  # another connection, without the name
    try:
        async with engines.read.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            settings = (
                await conn.execute(
                    text(
                        "SELECT current_setting('statement_timeout'), "
                        "current_setting('lock_timeout')"
                    )
                )
            ).one()
            async with watcher.read.connect() as other:
                seen = (
                    await other.execute(
                        text("SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
                        {"name": name},
                    )
                ).scalars()
                assert list(seen) == [pid]
        assert tuple(settings) == ("4321ms", "1234ms")
    finally:
        await engines.dispose()
        await watcher.dispose()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    """A loopback server that accepts connections and never answers the startup message: its
    port, and the connections it accepted."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()
        for writer in accepted:
            writer.close()
            await writer.wait_closed()
        await server.wait_closed()


async def test_connect_timeout_bounds_a_connect_to_a_silent_server() -> None:
    async with silent_server() as (port, accepted):
        engines = db.create_engines(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=1")
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):  # asyncpg's default would wait 60 s
                async with engines.write.connect():
                    pass
            assert time.monotonic() - started < 10
        finally:
            await engines.dispose()
        assert accepted  # the connect reached the server: the timeout, not a refusal, ended it


async def test_a_server_that_never_answers_is_said_so_in_one_line() -> None:
    async with silent_server() as (port, _):
        refused = await refusal(f"postgresql://u:secret@127.0.0.1:{port}/db?connect_timeout=1")
    message = str(refused)
    assert refused.code == "store_unavailable"
    assert "did not answer in time" in message and "connect_timeout" in message, message
    assert "secret" not in message


async def refusal(url: str) -> StartupRefused:
    with pytest.raises(StartupRefused) as refused:
        await open_runtime(Settings(database_url=url), probe_redis=False)
    assert "\n" not in str(refused.value)
    return refused.value


async def test_only_a_missing_database_is_told_to_create_it(pg_database_url: str) -> None:
    missing = make_url(pg_database_url).set(database="schemabridge_no_such_database")
    refused = await refusal(missing.render_as_string(hide_password=False))
    assert refused.code == "database_missing" and "createdb" in str(refused)
    no_role = make_url(pg_database_url).set(username="schemabridge_no_such_role")
    refused = await refusal(no_role.render_as_string(hide_password=False))
    assert 'role "schemabridge_no_such_role" does not exist' in str(refused)
    # A login the server refused is a setting to fix, not a server to wait for.
    assert refused.code == "database_login_refused" and "createdb" not in str(refused)


async def test_verify_full_without_a_root_certificate_names_the_file(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    url = make_url(pg_database_url).set(password="secret", query={"sslmode": "verify-full"})
    refused = await refusal(url.render_as_string(hide_password=False))
    message = str(refused)
    assert refused.code == "database_certificate_missing"
    assert f"{tmp_path}/.postgresql/root.crt" in message and "createdb" not in message
    assert "sslmode=require" in message and "secret" not in message


@pytest.mark.product_idle_bound
async def test_every_connection_bounds_idle_transactions(pg_database_url: str) -> None:
    """A process frozen mid-transaction (SIGSTOP past its lease) must not hold its row locks
    until it wakes: its session is ended after `IDLE_IN_TRANSACTION_TIMEOUT_MS`. A URL that
    sets the parameter keeps its own value."""
    engines = db.create_engines(pg_database_url)
    own = db.create_engines(
        plain(pg_database_url, options="-c idle_in_transaction_session_timeout=4321")
    )
    try:
        show = text("SELECT current_setting('idle_in_transaction_session_timeout')")
        async with engines.read.connect() as conn:
            assert (await conn.execute(show)).scalar_one() == "10s"
        async with engines.write.begin() as conn:
            assert (await conn.execute(show)).scalar_one() == "10s"
        async with own.read.connect() as conn:
            assert (await conn.execute(show)).scalar_one() == "4321ms"
    finally:
        await engines.dispose()
        await own.dispose()


async def test_a_frozen_transaction_releases_its_locks(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection's write to the row a frozen transaction locked goes through once the
    idle timeout ends that session, not when (if ever) the frozen process wakes."""
    monkeypatch.setattr(db, "IDLE_IN_TRANSACTION_TIMEOUT_MS", 300)
    frozen = db.create_engines(pg_database_url)
    other = db.create_engines(pg_database_url)
    try:
        async with other.write.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id int PRIMARY KEY, n int)"))
            await conn.execute(text("INSERT INTO t VALUES (1, 0)"))
        held = await frozen.write.connect()
        await held.begin()
        await held.execute(text("UPDATE t SET n = n + 1 WHERE id = 1"))  # locks the row, idles
        started = time.monotonic()
        async with other.write.begin() as conn:
            update = conn.execute(text("UPDATE t SET n = n + 10 WHERE id = 1"))
            await asyncio.wait_for(update, timeout=15)
        assert time.monotonic() - started < 15
        with contextlib.suppress(Exception):
            await held.close()
        async with other.read.connect() as conn:
            assert (await conn.execute(text("SELECT n FROM t"))).scalar_one() == 10
    finally:
        await frozen.dispose()
        await other.dispose()


async def test_a_slow_migration_is_not_ended_as_an_idle_transaction(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migrating process starved of CPU between two statements looks idle in its transaction
    to the server; the bound on idle transactions must not end the migration half-way (CI
    met it on a loaded machine: 'terminating connection due to idle-in-transaction timeout'
    on a CREATE INDEX)."""
    monkeypatch.setattr(db, "IDLE_IN_TRANSACTION_TIMEOUT_MS", 100)
    upgrade_at_once = db._upgrade

    def upgrade_slowly(connection: Connection, revision: str) -> db.Migrated:
        time.sleep(0.5)  # the process stalls inside the migration's transaction
        return upgrade_at_once(connection, revision)

    monkeypatch.setattr(db, "_upgrade", upgrade_slowly)
    engines = db.create_engines(pg_database_url)
    try:
        migrated = await db.upgrade(engines)
        assert migrated.after == db.head_revision()
        assert await db.current_revision(engines) == db.head_revision()
    finally:
        await engines.dispose()
