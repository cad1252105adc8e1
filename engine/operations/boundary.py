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

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from schemas.errors import Unavailable

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

STORE_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout, OSError)
"""What SQLAlchemy and the drivers raise when the database cannot be reached or answered: a
refused or dropped connection, a database shutting down, an exhausted connection pool."""


def store_boundary(operation: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Run `operation`; the database being unreachable raises
    `Unavailable(code="store_unavailable")` instead (the operation's own refusals pass)."""

    @functools.wraps(operation)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await operation(*args, **kwargs)
        except STORE_UNREACHABLE as exc:
            logger.warning("%s: database unavailable: %s", operation.__qualname__, exc)
            raise Unavailable(
                "the database cannot be reached right now; send the request again later",
                code="store_unavailable",
            ) from exc

    return guarded
