"""The Alembic migrations produce exactly the schema the models declare (docs/architecture.md,
'Testing')."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from engine.store import (
    db,
)
from tests.conftest import Backend


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection)
    return list(compare_metadata(context, SQLModel.metadata))


async def test_migrations_match_models(backend: Backend) -> None:
    engines = db.create_engines(backend.database_url)
    try:
        await db.upgrade(engines)
        await db.upgrade(engines)  # idempotent
        async with engines.write.connect() as conn:
            assert await conn.run_sync(_diff) == []
    finally:
        await engines.dispose()


async def test_the_newest_migration_goes_down_and_up_again(backend: Backend) -> None:
    """Its downgrade undoes it (on SQLite a table rebuild): up again, the schema still
    matches the models."""
    engines = db.create_engines(backend.database_url)
    try:
        await db.upgrade(engines)
        async with engines.write.begin() as conn:
            await conn.run_sync(_downgrade, "-1")
        async with engines.write.connect() as conn:
            assert await conn.run_sync(_diff) != []
        await db.upgrade(engines)
        async with engines.write.connect() as conn:
            assert await conn.run_sync(_diff) == []
    finally:
        await engines.dispose()


def _downgrade(connection: Connection, revision: str) -> None:
    config = db.alembic_config()
    config.attributes["connection"] = connection
    command.downgrade(config, revision)
