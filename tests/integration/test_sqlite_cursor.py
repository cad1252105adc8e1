"""The store's SQLite cursor: one hop to the connection's thread per statement, and every
answer what aiosqlite's own cursor gives (rows, fetches, row counts, last row ids, errors).

The reference is SQLAlchemy's stock aiosqlite engine on a file of its own: each check runs the
same statements on both and compares what they return.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, InvalidRequestError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from engine.store.db import create_engines

SCHEMA = "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, n INTEGER)"
ROWS = 25

Check = Callable[[AsyncConnection], Awaitable[Any]]


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """(the store's write engine, SQLAlchemy's stock aiosqlite engine), each on its own file
    holding table `t` with ROWS rows."""
    store = create_engines(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    stock = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'stock.db'}")
    for engine in (store.write, stock):
        async with engine.begin() as conn:
            await conn.execute(text(SCHEMA))
            await conn.execute(
                text("INSERT INTO t (name, n) VALUES (:name, :n)"),
                [{"name": f"r{i}", "n": i % 4} for i in range(ROWS)],
            )
    yield store.write, stock
    await stock.dispose()
    await store.dispose()


async def both(engines: tuple[AsyncEngine, AsyncEngine], check: Check) -> Any:
    """`check` in a transaction on each engine; asserts they answer alike, returns the answer."""
    answers = []
    for engine in engines:
        async with engine.begin() as conn:
            answers.append(await check(conn))
    assert answers[0] == answers[1]
    return answers[0]


async def test_rows_and_fetches_are_the_stock_cursors(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    async def fetches(conn: AsyncConnection) -> Any:
        result = await conn.execute(text("SELECT id, name, n FROM t ORDER BY id"))
        first = result.fetchone()
        some = result.fetchmany(3)
        rest = result.fetchall()
        after = result.fetchone()
        return first, some, rest, after

    first, some, rest, after = await both(engines, fetches)
    assert first == (1, "r0", 0)
    assert [row.id for row in some] == [2, 3, 4]
    assert len(rest) == ROWS - 4
    assert after is None


async def test_no_rows_and_empty_results(engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    async def empty(conn: AsyncConnection) -> Any:
        none = (await conn.execute(text("SELECT id FROM t WHERE n = 99"))).all()
        first = (await conn.execute(text("SELECT id FROM t WHERE n = 99"))).first()
        return none, first

    assert await both(engines, empty) == ([], None)


async def test_row_counts_and_returning(engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    async def counts(conn: AsyncConnection) -> Any:
        updated = (await conn.execute(text("UPDATE t SET n = n + 10 WHERE n = 1"))).rowcount
        returning = await conn.execute(text("UPDATE t SET n = 0 WHERE n = 11 RETURNING id"))
        ids = sorted(row.id for row in returning)
        deleted = (await conn.execute(text("DELETE FROM t WHERE n = 3"))).rowcount
        return updated, ids, returning.rowcount, deleted

    updated, ids, returned, deleted = await both(engines, counts)
    ones = [i + 1 for i in range(ROWS) if i % 4 == 1]
    assert (updated, ids, returned) == (len(ones), ones, len(ones))
    assert deleted == len([i for i in range(ROWS) if i % 4 == 3])


async def test_inserted_ids_and_many_rows(engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    async def inserts(conn: AsyncConnection) -> Any:
        one = await conn.execute(text("INSERT INTO t (name, n) VALUES ('new', 7)"))
        many = await conn.execute(
            text("INSERT INTO t (name, n) VALUES (:name, 8)"), [{"name": f"m{i}"} for i in range(5)]
        )
        count = (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one()
        return one.lastrowid, many.rowcount, count

    assert await both(engines, inserts) == (ROWS + 1, 5, ROWS + 6)


async def test_errors_are_the_stock_cursors_and_leave_the_connection_usable(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    for engine in engines:
        with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: t\.name"):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t (name) VALUES ('new')"))
                await conn.execute(text("INSERT INTO t (name) VALUES ('new')"))
        with pytest.raises(OperationalError, match="no such column: nope"):
            async with engine.begin() as conn:
                await conn.execute(text("SELECT nope FROM t"))
        async with engine.connect() as conn:
            # The failed transaction left nothing behind, and the connection still answers.
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == ROWS


async def test_streaming_a_result_is_refused_not_buffered_whole(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """The store's cursor reads every row in its one hop: a stream would hold them all."""
    store, _ = engines
    async with store.connect() as conn:
        with pytest.raises(InvalidRequestError, match="server side cursors"):
            await conn.stream(text("SELECT id FROM t"))
        # The connection is untouched by the refusal.
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == ROWS


async def test_each_statement_is_one_hop_to_the_thread(
    engines: tuple[AsyncEngine, AsyncEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hops = 0
    # aiosqlite's queue to the thread (untyped): every hop goes through it.
    queue: Callable[..., Awaitable[Any]] = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await queue(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)

    async def hops_of(engine: AsyncEngine, statements: int) -> int:
        nonlocal hops
        hops = 0
        async with engine.begin() as conn:
            for _ in range(statements):
                (await conn.execute(text("SELECT id FROM t WHERE n = 2"))).all()
        return hops

    store, stock = engines
    # The transaction's own hops (BEGIN, COMMIT, the pool's reset) cancel out.
    assert await hops_of(store, 5) - await hops_of(store, 1) == 4
    # aiosqlite's cursor: open, execute, fetch (a statement with rows), close. (Were this ever
    # one, the store's cursor would have no reason to exist.)
    assert await hops_of(stock, 5) - await hops_of(stock, 1) == 4 * 4
