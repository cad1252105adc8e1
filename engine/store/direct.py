"""PostgreSQL: the hottest single statement on asyncpg itself, past SQLAlchemy's execution.

A submission is one statement (`engine.store.catalogue.CREATE_RUN_AT_ONCE`), and SQLAlchemy's
execution context, parameter processing and result wrapping around it cost an api process
more CPU than asyncpg's own work for it (bench/RESULTS.md, "A submission's statement on
asyncpg itself"). Such a statement runs here instead: compiled once by SQLAlchemy for asyncpg
(so the SQL text is the one the store would send) and executed on the asyncpg connection of a
connection checked out of the store's own pool in autocommit. The pool stays the one pool,
with its size, its checkout timeout and the connection setup SQLAlchemy's dialect gives every
connection (JSON codecs included). Errors are raised as the SQLAlchemy exceptions the store and
the operations boundary handle: a taken unique key an `IntegrityError`, a refused or dropped
connection an `OperationalError` (the connection is then invalidated, as SQLAlchemy does),
any other refusal a `DBAPIError` carrying its SQLSTATE.

Only statements whose parameters are plain values asyncpg encodes itself belong here (JSON
already encoded as text), built once at import (the compiled form is kept per statement).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from engine.store.pooler import PoolerWatch

_CONNECTION_ENDED = ("08", "57P")
"""SQLSTATE classes after which the server has ended (or is ending) the connection."""


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]


class DirectStatements:
    """Runs statements on the asyncpg connections of `engine` (PostgreSQL, autocommit)."""

    def __init__(self, engine: AsyncEngine, pooler_watch: PoolerWatch | None = None) -> None:
        self._engine = engine
        self._pooler_watch = pooler_watch
        self._compiled: dict[int, tuple[ClauseElement, _Compiled]] = {}

    @property
    def dialect(self) -> Dialect:
        """The SQLAlchemy dialect its statements are compiled for (the engine's own)."""
        return self._engine.dialect

    async def fetchval(self, statement: ClauseElement, params: Mapping[str, Any]) -> Any:
        """The first column of the first row of `statement` with `params`, in autocommit."""
        compiled = self._compile(statement)
        args = [params[name] for name in compiled.names]
        watch = self._pooler_watch
        async with self._engine.connect() as conn, _translated(conn, compiled.sql, watch):
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None  # checked out, so open
            return await driver.fetchval(compiled.sql, *args)

    def _compile(self, statement: ClauseElement) -> _Compiled:
        # Keyed by identity and holding the statement, so the key cannot be reused.
        kept = self._compiled.get(id(statement))
        if kept is not None and kept[0] is statement:
            return kept[1]
        compiled = statement.compile(dialect=self.dialect)
        assert isinstance(compiled, SQLCompiler)  # asyncpg's: positional ($1, $2, ...)
        result = _Compiled(compiled.string, tuple(compiled.positiontup or ()))
        self._compiled[id(statement)] = (statement, result)
        return result


@contextlib.asynccontextmanager
async def _translated(
    conn: AsyncConnection, sql: str, pooler_watch: PoolerWatch | None
) -> AsyncIterator[None]:
    """asyncpg's errors as the SQLAlchemy exceptions the store handles (and shown to
    `pooler_watch`, as the engine's own statements' errors are)."""
    try:
        yield
    except asyncpg.IntegrityConstraintViolationError as error:
        raise exc.IntegrityError(sql, None, error) from error
    except asyncpg.PostgresError as error:
        if pooler_watch is not None:
            pooler_watch.note(error)
        # Its SQLSTATE travels along (`orig`): the boundary tells "cannot serve now" by it.
        if str(getattr(error, "sqlstate", "")).startswith(_CONNECTION_ENDED):
            await conn.invalidate()
        raise exc.DBAPIError(sql, None, error) from error
    except (asyncpg.InterfaceError, OSError, TimeoutError) as error:
        # A connection refused, dropped or timed out: the database cannot be reached, and
        # this connection must not go back to the pool.
        await conn.invalidate()
        raise exc.OperationalError(sql, None, error) from error
