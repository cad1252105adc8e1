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
from sqlalchemy.engine import make_url

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
    assert refused.code == "store_unavailable" and "createdb" not in str(refused)


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
