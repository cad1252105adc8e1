"""PostgreSQL: the hottest single statements on asyncpg itself, past SQLAlchemy's execution.

A submission is one statement (`engine.store.catalogue.CREATE_RUN_AT_ONCE`), and around it
SQLAlchemy's pool checkout, execution context and result wrapping cost an api process more
CPU than asyncpg's own work for it (bench/RESULTS.md, "A submission on asyncpg itself"). Such
a statement runs here instead: compiled once by SQLAlchemy for asyncpg (so the SQL text is the
one the store would send), executed on a small asyncpg pool of its own in autocommit, its
errors raised as the SQLAlchemy exceptions the store and the operations boundary already
handle (a taken unique key an `IntegrityError`, an unreachable database an `OperationalError`).

Only statements whose parameters are plain values asyncpg encodes itself belong here (JSON
already encoded as text); everything else goes through SQLAlchemy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

DIRECT_POOL_SIZE = 4
"""Connections of a process's direct pool (beside its SQLAlchemy pool): a statement holds one
for a single round trip, so a few serve many concurrent requests."""


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]


class DirectStatements:
    """A process's asyncpg pool for `fetchval`; opened at first use, closed by `close`."""

    def __init__(self, engine: AsyncEngine, connect_args: Mapping[str, Any]) -> None:
        self._dialect = engine.dialect
        _, options = engine.dialect.create_connect_args(engine.url)
        self._options = {**options, **connect_args}
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()
        self._compiled: dict[int, tuple[ClauseElement, _Compiled]] = {}

    @property
    def dialect(self) -> Dialect:
        """The SQLAlchemy dialect its statements are compiled for (the engine's own)."""
        return self._dialect

    async def fetchval(self, statement: ClauseElement, params: Mapping[str, Any]) -> Any:
        """The first column of the first row of `statement` with `params`, in autocommit."""
        compiled = self._compile(statement)
        args = [params[name] for name in compiled.names]
        try:
            pool = self._pool or await self._open()
            async with pool.acquire() as conn:
                return await conn.fetchval(compiled.sql, *args)
        except asyncpg.IntegrityConstraintViolationError as error:
            raise exc.IntegrityError(compiled.sql, None, error) from error
        except asyncpg.PostgresError as error:
            # Its SQLSTATE travels along (`orig`): the boundary tells "cannot serve now" by it.
            raise exc.DBAPIError(compiled.sql, None, error) from error
        except (asyncpg.InterfaceError, OSError, TimeoutError) as error:
            # A connection refused, dropped or timed out: the database cannot be reached.
            raise exc.OperationalError(compiled.sql, None, error) from error

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _open(self) -> asyncpg.Pool:
        async with self._opening:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    min_size=0, max_size=DIRECT_POOL_SIZE, **self._options
                )
            return self._pool

    def _compile(self, statement: ClauseElement) -> _Compiled:
        # Keyed by identity and holding the statement, so the key cannot be reused.
        kept = self._compiled.get(id(statement))
        if kept is not None and kept[0] is statement:
            return kept[1]
        compiled = statement.compile(
            dialect=self._dialect, compile_kwargs={"render_postcompile": True}
        )
        assert isinstance(compiled, SQLCompiler)  # asyncpg's: positional ($1, $2, ...)
        result = _Compiled(compiled.string, tuple(compiled.positiontup or ()))
        self._compiled[id(statement)] = (statement, result)
        return result
