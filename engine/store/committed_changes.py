"""Which committed transactions changed rows that processes keep copies of.

An API process keeps the routing row of each workflow it submits to (`workflow_serving`) in
memory while it would hear of a change (`engine.operations.row_cache`). Many statements change
that row, from many places: a publish, an operator's switch, each stage of a deployment, its
end, a worker recording the failure of a deployment's run. Rather than trust each of them to
say so, the store watches its own connections:

- a statement that writes a watched table marks its connection;
- a commit confirms the mark (a statement in autocommit confirms its own), a rollback clears it;
- the connection's return to the pool, which comes after the commit and never before it,
  reports the table's topic to `on_change`.

So a change is reported only once it is committed: a process that learns of it and reads the
row again reads the new one. Compiled statements are recognised by their table, SQL text by a
pattern; what the store cannot see (psql, another program) is bounded by the caches' age limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import TextClause

SERVING_TOPIC = "serving"
"""The topic of a change to a workflow's routing row."""

WATCHED: dict[str, str] = {"workflow_serving": SERVING_TOPIC}
"""Watched tables and the topic a committed change of each reports."""

_TEXT_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(" + "|".join(WATCHED) + r")\b",
    re.IGNORECASE,
)
"""A write to a watched table in SQL text (compiled statements are read from their object)."""

_WRITTEN = "sb_watched_written"
_COMMITTED = "sb_watched_committed"


def watch_commits(engine: AsyncEngine, on_change: Callable[[str], None]) -> None:
    """Report the topic of each watched table a committed transaction of `engine` wrote to
    `on_change` (called in the event loop's thread, once per table and transaction). Call it
    once per engine (a second call would compete for the same marks)."""
    sync = engine.sync_engine

    def written(
        conn: Connection, _cursor: Any, sql: str, _params: Any, context: Any, _many: bool
    ) -> None:
        statement = getattr(getattr(context, "compiled", None), "statement", None)
        if isinstance(statement, UpdateBase):
            table = getattr(statement.table, "name", None)
        elif statement is None or isinstance(statement, TextClause):
            # SQL text (`text()`, `exec_driver_sql`): its INSERT, UPDATE or DELETE.
            match = _TEXT_WRITE.search(sql)
            table = None if match is None else match.group(1).lower()
        else:  # a query
            return
        if table in WATCHED:
            # In autocommit the statement commits itself: no commit event will follow.
            autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
            conn.info.setdefault(_COMMITTED if autocommit else _WRITTEN, set()).add(table)

    def committed(conn: Connection) -> None:
        info = _info(conn)
        tables = None if info is None else info.pop(_WRITTEN, None)
        if info is not None and tables:
            info.setdefault(_COMMITTED, set()).update(tables)

    def rolled_back(conn: Connection) -> None:
        info = _info(conn)
        if info is not None:
            info.pop(_WRITTEN, None)

    def returned(_dbapi_connection: Any, record: Any) -> None:
        tables = None if record is None else record.info.pop(_COMMITTED, None)
        for table in tables or ():
            on_change(WATCHED[table])

    event.listen(sync, "before_cursor_execute", written)
    event.listen(sync, "commit", committed)
    event.listen(sync, "rollback", rolled_back)
    event.listen(sync.pool, "checkin", returned)


def _info(conn: Connection) -> dict[Any, Any] | None:
    """The connection's `info`; None for a connection invalidated by a failure or a
    cancellation (whose rollback is still pending), where reading it raises. Its mark, if any,
    stays with its pooled record and can only cause one needless report later."""
    try:
        return conn.info
    except SQLAlchemyError:
        return None
