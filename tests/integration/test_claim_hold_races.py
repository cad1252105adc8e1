"""The claim's stopped-run backstop against an operator's Retry of the same run, on PostgreSQL.

A claim that reads a step's run as stopped puts the step back to PENDING (`claims.hold`),
and a Retry makes a FAILED run's held steps READY again. When the two meet, the step must
end up claimable, never PENDING in a RUNNING run where nothing would ever make it READY.
Both orders are driven by hand here, a claim's transaction held open between its
statements. PostgreSQL only: SQLite runs one writing transaction at a time, so the two
cannot interleave there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import Store, claims
from schemas.clock import FakeClock
from tests.integration.test_store_contract import CHAIN


@pytest.fixture
async def store(pg_database_url: str) -> AsyncIterator[Store]:
    store = await Store.open(pg_database_url, FakeClock())
    yield store
    await store.close()


async def failed_run_with_a_ready_step(store: Store) -> str:
    """A FAILED run whose first step is READY: what a flush that made the step READY leaves
    when another flush failed the run just before (the race the backstop is for)."""
    run, _ = await store.create_run(await store.publish(CHAIN), None)
    async with store._engines.write.begin() as conn:
        await conn.execute(text("UPDATE run SET status = 'FAILED' WHERE id = :r"), {"r": run.id})
    return run.id


async def first_step(store: Store, run_id: str) -> tuple[Any, ...]:
    async with store._engines.read.connect() as conn:
        query = (
            "SELECT status, claim_token IS NOT NULL FROM step WHERE run_id = :r AND vertex_id = 'a'"
        )
        return tuple((await conn.execute(text(query), {"r": run_id})).one())


async def test_a_retry_between_the_claim_and_its_backstop_lets_the_step_run(store: Store) -> None:
    run_id = await failed_run_with_a_ready_step(store)
    async with store._engines.write.begin() as conn:
        rows = await claim_rows(store, conn)
        assert [row.run_status for row in rows] == ["FAILED"]
        # The operator's Retry commits while the claim's transaction is open.
        outcome = await store.retry_runs([run_id], actor="test")
        assert outcome.retried == [run_id]
        claimed = await store._claimed(conn, rows)
    assert [step.vertex_id for step in claimed] == ["a"], "the run is RUNNING again: run it"
    assert await first_step(store, run_id) == ("RUNNING", True)


async def test_a_retry_during_the_backstop_releases_the_held_step(store: Store) -> None:
    run_id = await failed_run_with_a_ready_step(store)
    async with store._engines.write.begin() as conn:
        rows = await claim_rows(store, conn)
        assert await store._claimed(conn, rows) == []  # held back, the transaction still open
        retry = asyncio.create_task(store.retry_runs([run_id], actor="test"))
        # The Retry must wait for the claim's lock on the run, not slip past the held step.
        async with asyncio.timeout(10):
            while not retry.done() and not await waiting_for_a_lock(store):
                await asyncio.sleep(0.02)
        assert not retry.done(), "the Retry did not wait for the claim that held its step"
    outcome = await asyncio.wait_for(retry, 10)
    assert outcome.retried == [run_id]
    assert await first_step(store, run_id) == ("READY", False)
    (step,) = await store.claim(10, lease_s=30)
    assert step.vertex_id == "a"


async def claim_rows(store: Store, conn: AsyncConnection) -> list[Any]:
    """The claim's first statement, in the caller's transaction (`WorkQueue.claim`'s)."""
    return await claims.claim_rows(
        conn, store._clock.now(), 10, 30.0, claims.new_batch(), tenants=[]
    )


async def waiting_for_a_lock(store: Store) -> bool:
    async with store._engines.read.connect() as conn:
        query = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool((await conn.execute(text(query))).scalar_one())
