"""How a migration on PostgreSQL waits for its tables' locks: at most `LOCK_TIMEOUT_S`.

A migration that alters a table asks for its ACCESS EXCLUSIVE lock; while a long transaction
elsewhere (an old worker mid-flush, a psql session left open) holds any lock on it, the
migration waits, and every query on that table queues behind the migration's pending lock: the
whole cluster stalls, and `db upgrade` says nothing. With PostgreSQL's `lock_timeout` the
migration gives up instead, its transaction rolled back (nothing changed), and the refusal
names the sessions holding locks on the database's tables, longest first, so the operator
can end them (or wait) and run it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

LOCK_TIMEOUT_S = 10.0
"""How long a migration waits for a table's lock before it gives up, changing nothing."""
LOCK_NOT_AVAILABLE = "55P03"
"""PostgreSQL's SQLSTATE for `lock_timeout` reached."""
SHOWN_HOLDERS = 5

_HOLDERS = text(
    """
    SELECT a.pid, a.application_name, a.state,
           EXTRACT(EPOCH FROM now() - a.xact_start) AS transaction_s
    FROM pg_stat_activity AS a
    WHERE a.pid <> pg_backend_pid()
      AND a.pid IN (
        SELECT l.pid FROM pg_locks AS l
        JOIN pg_database AS d ON d.oid = l.database
        WHERE l.granted AND l.relation IS NOT NULL AND d.datname = current_database()
      )
    ORDER BY a.xact_start NULLS LAST
    LIMIT :shown
    """
)


class MigrationBlocked(Exception):
    """A migration gave up waiting `timeout_s` for a table's lock; `holders` describe the
    sessions that held locks on the database's tables then, longest transaction first."""

    def __init__(self, holders: list[str], timeout_s: float) -> None:
        held = "; ".join(holders) if holders else "none is left now: run it again"
        super().__init__(
            f"the migration waited {timeout_s:g} s for a table's lock and gave up, changing "
            f"nothing: other sessions hold locks on the database's tables ({held}); end what "
            "holds them (or let it finish) and run `schemabridge db upgrade` again"
        )
        self.holders = holders


async def set_lock_timeout(conn: AsyncConnection, timeout_s: float) -> None:
    """Bound the waits for locks of the rest of `conn`'s transaction to `timeout_s`."""
    await conn.execute(text(f"SET LOCAL lock_timeout = {int(timeout_s * 1000)}"))


def is_lock_timeout(error: DBAPIError) -> bool:
    """Whether `error` is PostgreSQL's `lock_timeout` reached (asyncpg's code, as the
    SQLAlchemy adapter carries it)."""
    return getattr(error.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE


async def lock_holders(engine: AsyncEngine) -> list[str]:
    """The sessions holding locks on the database's tables now, in words: "pid 4242
    (psql, idle in transaction, its transaction open 73 s)"."""
    async with engine.connect() as conn:
        rows = (await conn.execute(_HOLDERS, {"shown": SHOWN_HOLDERS})).all()
    return [_holder(row) for row in rows]


def _holder(row: Any) -> str:
    name = row.application_name or "no application name"
    seconds = row.transaction_s
    open_for = f", its transaction open {float(seconds):.0f} s" if seconds is not None else ""
    return f"pid {row.pid} ({name}, {row.state or 'unknown state'}{open_for})"
