"""aiosqlite connections that leave no worker thread behind once their engine is disposed.

aiosqlite runs each connection on a thread of its own, which hands every result back to the
event loop that asked for it (`loop.call_soon_threadsafe`). Stopping that thread is only ever
queued: a connect that fails (a missing directory, an unwritable file) or is cancelled asks it
to stop and raises at once, and SQLAlchemy's forced close (`stop()`, after a cancelled query or
for a connection collected unclosed) does not wait either. Such a thread still has a result to
report, and when its loop has closed by then it dies with "RuntimeError: Event loop is closed"
in the background, in whatever the process runs next (a flaky test, a traceback after a CLI
command has already answered).

`SqliteConnections` opens the connections of one database's engines (SQLAlchemy's
`async_creator`). Each connection notes its worker thread when it is asked to stop, a failed
connect waits for its own thread before raising, and `wait_stopped` (the end of
`Engines.dispose`) waits for every other one: once the engines are disposed, no worker thread of
theirs is left to report to a loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from threading import Thread
from typing import Any

import aiosqlite

from engine.store.sqlite_cursor import BufferedCursor, Hops

logger = logging.getLogger(__name__)

ITER_CHUNK_SIZE = 64
"""aiosqlite's default rows per hop when its own cursor is iterated (the store's cursor,
`BufferedCursor`, reads every row in its one hop)."""


class _Connection(aiosqlite.Connection):
    """An aiosqlite connection whose worker thread is noted in `stopping` when it is asked to
    stop (on `close`, a failed connect, a forced close or collection)."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], stopping: set[Thread]) -> None:
        super().__init__(connector, ITER_CHUNK_SIZE)
        self._stopping = stopping
        # As SQLAlchemy does for the connections it opens itself: a connection nobody closed
        # must not keep the interpreter from exiting.
        self.worker.daemon = True
        # aiosqlite's own cursor costs a hop to the thread for each of open, execute, fetch
        # and close; these, one per statement at most (see `engine.store.sqlite_cursor`).
        self.hops = Hops(self._execute, self._sqlite)

    @property
    def worker(self) -> Thread:
        # aiosqlite offers no public handle on its worker thread; `_thread` is what
        # SQLAlchemy's own aiosqlite dialect uses too.
        return self._thread

    def stop(self) -> asyncio.Future[Any] | None:
        self._stopping.add(self.worker)
        return super().stop()

    def cursor(self) -> BufferedCursor:  # type: ignore[override]
        return self.hops.cursor()

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # Whatever reaches the thread may open a transaction (see `Hops.idle`).
        self.hops.idle = False
        return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    async def commit(self) -> None:
        await self.hops.commit()

    async def rollback(self) -> None:
        await self.hops.rollback()

    def _sqlite(self) -> sqlite3.Connection:
        # Called on the worker thread, where the connection lives.
        return self._conn


class SqliteConnections:
    """Opens aiosqlite connections with `args`/`kwargs` (what `sqlite3.connect` takes) and
    waits for their worker threads to end; one per database, shared by its engines.
    `join_timeout_s` bounds each wait (a thread may first finish a statement that holds it up
    to SQLite's busy timeout)."""

    def __init__(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], *, join_timeout_s: float
    ) -> None:
        self._args = tuple(args)
        self._kwargs = dict(kwargs)
        self._join_timeout_s = join_timeout_s
        self._stopping: set[Thread] = set()

    async def connect(self) -> aiosqlite.Connection:
        """A new connection; when it cannot be opened, its worker thread has ended before the
        error is raised."""
        connection = _Connection(self._open, self._stopping)
        try:
            await connection
        except BaseException:
            # aiosqlite has queued the thread's stop and raised without waiting for it.
            await self._join([connection.worker])
            raise
        return connection

    async def wait_stopped(self) -> None:
        """Wait until the worker thread of every connection asked to stop has ended."""
        await self._join(self._stopping.copy())

    def _open(self) -> sqlite3.Connection:
        # Runs on the connection's worker thread.
        connection: sqlite3.Connection = sqlite3.connect(*self._args, **self._kwargs)
        return connection

    async def _join(self, threads: Iterable[Thread]) -> None:
        started = [thread for thread in threads if thread.ident is not None]
        if started:
            await asyncio.to_thread(_join_all, started, self._join_timeout_s)
        for thread in started:
            if thread.is_alive():
                logger.warning(
                    "an SQLite connection's worker thread did not end within %.0f s",
                    self._join_timeout_s,
                )
            else:
                self._stopping.discard(thread)


def _join_all(threads: Iterable[Thread], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
