"""The operations boundary: a database that cannot be reached becomes one refusal.

Inside the engine a lost connection is an ordinary exception (a worker parks the step and tries
again); at the front doors it must be an answer the caller can act on — "unavailable, nothing
changed, send it again" — so every operation is wrapped in `store_boundary`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from schemas.errors import Unavailable

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

STORE_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout, OSError)
"""What SQLAlchemy and the drivers raise when the database cannot be reached or answered: a
refused or dropped connection, a database shutting down, an exhausted connection pool."""

UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
"""SQLSTATE classes of a database that cannot serve the request now, whatever exception class
the driver maps them to: connection exceptions, insufficient resources ("too many clients
already", which SQLAlchemy's asyncpg dialect raises as a bare DBAPIError), operator
intervention (shutting down, cannot connect now)."""


def store_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or cannot serve right now."""
    if isinstance(exc, STORE_UNREACHABLE):
        return True
    if isinstance(exc, DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        return isinstance(sqlstate, str) and sqlstate.startswith(UNAVAILABLE_SQLSTATES)
    return False


def store_boundary(operation: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Run `operation` (a method of an operations class, which holds its `_runtime`); the
    database being unreachable raises `Unavailable(code="store_unavailable")` instead (the
    operation's own refusals pass). Before it returns, the change tokens of what it changed
    are replaced (`engine.coordination.invalidations`)."""

    @functools.wraps(operation)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await operation(*args, **kwargs)
        except (*STORE_UNREACHABLE, DBAPIError) as exc:
            if not store_unreachable(exc):
                raise
            logger.warning("%s: database unavailable: %s", operation.__qualname__, exc)
            raise Unavailable(
                "the database cannot be reached right now; send the request again later",
                code="store_unavailable",
            ) from exc
        finally:
            # The store's committed changes of rows other processes keep copies of are
            # announced on tasks: their tokens are replaced before the caller hears back.
            runtime = getattr(args[0], "_runtime", None) if args else None
            if runtime is not None:
                await runtime.invalidations.settled()

    return guarded
