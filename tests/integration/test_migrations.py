"""The Alembic migrations produce exactly the schema the models declare (docs/architecture.md,
'Testing')."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from api.cli.exit_codes import ExitCode, exit_code_for
from engine.operations.startup import explain
from engine.settings import Settings
from engine.store import (
    db,
)
from engine.store.migration_locks import MigrationBlocked
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


async def test_a_migration_waits_for_a_tables_lock_a_bounded_time_and_names_who_holds_it(
    pg_database_url: str,
) -> None:
    """An SRE's upgrade tour: a session holding a lock on `run` (a long transaction, an old
    worker mid-flush) made `db upgrade` wait silently, and every query on `run` queued behind
    its pending lock. The migration gives up after its lock timeout, changing nothing, and
    names the session; once it ends, the same upgrade goes through."""
    previous = sorted(db.known_revisions())[-2]
    engines = db.create_engines(pg_database_url)
    holder = db.create_engines(pg_database_url)
    try:
        await db.upgrade(engines, previous)
        async with holder.write.connect() as conn:
            # Its transaction begins with its first statement and holds ACCESS SHARE on `run`.
            await conn.execute(text("SET application_name = 'long-report'"))
            await conn.execute(text("SELECT count(*) FROM run"))
            with pytest.raises(MigrationBlocked) as blocked:
                async with asyncio.timeout(30):
                    await db.upgrade(engines, lock_timeout_s=0.5)
            said = str(blocked.value)
            assert said.startswith(
                "the migration waited 0.5 s for a table's lock and gave up, changing nothing"
            ), said
            assert re.search(r"pid \d+ \(long-report, idle in transaction, its transaction", said)
            assert said.endswith("run `schemabridge db upgrade` again"), said
            # `db upgrade` (and `serve`, migrating as it starts) says it in one line, exit 1.
            settings = Settings.model_validate({"database_url": pg_database_url})
            refused = explain(blocked.value, settings)
            assert refused is not None and refused.code == "migration_blocked"
            assert str(refused).startswith("cannot migrate the database postgresql")
            assert exit_code_for(refused) == ExitCode.FAILED
            assert await _revision(engines) == previous
            await conn.rollback()
        migrated = await db.upgrade(engines, lock_timeout_s=0.5)
        assert (migrated.before, migrated.after) == (previous, db.head_revision())
    finally:
        await holder.dispose()
        await engines.dispose()


async def _revision(engines: db.Engines) -> str | None:
    async with engines.write.connect() as conn:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )
