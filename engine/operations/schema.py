"""The database schema: bring it to a revision (`schemabridge db upgrade`).

A plain function rather than an operation on a `Runtime`: upgrading needs the database alone,
and must work before anything else of the runtime can (no Redis, no schema yet).
"""

from __future__ import annotations

from engine.store import db


async def upgrade_database(database_url: str, revision: str = "head") -> None:
    """Apply the migrations up to `revision` (default: this code's head). Idempotent."""
    engines = db.create_engines(database_url)
    try:
        await db.upgrade(engines, revision)
    finally:
        await engines.dispose()
