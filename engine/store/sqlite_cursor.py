"""One hop to the SQLite thread per statement, and none for what needs no answer yet.

aiosqlite runs every call on its connection's worker thread: the event loop queues the call,
the thread runs it and hands the result back (`call_soon_threadsafe`). SQLAlchemy's aiosqlite
adapter makes three or four such hops per statement (open a cursor, execute, fetch the rows
when there are any, close the cursor), and on the store's small statements a hop costs more
than SQLite's own work: two thread switches, a wake-up of the event loop and, while the loop
is busy, a wait of up to the interpreter's switch interval for the GIL on the way there and
back.

`BufferedCursor` makes it one: it executes, reads every row and closes the SQLite cursor in a
single call on the thread, then hands the rows over and closes without leaving the event loop.
Reading every row at once is what the adapter does anyway for every cursor that is not
server-side (it buffers them right after `execute`); server-side cursors, which would read
rows as they are fetched, are switched off on the store's SQLite engines
(`engine.store.db`), so streaming a result there fails loudly instead of buffering it all.

`Hops` goes further for what a transaction does not wait on. A statement marked deferred (its
caller reads nothing of its answer: a `BEGIN`, an INSERT whose row count nobody checks) is not
sent on its own: it rides with the connection's next statement, or with the COMMIT, in the
same hop and in the order given. A write transaction whose statements are all deferred is one
hop: `BEGIN IMMEDIATE`, its statements and `COMMIT`, with SQLite's write lock held for the
thread's own work only, never across a round trip through a busy event loop (while it is held,
every other writer of the file waits in SQLite's busy handler, sleeping in steps of up to
100 ms). Ending a transaction that never began (the pool's reset after a commit) costs no hop.
A deferred statement's error surfaces from the statement or COMMIT it rode with (a note on
the driver's error names the deferred statement), and dooms the transaction: every later
statement, and the COMMIT, raise it again until the rollback. (The statement it surfaced at
never ran; a caller that caught the error as that statement's and went on would otherwise
commit without either, where a stock engine raises at the deferred statement and commits nothing.)
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Description = tuple[tuple[Any, ...], ...]
Hop = Callable[..., Awaitable[Any]]
"""Runs a function with its arguments on the connection's thread (aiosqlite's `_execute`)."""


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str
    parameters: Any
    many: bool


@dataclass(frozen=True, slots=True)
class _Outcome:
    description: Description | None
    rowcount: int
    lastrowid: int | None
    rows: list[Any]


DEFERRED = "deferred"
"""The execution option (`.execution_options(deferred=True)`) that marks a statement whose
answer its caller never reads: on SQLite it rides with the next statement or the COMMIT; on
PostgreSQL it changes nothing."""
_NO_ANSWER = _Outcome(None, -1, None, [])
"""What a deferred statement answers at once (SQLite's answer comes with a later hop)."""


@dataclass(frozen=True, slots=True)
class _Failed:
    """A deferred statement's error, met on the thread before the statement that answers."""

    error: Exception


class Hops:
    """What one connection sends its thread: each statement in one hop, deferred ones with the
    next. `connection` returns the `sqlite3.Connection` (called on the thread). `idle` is
    True while no transaction can be open: nothing has run since the last commit or rollback
    (the connection runs in SQLite's autocommit mode, where only an explicit BEGIN opens one).
    The connection sets it False on every hop of its own."""

    def __init__(self, hop: Hop, connection: Callable[[], sqlite3.Connection]) -> None:
        self._hop = hop
        self._connection = connection
        self._pending: list[Statement] = []
        self._deferred_sql: str | None = None
        self._failed: Exception | None = None
        self.idle = True

    def cursor(self) -> BufferedCursor:
        return BufferedCursor(self)

    def defer(self, sql: str) -> None:
        """Defer the statement about to be executed if its text is `sql` (set just before the
        execute: a mark left by a statement that never arrived matches no other)."""
        self._deferred_sql = sql

    async def statement(self, sql: str, parameters: Any, many: bool) -> _Outcome:
        deferred, self._deferred_sql = self._deferred_sql, None
        if self._failed is not None:
            raise self._failed
        if deferred is not None and deferred == sql:
            self._pending.append(Statement(sql, _kept(parameters, many), many))
            return _NO_ANSWER
        statements = [*self._pending, Statement(sql, parameters, many)]
        self._pending = []
        self.idle = False
        outcome: _Outcome | _Failed = await self._hop(_run_all, self._connection, statements)
        if isinstance(outcome, _Failed):
            self._failed = outcome.error
            raise outcome.error
        return outcome

    async def commit(self) -> None:
        statements, self._pending = self._pending, []
        if self._failed is not None:
            # The transaction is doomed (see the module's docstring): the rollback ends it.
            raise self._failed
        if self.idle and not statements:
            return
        self.idle = False
        await self._hop(_commit, self._connection, statements)
        self.idle = True

    async def rollback(self) -> None:
        # Statements still pending never ran: dropping them is their rollback.
        self._pending = []
        self._failed = None
        if self.idle:
            return
        await self._hop(_rollback, self._connection)
        self.idle = True


class BufferedCursor:
    """A cursor whose `execute` and `executemany` are one hop each at most; `fetchall` and
    `close` never leave the event loop. Its interface is what SQLAlchemy's adapter uses of
    aiosqlite's `Cursor` for a cursor that is not server-side, and nothing more (it cannot be
    awaited as aiosqlite's `Connection.cursor()` can: only the adapter opens cursors here)."""

    def __init__(self, hops: Hops) -> None:
        self._hops = hops
        self.arraysize = 1
        self.description: Description | None = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self._rows: list[Any] = []

    async def __aenter__(self) -> BufferedCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def execute(self, sql: str, parameters: Any = None) -> BufferedCursor:
        self._keep(await self._hops.statement(sql, parameters, False))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> BufferedCursor:
        self._keep(await self._hops.statement(sql, parameters, True))
        return self

    def _keep(self, outcome: _Outcome) -> None:
        self.description = outcome.description
        self.rowcount = outcome.rowcount
        self.lastrowid = outcome.lastrowid
        self._rows = outcome.rows

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    async def close(self) -> None:
        self._rows = []


def _kept(parameters: Any, many: bool) -> Any:
    # A deferred executemany's rows are read later: an iterator would be read then, or twice.
    return list(parameters) if many and not isinstance(parameters, list | tuple) else parameters


def _run(connection: sqlite3.Connection, statement: Statement) -> _Outcome:
    # On the connection's thread: the whole statement, its rows and its cursor's end.
    cursor = connection.cursor()
    try:
        if statement.many:
            cursor.executemany(statement.sql, statement.parameters)
        else:
            parameters = statement.parameters
            cursor.execute(statement.sql, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        # Read after the rows: a statement with RETURNING counts its rows as they are stepped.
        return _Outcome(description, cursor.rowcount, cursor.lastrowid, rows)
    finally:
        cursor.close()


def _run_all(
    connection: Callable[[], sqlite3.Connection], statements: Sequence[Statement]
) -> _Outcome | _Failed:
    # The deferred statements, then the one that answers (last); a deferred one's error
    # is told apart from the answering statement's own.
    sqlite = connection()
    *deferred, answering = statements
    for statement in deferred:
        try:
            _run(sqlite, statement)
        except Exception as error:
            return _Failed(_named(error, statement))
    return _run(sqlite, answering)


def _named(error: Exception, statement: Statement, surfaced_at: str = "this one") -> Exception:
    """`error` with a note naming the deferred `statement` that raised it: SQLAlchemy's
    exception names the statement the error surfaced at (`surfaced_at`), which never ran."""
    error.add_note(f"raised by an earlier statement deferred to {surfaced_at}: {statement.sql}")
    return error


def _commit(connection: Callable[[], sqlite3.Connection], statements: Sequence[Statement]) -> None:
    sqlite = connection()
    try:
        for statement in statements:
            try:
                _run(sqlite, statement)
            except Exception as error:
                _named(error, statement, "the COMMIT")
                raise
        sqlite.commit()
    except BaseException:
        # The transaction is over either way; ending it here releases the write lock without
        # waiting for the rollback's own hop.
        if sqlite.in_transaction:
            # The original error says more; the caller's rollback comes next anyway.
            with contextlib.suppress(sqlite3.Error):
                sqlite.rollback()
        raise


def _rollback(connection: Callable[[], sqlite3.Connection]) -> None:
    connection().rollback()
