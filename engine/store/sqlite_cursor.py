"""One statement, one hop to the SQLite thread.

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
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

Description = tuple[tuple[Any, ...], ...]
Hop = Callable[..., Awaitable[Any]]
"""Runs a function with its arguments on the connection's thread (aiosqlite's `_execute`)."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    description: Description | None
    rowcount: int
    lastrowid: int | None
    rows: list[Any]


class BufferedCursor:
    """A cursor whose `execute` and `executemany` are one hop each; `fetchall` and `close`
    never leave the event loop. Its interface is what SQLAlchemy's adapter uses of aiosqlite's
    `Cursor` for a cursor that is not server-side, and nothing more (it cannot be awaited as
    aiosqlite's `Connection.cursor()` can: only the adapter opens cursors here)."""

    def __init__(self, hop: Hop, connection: Callable[[], sqlite3.Connection]) -> None:
        self._hop = hop
        self._connection = connection
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
        self._keep(await self._hop(_run, self._connection, sql, parameters, False))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> BufferedCursor:
        self._keep(await self._hop(_run, self._connection, sql, parameters, True))
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


def _run(
    connection: Callable[[], sqlite3.Connection], sql: str, parameters: Any, many: bool
) -> _Outcome:
    # On the connection's thread: the whole statement, its rows and its cursor's end.
    cursor = connection().cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        # Read after the rows: a statement with RETURNING counts its rows as they are stepped.
        return _Outcome(description, cursor.rowcount, cursor.lastrowid, rows)
    finally:
        cursor.close()
