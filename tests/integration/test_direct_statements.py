"""Statements on asyncpg itself (`engine.store.direct`): the same results and the same
SQLAlchemy exceptions as through SQLAlchemy, so the store and the operations boundary treat
them alike. PostgreSQL only: SQLite has no such path."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Integer, bindparam, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from engine.store import db
from engine.store.direct import DirectStatements
from engine.store.unreachable import store_unreachable

INSERT = text("INSERT INTO tenant_quota (tenant_id, max_runs, used_runs) VALUES (:t, :m, 0)")
COUNT = text("SELECT count(*) FROM tenant_quota WHERE max_runs >= :m").bindparams(
    bindparam("m", type_=Integer)
)


@pytest.fixture
async def engines(pg_database_url: str) -> AsyncIterator[db.Engines]:
    engines = db.create_engines(pg_database_url)
    await db.upgrade(engines)
    yield engines
    await engines.dispose()


def _direct(engines: db.Engines) -> DirectStatements:
    assert engines.direct is not None
    return engines.direct


async def test_a_statement_runs_and_its_value_comes_back(engines: db.Engines) -> None:
    direct = _direct(engines)
    await direct.fetchval(INSERT, {"t": "a", "m": 5})
    await direct.fetchval(INSERT, {"t": "b", "m": 1})
    assert await direct.fetchval(COUNT, {"m": 2}) == 1
    async with engines.read.connect() as conn:  # committed: another connection sees it
        assert (await conn.execute(text("SELECT count(*) FROM tenant_quota"))).scalar() == 2


async def test_a_taken_key_is_an_integrity_error(engines: db.Engines) -> None:
    direct = _direct(engines)
    await direct.fetchval(INSERT, {"t": "a", "m": 5})
    with pytest.raises(IntegrityError):
        await direct.fetchval(INSERT, {"t": "a", "m": 6})


async def test_a_refused_statement_is_a_dbapi_error_not_unreachable(
    engines: db.Engines,
) -> None:
    with pytest.raises(DBAPIError) as raised:
        await _direct(engines).fetchval(text("SELECT 1 / 0"), {})
    assert not store_unreachable(raised.value)


async def test_an_unreachable_database_is_unreachable(pg_database_url: str) -> None:
    """Refused at checkout, as any statement of the pool is (SQLAlchemy lets the driver's
    OSError through): what the boundary answers 503 for."""
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engines = db.create_engines(pg_database_url.replace(":5432/", f":{port}/"))
    try:
        with pytest.raises((OperationalError, OSError)) as raised:
            await _direct(engines).fetchval(COUNT, {"m": 1})
        assert store_unreachable(raised.value)
    finally:
        await engines.dispose()


async def test_a_connection_the_server_ends_is_unreachable_then_replaced(
    engines: db.Engines,
) -> None:
    """A statement whose connection the server ends (as a restart does) raises an error the
    boundary reads as "cannot serve now"; the next statement gets a new connection."""
    direct = _direct(engines)
    sleeping = asyncio.create_task(direct.fetchval(text("SELECT pg_sleep(30)"), {}))
    find = text(
        "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
        "AND datname = current_database()"
    )
    async with engines.read.connect() as conn:
        for _ in range(200):  # at most 10 s for the statement to start
            pid = (await conn.execute(find)).scalar()
            if pid is not None:
                break
            await asyncio.sleep(0.05)
        assert pid is not None
        await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    with pytest.raises(DBAPIError) as raised:
        await asyncio.wait_for(sleeping, 10)
    assert store_unreachable(raised.value)
    assert await direct.fetchval(COUNT, {"m": 1}) == 0


async def test_the_urls_driver_options_hold_for_direct_statements(pg_database_url: str) -> None:
    """Direct statements use the pool's connections, set up from the URL as every other:
    an option only SQLAlchemy's dialect understands (PgBouncer's usual setting) works too."""
    engines = db.create_engines(pg_database_url + "?prepared_statement_cache_size=0")
    try:
        await db.upgrade(engines)
        assert await _direct(engines).fetchval(COUNT, {"m": 1}) == 0
    finally:
        await engines.dispose()
