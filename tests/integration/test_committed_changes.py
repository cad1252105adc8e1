"""engine.store.committed_changes on both backends: the store reports a change to a routing
row (`workflow_serving`) once it is committed, whichever statement made it, and never one that
was rolled back or that touched other tables."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text, update

from engine.store import Store
from engine.store.committed_changes import SERVING_TOPIC
from engine.store.deployment_rows import serving
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.operations_harness import single


def workflow(name: str, url: str = "http://127.0.0.1:9/x") -> Workflow:
    return Workflow.model_validate(single(name, url))


class Reports:
    """What the store reported, and what a read started at each report saw."""

    def __init__(self, store: Store) -> None:
        self.topics: list[str] = []
        self.seen: list[asyncio.Task[Any]] = []
        self._store = store

    def __call__(self, topic: str) -> None:
        self.topics.append(topic)
        self.seen.append(asyncio.get_running_loop().create_task(self._store.serving("orders")))


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    opened = await Store.open(backend.database_url, FakeClock())
    yield opened
    await opened.close()


async def test_a_first_publish_and_a_switch_are_reported_once_committed(store: Store) -> None:
    reports = Reports(store)
    store.on_committed_change(reports)
    await store.publish(workflow("orders"))
    assert reports.topics == [SERVING_TOPIC], "the first version serves at once: a new row"
    assert (await reports.seen[0]).serving_version == 1
    await store.publish(workflow("orders", "http://127.0.0.1:9/y"))
    assert reports.topics == [SERVING_TOPIC], "a later version moves no traffic: no change"
    await store.set_serving("orders", 2, actor="test")
    assert reports.topics == [SERVING_TOPIC, SERVING_TOPIC]
    seen = await reports.seen[1]
    assert seen is not None and seen.serving_version == 2, "a read at the report sees it"


async def test_a_rolled_back_change_and_other_tables_are_not_reported(store: Store) -> None:
    await store.publish(workflow("orders"))
    reports = Reports(store)
    store.on_committed_change(reports)
    with pytest.raises(RuntimeError):
        async with store._engines.write.begin() as conn:
            await conn.execute(update(serving).values(updated_by="nobody"))
            raise RuntimeError("rolled back")
    await store.create_run(await store.get_version("orders"), {}, tenant_id="acme")
    assert reports.topics == []
    async with store._engines.write.begin() as conn:  # whatever writes it, it is seen
        await conn.execute(update(serving).values(updated_by="somebody"))
    assert reports.topics == [SERVING_TOPIC]
    await asyncio.gather(*reports.seen)


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_the_report_comes_after_the_commit_not_before(store: Store) -> None:
    # A deferred trigger makes each commit that changed a routing row take 300 ms: a report
    # made before the commit would start its read while the old row is still the committed one.
    await store.publish(workflow("orders"))
    await store.publish(workflow("orders", "http://127.0.0.1:9/y"))
    async with store._engines.write.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON workflow_serving "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
            )
        )
    reports = Reports(store)
    store.on_committed_change(reports)
    await store.set_serving("orders", 2, actor="test")
    assert reports.topics == [SERVING_TOPIC]
    seen = await reports.seen[0]
    assert seen is not None and seen.serving_version == 2


async def test_sql_text_and_the_read_engine_are_watched_too(store: Store) -> None:
    await store.publish(workflow("orders"))
    reports = Reports(store)
    store.on_committed_change(reports)
    async with store._engines.write.begin() as conn:
        await conn.execute(text("UPDATE workflow_serving SET updated_by = 'psql-like'"))
    assert reports.topics == [SERVING_TOPIC]
    async with store._engines.write.begin() as conn:
        await conn.execute(text("SELECT name FROM workflow_serving"))
        await conn.execute(text("UPDATE workflow_version SET created_at = created_at"))
    assert reports.topics == [SERVING_TOPIC], "a query, or another table: nothing"
    async with store._engines.read.connect() as conn:  # its own pool on SQLite
        await conn.execute(update(serving).values(updated_by="reader"))
        await conn.commit()
    assert reports.topics == [SERVING_TOPIC, SERVING_TOPIC]
    await asyncio.gather(*reports.seen)  # their reads end before the store closes
