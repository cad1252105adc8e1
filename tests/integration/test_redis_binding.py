"""A Redis serves the processes of one database: the first process to start binds it, a
process of another database is refused at start (`open_runtime`), on PostgreSQL as on SQLite;
an emptied Redis binds again (engine.coordination.store_binding)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as redis
from sqlalchemy import text

from engine.coordination import keys
from engine.operations.startup import StartupRefused, open_runtime
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.errors import Refusal
from tests.conftest import Backend, _create_pg_database, _drop_pg_database
from tests.integration.engine_harness import settings_for


async def _bound(settings: Settings) -> str:
    """Open and close a runtime on `settings`: answers the database's id."""
    runtime = await open_runtime(settings)
    try:
        return await runtime.store.store_id()
    finally:
        await runtime.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_redis_bound_to_one_database_refuses_another(
    kind: str, tmp_path: Path, redis_url: str
) -> None:
    created: list[str] = []
    if kind == "postgresql":
        created = [await _create_pg_database(), await _create_pg_database()]
        urls = [f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}" for name in created]
    else:
        urls = [f"sqlite+aiosqlite:///{tmp_path / name}" for name in ("a.db", "b.db")]
    first, other = (Settings(database_url=url, redis_url=redis_url) for url in urls)
    client = redis.Redis.from_url(redis_url)
    try:
        first_id = await _bound(first)
        assert await client.get(keys.STORE_ID) == first_id.encode()
        assert await _bound(first) == first_id  # its own processes start again and again
        with pytest.raises(StartupRefused) as refused:
            await _bound(other)
        assert refused.value.code == "redis_of_another_database"
        assert refused.value.refusal is Refusal.INVALID
        assert f"(id {first_id[:8]}, this database's is " in str(refused.value)
        assert await client.get(keys.STORE_ID) == first_id.encode()  # left as it was
        await client.flushdb()  # the other database gone for good: the fix the line gives
        other_id = await _bound(other)
        assert other_id != first_id
        assert await client.get(keys.STORE_ID) == other_id.encode()
    finally:
        await client.aclose()
        for name in created:
            await _drop_pg_database(name)


async def test_a_database_whose_tables_were_emptied_gets_a_new_id(backend: Backend) -> None:
    """TRUNCATE of every table (a reset, the test suite's pool) takes the migration's row with
    it: the first process to ask makes a new id, and every later ask reads that one."""
    runtime = await Runtime.open(settings_for(backend))
    try:
        made = await runtime.store.store_id()
        async with runtime.store._engines.write.begin() as conn:
            await conn.execute(text("DELETE FROM store_identity"))
        again = await runtime.store.store_id()
        assert again != made and len(again) == 32
        assert await runtime.store.store_id() == again
    finally:
        await runtime.close()
