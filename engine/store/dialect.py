"""The differences between SQLite and PostgreSQL, as hooks the store's statements call.

Everything else in `engine.store` is written once for both: statements ask a `Dialect` for the
few constructs that differ instead of comparing dialect names themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import JSON, String, Text, any_, bindparam, cast, literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import TypeEngine

DialectName = Literal["sqlite", "postgresql"]

_BUILT: dict[tuple[Callable[..., Any], str], Any] = {}


@dataclass(frozen=True)
class Dialect:
    """One database's hooks."""

    name: DialectName

    @property
    def is_postgresql(self) -> bool:
        return self.name == "postgresql"

    def insert(self, table: Any) -> Any:
        """An INSERT that supports `on_conflict_do_nothing` / `on_conflict_do_update`."""
        module = postgresql if self.is_postgresql else sqlite
        return module.insert(table)

    def statement(self, build: Callable[[Dialect], Any]) -> Any:
        """`build(self)`, built once per dialect: the store's hot statements are constants, so
        SQLAlchemy neither builds nor hashes them again at each execution."""
        key = (build, self.name)
        built = _BUILT.get(key)
        if built is None:
            built = _BUILT[key] = build(self)
        return built

    def json_from_text(self, text: str) -> Any:
        """A bound value storing already-encoded JSON text as is (PostgreSQL checks it)."""
        value: Any = literal(text, Text)
        return cast(value, JSON) if self.is_postgresql else value

    def json_from_bound_text(self, name: str) -> Any:
        """A bound parameter `name` of JSON text for a JSON column, stored as it is: the
        column's type would serialize the text again, as a JSON string (PostgreSQL checks
        it)."""
        value: Any = bindparam(name, type_=Text)
        return cast(value, JSON) if self.is_postgresql else value

    @property
    def assembles_json(self) -> bool:
        """Whether the database can assemble JSON arrays itself (`string_agg`)."""
        return self.is_postgresql

    @property
    def has_ordered_set_aggregates(self) -> bool:
        """Whether `percentile_disc(...) WITHIN GROUP (ORDER BY ...)` exists (PostgreSQL): a
        percentile in one sorted aggregate, about four times cheaper than a window."""
        return self.is_postgresql

    def one_of(self, column: Any, name: str, item_type: type[TypeEngine[Any]] = String) -> Any:
        """`column` is one of the list bound as `name` (of `item_type` values). On PostgreSQL
        `= ANY(array)`: one statement text, so one prepared statement, whatever the number of
        values; an IN list is a new statement (parsed and prepared again) for every length."""
        if self.is_postgresql:
            return column == any_(bindparam(name, type_=ARRAY(item_type)))
        return column.in_(bindparam(name, expanding=True))

    @property
    def writes_rows_as_arrays(self) -> bool:
        """Whether a batch of rows can be one statement over arrays (`unnest`), and a claim's
        tenant shares one statement (`LATERAL`); elsewhere one execution per row or share."""
        return self.is_postgresql

    @property
    def writes_several_tables_at_once(self) -> bool:
        """Whether one statement can write several tables (PostgreSQL's data-modifying
        `WITH`): a submission's run, steps, log line and quota in one autocommit statement."""
        return self.is_postgresql

    @property
    def analyze_statement(self) -> str | None:
        """Refreshes planner statistics of the queue tables (None: not needed)."""
        return "ANALYZE step, run" if self.is_postgresql else None


SQLITE = Dialect("sqlite")
POSTGRESQL = Dialect("postgresql")


def dialect_of(conn: AsyncConnection) -> Dialect:
    """The hooks of the database `conn` talks to."""
    return POSTGRESQL if conn.dialect.name == "postgresql" else SQLITE
