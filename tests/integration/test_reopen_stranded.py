"""A step held back while its run was stopped, and an operator's reopen of that run.

A flush that records a redispatch reads the step's run without locking it; when the run
is stopped it holds the step back as PENDING. If a Retry reopens the run while that flush's
transaction is still open, the Retry cannot see the held step (not committed yet), and the
step commits PENDING in a RUNNING run: nothing would ever make it READY. The reaper's
`release_stranded` is the safety net for that, and for the same window in a requeue or a
dependant's unlock. The race itself needs two writers at once: PostgreSQL only (SQLite runs
one writing transaction at a time); the safety net's rules run on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from engine.execution.worker import WorkerConfig
from engine.runtime import Runtime
from engine.store import Store
from engine.store import results as results_
from engine.store.queue import REOPENED_RECHECK_S
from engine.store.records import StepFailed
from schemas.clock import FakeClock
from tests.conftest import Backend
from tests.integration.actions_harness import wait_until
from tests.integration.engine_harness import settings_for
from tests.integration.test_store_contract import CHAIN


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def pg_store(pg_database_url: str, clock: FakeClock) -> AsyncIterator[Store]:
    store = await Store.open(pg_database_url, clock)
    yield store
    await store.close()


@pytest.fixture
async def store(backend: Backend, clock: FakeClock) -> AsyncIterator[Store]:
    store = await Store.open(backend.database_url, clock)
    yield store
    await store.close()


async def step_a(store: Store, run_id: str) -> tuple[Any, ...]:
    async with store._engines.read.connect() as conn:
        query = (
            "SELECT step.status, step.deps_pending, step.claim_token IS NULL, run.status "
            "FROM step JOIN run ON run.id = step.run_id "
            "WHERE step.run_id = :r AND step.vertex_id = 'a'"
        )
        return tuple((await conn.execute(text(query), {"r": run_id})).one())


async def sql(store: Store, statement: str, **values: Any) -> None:
    async with store._engines.write.begin() as conn:
        await conn.execute(text(statement), values)


async def test_a_retry_during_a_redispatch_flush_is_caught_by_the_reaper(
    pg_store: Store, clock: FakeClock
) -> None:
    store = pg_store
    run, _ = await store.create_run(await store.publish(CHAIN), None)
    (claimed,) = await store.claim(10, lease_s=30)
    # Another step of the run failed it meanwhile (the flush that did so has committed).
    await sql(store, "UPDATE run SET status = 'FAILED' WHERE id = :r", r=run.id)
    redispatch = StepFailed(claimed, {"kind": "http", "message": "503"}, retry_at=clock.now() + 1)
    async with store._engines.write.begin() as conn:
        # A worker's flush of a 503 to call again: the run reads as stopped, the step is held.
        live, _ = await results_.live_claims(conn, [redispatch])
        await results_.release(conn, live, clock.now())
        # The operator's Retry commits while that flush is still open.
        outcome = await store.retry_runs([run.id], actor="test")
        assert outcome.retried == [run.id]
    assert await step_a(store, run.id) == ("PENDING", 0, True, "RUNNING"), "the race's outcome"
    assert await store.claim(10, lease_s=30) == []

    released = await store.release_stranded()
    assert [(run_id, vertex) for _, run_id, vertex in released] == [(run.id, "a")]
    assert await step_a(store, run.id) == ("READY", 0, True, "RUNNING")
    (again,) = await store.claim(10, lease_s=30)
    assert again.vertex_id == "a"
    assert await store.release_stranded() == []


async def held_step_in(store: Store, run_status: str, reopened_at: float | None) -> str:
    """A run in `run_status` whose step `a` is held back (PENDING, no dependency left)."""
    run, _ = await store.create_run(await store.publish(CHAIN), None)
    await sql(
        store,
        "UPDATE run SET status = :s, reopened_at = :t WHERE id = :r",
        s=run_status,
        t=reopened_at,
        r=run.id,
    )
    await sql(
        store, "UPDATE step SET status = 'PENDING' WHERE run_id = :r AND vertex_id = 'a'", r=run.id
    )
    return run.id


async def test_only_held_steps_of_runs_reopened_lately_are_released(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    stranded = await held_step_in(store, "RUNNING", now - 5)
    still_failed = await held_step_in(store, "FAILED", now - 5)
    never_reopened = await held_step_in(store, "RUNNING", None)
    long_ago = await held_step_in(store, "RUNNING", now - REOPENED_RECHECK_S - 1)
    # Steps still waiting for a dependency are not held: `b` of the stranded run keeps waiting.
    released = await store.release_stranded()
    assert [(run_id, vertex) for _, run_id, vertex in released] == [(stranded, "a")]
    assert (await step_a(store, stranded))[0] == "READY"
    for run_id in (still_failed, never_reopened, long_ago):
        assert (await step_a(store, run_id))[0] == "PENDING", run_id
    async with store._engines.read.connect() as conn:
        query = "SELECT status FROM step WHERE run_id = :r AND vertex_id = 'b'"
        assert (await conn.execute(text(query), {"r": stranded})).scalar_one() == "PENDING"
    async with store._engines.read.connect() as conn:
        query = "SELECT message FROM run_log WHERE run_id = :r AND vertex_id = 'a'"
        messages = (await conn.execute(text(query), {"r": stranded})).scalars().all()
    assert any("released" in m for m in messages), messages
    # As a worker starts it looks at every RUNNING run, reopened lately or not.
    released = await store.release_stranded(every_run=True)
    assert {run_id for _, run_id, _ in released} == {never_reopened, long_ago}
    assert (await step_a(store, still_failed))[0] == "PENDING"


async def test_an_operators_reopen_stamps_the_run(store: Store, clock: FakeClock) -> None:
    run, _ = await store.create_run(await store.publish(CHAIN), None)
    (claimed,) = await store.claim(10, lease_s=30)
    await store.complete([StepFailed(claimed, {"kind": "http", "message": "422"})])
    clock.advance(7)
    assert (await store.retry_runs([run.id], actor="test")).retried == [run.id]
    async with store._engines.read.connect() as conn:
        query = "SELECT reopened_at FROM run WHERE id = :r"
        assert (await conn.execute(text(query), {"r": run.id})).scalar_one() == clock.now()


async def test_the_reaper_releases_a_stranded_step_and_says_so(backend: Backend) -> None:
    """A worker that claims nothing (concurrency 0) only reaps: the step a race left held in
    a reopened run becomes READY, and a watch of the run wakes."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    try:
        run_id = await held_step_in(runtime.store, "RUNNING", clock.now())
        reaper = runtime.worker(WorkerConfig(concurrency=0, lease_s=0.3, idle_poll_s=0.05))
        stop = asyncio.Event()
        with runtime.run_events.watch(run_id) as watch:
            task = asyncio.create_task(reaper.run(stop))
            try:

                async def released() -> bool:
                    return (await step_a(runtime.store, run_id))[0] == "READY"

                await wait_until(released, timeout_s=20)
                assert await watch.wait(5.0), "no run event for the released step's run"
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    finally:
        await runtime.close()
