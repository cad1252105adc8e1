"""Turning "the database cannot be reached" into the operations' own refusal.

Operations call the store directly; when the database is down the driver raises its own
errors (SQLAlchemy's OperationalError or InterfaceError, or a bare socket error from the
connect). At the operations boundary those become `Unavailable(code="store_unavailable")`, so
every front door answers the same way (REST 503) and nothing else learns the driver's types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.exc import InterfaceError, OperationalError

from schemas.errors import Unavailable

STORE_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    OSError,
    TimeoutError,
)
"""What a database that cannot be reached raises."""


@asynccontextmanager
async def store_available() -> AsyncIterator[None]:
    """Run the block; a database that cannot be reached raises `Unavailable`."""
    try:
        yield
    except STORE_ERRORS as error:
        raise Unavailable(
            f"the database cannot be reached right now ({type(error).__name__}); nothing was "
            "changed, send the request again later",
            code="store_unavailable",
        ) from error
