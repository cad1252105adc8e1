"""PostgreSQL behind a connection pooler: what the store changes for one, and how it tells that
it runs behind one without being told.

A pooler in transaction mode (PgBouncer's `pool_mode = transaction`) hands each transaction,
and each statement outside one, to whichever server connection is free. What a server keeps
across transactions is then lost, or met by another client: asyncpg's named prepared
statements (`__asyncpg_stmt_N__`, kept in its statement cache and SQLAlchemy's). Every
asyncpg connection numbers them from 1, so two clients meet on one server connection
("prepared statement ... already exists"), a statement prepared on one server is executed on
another ("... does not exist"), or a client binds another client's statement of the same name
(`bind message supplies 1 parameters, but prepared statement ... requires 2`, or, when the
parameters happen to fit, the other statement runs).

With `SCHEMABRIDGE_DATABASE_POOLER=transaction` the store turns asyncpg's statement cache off
(`statement_cache_size=0`): asyncpg then prepares every statement unnamed and sends its Parse
again with each Bind, in the same round trip, so nothing is kept on a server between
statements and SQLAlchemy's cache of statement descriptions stays usable. (Naming statements
uniquely instead, `prepared_statement_name_func`, leaves every statement prepared on a server
connection for good, and asyncpg closes them in a round trip of its own that the pooler may
send to another server: the next Bind then misses its statement.) The store keeps nothing else
on a session: no LISTEN/NOTIFY (wake-ups go through Redis), no session advisory locks (a
migration's is its transaction's), no temporary tables, no SET outside a transaction; its
locks are row locks and that advisory lock, each of one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

Pooler = Literal["none", "transaction"]
POOLERS: tuple[Pooler, ...] = ("none", "transaction")
POOLER_SETTING = "SCHEMABRIDGE_DATABASE_POOLER"

POOLER_HINT = (
    f"the database is behind a transaction pooler (PgBouncer?): set {POOLER_SETTING}=transaction"
)
"""What an operator reads when the store meets another client's prepared statements."""

MISMATCH_SQLSTATES = frozenset({"26000", "42P05", "08P01"})
"""invalid_sql_statement_name ("prepared statement ... does not exist"),
duplicate_prepared_statement ("... already exists") and protocol_violation (a Bind of another
client's statement: "bind message supplies N parameters, but prepared statement ...")."""
_ASYNCPG_STATEMENT = 'prepared statement "__asyncpg_'

MISMATCH_WINDOW_S = 60.0
"""How long after a statement failed this way the database counts as failing (`/health`):
the failures come at random, between statements that succeed."""


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, what SQLAlchemy wraps (`orig`) and what each was raised from."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        found = pending.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        yield found
        pending += [getattr(found, "orig", None), found.__cause__, found.__context__]


def pooler_mismatch(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is PostgreSQL refusing one of asyncpg's named
    prepared statements in a way only a pooler between them explains."""
    return any(
        getattr(cause, "sqlstate", None) in MISMATCH_SQLSTATES and _ASYNCPG_STATEMENT in str(cause)
        for cause in _causes(error)
    )


class PoolerWatch:
    """When the store last met `pooler_mismatch`, and the error (for `/health`)."""

    def __init__(self) -> None:
        self._seen_at: float | None = None
        self.last_error: BaseException | None = None

    def note(self, error: BaseException) -> None:
        """Remember `error` if it is a pooler mismatch (any other error is ignored)."""
        if pooler_mismatch(error):
            self._seen_at = time.monotonic()
            self.last_error = error

    def recent(self, window_s: float = MISMATCH_WINDOW_S) -> BaseException | None:
        """The last mismatch if it happened within `window_s`, else None."""
        if self._seen_at is None or time.monotonic() - self._seen_at > window_s:
            return None
        return self.last_error
