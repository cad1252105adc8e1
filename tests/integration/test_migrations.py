"""The Alembic migrations produce exactly the schema the models declare (docs/architecture.md,
'Testing')."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from engine.store import (
    db,
)
from tests.conftest import Backend

# Never migrated: these tests run the migrations themselves.
pytestmark = pytest.mark.blank_database


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


async def test_processes_migrating_at_once_take_turns(backend: Backend) -> None:
    """Two processes migrating one fresh database at once (two `db upgrade`s, two `serve`s):
    the second waits for the first and finds the schema at head. Without the lock, both
    created the same tables and one failed on PostgreSQL's catalog."""
    engines = [db.create_engines(backend.database_url) for _ in range(2)]
    try:
        # Bounded: without the lock the two can also wait on each other's catalog rows.
        async with asyncio.timeout(60):
            first, second = await asyncio.gather(*(db.upgrade(e) for e in engines))
        assert {first.before, second.before} == {None, db.head_revision()}
        assert first.after == second.after == db.head_revision()
        assert [first.moved, second.moved].count(True) == 1
    finally:
        for each in engines:
            await each.dispose()


async def test_a_migration_says_from_which_revision_to_which(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    engines = db.create_engines(backend.database_url)
    try:
        await db.upgrade(engines, "0017")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=db.__name__):
            migrated = await db.upgrade(engines)
            await db.upgrade(engines)  # at head: nothing done, nothing said
    finally:
        await engines.dispose()
    assert (migrated.before, migrated.after) == ("0017", db.head_revision())
    lines = [r.getMessage() for r in caplog.records if r.name == db.__name__]
    assert lines == [f"migrated the database schema from 0017 to {db.head_revision()}"]
