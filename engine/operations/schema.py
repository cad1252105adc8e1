"""The database schema: bring it to a revision (`schemabridge db upgrade`), or say where it is
(`schemabridge db current`).

A plain function rather than an operation on a `Runtime`: upgrading needs the database alone,
and must work before anything else of the runtime can (no Redis, no schema yet).
"""

from __future__ import annotations

from engine.operations.health import SchemaStatus
from engine.store import db
from engine.store.pooler import Pooler
from engine.store.probes import schema_revision_of


async def upgrade_database(
    database_url: str, revision: str = "head", *, pooler: Pooler = "none"
) -> db.Migrated:
    """Apply the migrations up to `revision` (default: this code's head). Idempotent; waits
    for another process migrating the same PostgreSQL database (`db.upgrade`).
    `pooler`: `SCHEMABRIDGE_DATABASE_POOLER` (`engine.store.pooler`)."""
    engines = db.create_engines(database_url, pooler=pooler)
    try:
        return await db.upgrade(engines, revision)
    finally:
        await engines.dispose()


async def database_schema(database_url: str, *, pooler: Pooler = "none") -> SchemaStatus:
    """Where the database's schema is against this code's migrations: a read of its revision,
    which changes nothing."""
    engines = db.create_engines(database_url, pooler=pooler)
    try:
        return SchemaStatus.of(await schema_revision_of(engines))
    finally:
        await engines.dispose()
