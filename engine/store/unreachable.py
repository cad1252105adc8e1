"""Whether an exception says the database cannot be reached or cannot serve right now: the one
rule the operations boundary (a refusal the caller can act on) and the worker (keep a result
and write it again) share."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from engine.store.pooler import pooler_mismatch

STORE_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout, OSError)
"""What SQLAlchemy and the drivers raise when the database cannot be reached or answered: a
refused or dropped connection, a database shutting down, an exhausted connection pool."""

STORE_ERRORS = (*STORE_UNREACHABLE, DBAPIError)
"""What to catch where a lost database must not fail the caller; then `store_unreachable` tells
an outage (handled) from any other error of the driver (raised again)."""

UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
"""SQLSTATE classes of a database that cannot serve the request now, whatever exception class
the driver maps them to: connection exceptions, insufficient resources ("too many clients
already", which SQLAlchemy's asyncpg dialect raises as a bare DBAPIError), operator
intervention (shutting down, cannot connect now)."""


def store_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or cannot serve right now. A
    transaction pooler met without `SCHEMABRIDGE_DATABASE_POOLER` counts (statements fail
    at random until the setting is made, `engine.store.pooler`): a worker keeps its results
    and writes them again rather than giving them up at once."""
    if isinstance(exc, STORE_UNREACHABLE):
        return True
    if pooler_mismatch(exc):
        return True
    if isinstance(exc, DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        return isinstance(sqlstate, str) and sqlstate.startswith(UNAVAILABLE_SQLSTATES)
    return False
