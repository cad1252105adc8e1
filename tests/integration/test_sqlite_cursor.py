"""The store's SQLite cursor: one hop to the connection's thread per statement, and every
answer what aiosqlite's own cursor gives (rows, fetches, row counts, last row ids, errors).

The reference is SQLAlchemy's stock aiosqlite engine on a file of its own: each check runs the
same statements on both and compares what they return.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, InvalidRequestError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from engine.store.db import create_engines
from engine.store.sqlite_cursor import Statement, _commit

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


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function sent to a connection's thread, as it is sent."""
    sent: list[str] = []
    # aiosqlite's queue to the thread (untyped): every hop goes through it.
    queue: Callable[..., Awaitable[Any]] = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(fn, "__name__", repr(fn)))
        return await queue(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return sent


async def test_each_statement_is_one_hop_to_the_thread(
    engines: tuple[AsyncEngine, AsyncEngine], hops: list[str]
) -> None:
    async def hops_of(engine: AsyncEngine, statements: int) -> int:
        hops.clear()
        async with engine.begin() as conn:
            for _ in range(statements):
                (await conn.execute(text("SELECT id FROM t WHERE n = 2"))).all()
        return len(hops)

    store, stock = engines
    # The transaction's own hops (BEGIN, COMMIT, the pool's reset) cancel out.
    assert await hops_of(store, 5) - await hops_of(store, 1) == 4
    # aiosqlite's cursor: open, execute, fetch (a statement with rows), close. (Were this ever
    # one, the store's cursor would have no reason to exist.)
    assert await hops_of(stock, 5) - await hops_of(stock, 1) == 4 * 4


async def test_a_transaction_adds_one_hop_its_commit_or_rollback(
    tmp_path: Path, hops: list[str]
) -> None:
    """BEGIN rides with the first statement, and the pool's reset of a connection whose
    transaction has ended costs nothing (before: a hop for each, four in all)."""
    store = create_engines(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    try:
        async with store.write.begin() as conn:
            await conn.execute(text(SCHEMA))
        for engine in (store.write, store.read):
            async with engine.connect() as conn:  # opened (and set up) before counting
                await conn.execute(text("SELECT 1"))
            hops.clear()
            async with engine.begin() as conn:
                await conn.execute(text("SELECT count(*) FROM t"))
            assert hops == ["_run_all", "_commit"]
            hops.clear()
            async with engine.connect() as conn:  # ended by the pool's reset: a rollback
                await conn.execute(text("SELECT count(*) FROM t"))
            assert hops == ["_run_all", "_rollback"]
    finally:
        await store.dispose()


DEFER = {"deferred": True}


def deferred_note(error: IntegrityError, surfaced_at: str = "this one") -> str | None:
    """The deferred statement the driver's error names (`engine.store.sqlite_cursor._named`)."""
    prefix = f"raised by an earlier statement deferred to {surfaced_at}: "
    notes = getattr(error.orig, "__notes__", [])
    named = [note.removeprefix(prefix) for note in notes if note.startswith(prefix)]
    return named[0] if len(named) == 1 else None


async def test_deferred_statements_ride_with_the_commit(
    engines: tuple[AsyncEngine, AsyncEngine], hops: list[str]
) -> None:
    insert = text("INSERT INTO t (name, n) VALUES (:name, 9)")

    async def writes(conn: AsyncConnection) -> Any:
        await conn.execute(insert, {"name": "a"}, execution_options=DEFER)
        await conn.execute(insert, [{"name": "b"}, {"name": "c"}], execution_options=DEFER)
        await conn.execute(text("UPDATE t SET n = 10 WHERE name = 'a'"), execution_options=DEFER)

    store, stock = engines
    hops.clear()
    async with store.begin() as conn:
        await writes(conn)
    # The store's whole transaction, BEGIN IMMEDIATE to COMMIT, is one hop.
    assert hops == ["_commit"]
    async with stock.begin() as conn:
        await writes(conn)
    for engine in engines:
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT name, n FROM t WHERE n >= 9"))).all()
        assert sorted(rows) == [("a", 10), ("b", 9), ("c", 9)]


async def test_a_read_after_deferred_writes_sees_them_in_order(
    engines: tuple[AsyncEngine, AsyncEngine], hops: list[str]
) -> None:
    async def write_then_read(conn: AsyncConnection) -> Any:
        await conn.execute(text("UPDATE t SET n = 20 WHERE name = 'r0'"), execution_options=DEFER)
        await conn.execute(
            text("UPDATE t SET n = n + 1 WHERE name = 'r0'"), execution_options=DEFER
        )
        changed = await conn.execute(text("SELECT n FROM t WHERE name = 'r0'"))
        return changed.scalar_one()

    store, _ = engines
    hops.clear()
    async with store.begin() as conn:
        assert await write_then_read(conn) == 21
    assert hops == ["_run_all", "_commit"]  # both writes and the read: one hop
    assert await both(engines, write_then_read) == 21  # as the stock engine answers


async def test_a_rolled_back_transaction_drops_what_it_deferred(
    engines: tuple[AsyncEngine, AsyncEngine], hops: list[str]
) -> None:
    store, _ = engines
    hops.clear()
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with store.begin() as conn:
            await conn.execute(text("DELETE FROM t"), execution_options=DEFER)
            raise RuntimeError("changed my mind")
    assert hops == []  # nothing ever reached the thread, so nothing to roll back there
    async with store.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == ROWS


async def test_a_deferred_statements_error_surfaces_at_commit_and_undoes_the_transaction(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    for engine in engines:
        with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: t\.name") as failed:
            async with engine.begin() as conn:
                await conn.execute(text("DELETE FROM t WHERE n = 0"), execution_options=DEFER)
                await conn.execute(
                    text("INSERT INTO t (name) VALUES ('r1')"), execution_options=DEFER
                )
        if engine is engines[0]:
            # It surfaced at the COMMIT, which SQLAlchemy names no statement for; the driver's
            # error names the one that raised it.
            assert failed.value.statement is None
            assert deferred_note(failed.value, "the COMMIT") == "INSERT INTO t (name) VALUES ('r1')"
        async with engine.begin() as conn:
            # Nothing of the failed transaction stayed, and the connection writes again.
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == ROWS
            await conn.execute(text("INSERT INTO t (name) VALUES ('after')"))


async def test_a_deferral_mark_left_unused_defers_nothing_else(tmp_path: Path) -> None:
    """The mark names the statement it is for: one whose execute never arrived cannot make
    the next statement answer nothing."""
    store = create_engines(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    try:
        async with store.write.begin() as conn:
            await conn.execute(text(SCHEMA))
            await conn.execute(text("INSERT INTO t (name) VALUES ('x')"))
            raw = await conn.get_raw_connection()
            raw.driver_connection.hops.defer("DELETE FROM t")
            rows = (await conn.execute(text("SELECT name FROM t"))).all()
        assert rows == [("x",)]
    finally:
        await store.dispose()


async def test_a_savepoint_that_fails_is_rolled_back_whole(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """Inside a savepoint nothing is deferred: a failure surfaces at its own statement, so
    SQLAlchemy rolls the savepoint back (a deferred one would fail at RELEASE SAVEPOINT,
    after which SQLAlchemy emits no ROLLBACK TO, and the savepoint's other writes would
    be committed with the transaction)."""

    async def caught_in_a_savepoint(conn: AsyncConnection) -> Any:
        try:
            async with conn.begin_nested():
                await conn.execute(
                    text("INSERT INTO t (name) VALUES ('in-savepoint')"), execution_options=DEFER
                )
                await conn.execute(
                    text("INSERT INTO t (name) VALUES ('r1')"), execution_options=DEFER
                )
        except IntegrityError as exc:
            failed = exc.statement
        else:
            failed = None
        await conn.execute(text("INSERT INTO t (name) VALUES ('after')"), execution_options=DEFER)
        names = await conn.execute(text("SELECT name FROM t WHERE name NOT LIKE 'r%' ORDER BY 1"))
        return failed, names.scalars().all()

    failed, names = await both(engines, caught_in_a_savepoint)
    assert (failed, names) == ("INSERT INTO t (name) VALUES ('r1')", ["after"])


async def test_a_deferred_statements_error_caught_at_a_later_one_still_fails_the_commit(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    """The statement a deferred one's error surfaces at never ran: a caller that takes the
    error for that statement's own and goes on must not commit without both (a stock engine
    raises at the deferred statement itself, outside the caller's `try`)."""
    for engine in engines:
        with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: t\.name"):
            async with engine.begin() as conn:
                await conn.execute(
                    text("INSERT INTO t (name) VALUES ('r1')"), execution_options=DEFER
                )
                # Each taken for "mine was there already":
                try:
                    await conn.execute(text("INSERT INTO t (name) VALUES ('mine')"))
                except IntegrityError as error:
                    if engine is engines[0]:  # named, though it surfaced at 'mine'
                        assert error.statement == "INSERT INTO t (name) VALUES ('mine')"
                        assert deferred_note(error) == "INSERT INTO t (name) VALUES ('r1')"
                with contextlib.suppress(IntegrityError):  # a savepoint's SAVEPOINT alike
                    async with conn.begin_nested():
                        await conn.execute(text("INSERT INTO t (name) VALUES ('mine too')"))
        async with engine.begin() as conn:
            # Nothing was committed, and the connection is usable.
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == ROWS
            await conn.execute(text("INSERT INTO t (name) VALUES ('after')"))


def test_a_failed_commit_trip_ends_its_transaction_on_the_thread(tmp_path: Path) -> None:
    """The COMMIT trip that meets a deferred statement's error rolls back there and then, so
    the write lock is let go without waiting for the rollback's own trip."""
    path = tmp_path / "lock.db"
    with sqlite3.connect(path, isolation_level=None) as setup:
        setup.execute(SCHEMA)
        setup.execute("INSERT INTO t (name) VALUES ('taken')")
    writer = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        statements = [
            Statement("BEGIN IMMEDIATE", None, False),
            Statement("INSERT INTO t (name) VALUES ('new')", None, False),
            Statement("INSERT INTO t (name) VALUES ('taken')", None, False),
        ]
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            _commit(lambda: writer, statements)
        assert not writer.in_transaction
        # Another connection, waiting for nobody (no busy timeout), writes at once.
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t (name) VALUES ('other')")
        other.execute("COMMIT")
        names = [row[0] for row in other.execute("SELECT name FROM t ORDER BY id")]
        assert names == ["taken", "other"]
    finally:
        writer.close()
        other.close()
