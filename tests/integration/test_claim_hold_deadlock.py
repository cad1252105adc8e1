"""The claim's backstop never waits for a run's lock, on PostgreSQL: it holds its claimed steps
while it reads their stopped runs again, and a flush holding one of those runs' locks (counting
down a success in it) may be waiting for one of those steps (holding back the READY steps of
another run it fails). Waiting would deadlock; the backstop gives such a run's steps back READY
instead. And a Retry holding a run's lock does not make a claim wait either."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from engine.store import Store
from engine.store import results as results_
from engine.store.records import StepFailed, StepSucceeded
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.integration.test_claim_hold_races import (
    claim_rows,
    failed_run_with_a_ready_step,
    first_step,
    waiting_for_a_lock,
)

TRIO = Workflow.model_validate(
    {
        "name": "trio",
        "vertices": {
            v: {"type": "GATEWAY", "config": {"url": f"http://127.0.0.1:1/{v}"}}
            for v in ("a", "b", "c")
        },
    }
)


@pytest.fixture
async def store(pg_database_url: str) -> AsyncIterator[Store]:
    store = await Store.open(pg_database_url, FakeClock())
    yield store
    await store.close()


async def sql(store: Store, query: str, **params: Any) -> None:
    async with store._engines.write.begin() as conn:
        await conn.execute(text(query), params)


async def test_a_claim_holding_back_a_step_and_a_failing_flush(store: Store) -> None:
    await claim_beside_a_failing_flush(store)


async def claim_beside_a_failing_flush(store: Store) -> None:
    """A claim of a FAILED run's READY step and a RUNNING run's, while a flush that holds the
    FAILED run's lock waits for the RUNNING run's step; both must end without an error."""
    version = await store.publish(TRIO)
    r1, _ = await store.create_run(version, None)
    r2, _ = await store.create_run(version, None)
    # Leave r1.c and r2.c for the claim under test; the flush holds r1.a and r2.a.
    await sql(store, "UPDATE step SET status='PENDING' WHERE vertex_id IN ('b','c')")
    flushed = {(c.run_id, c.vertex_id): c for c in await store.claim(10, lease_s=30)}
    assert len(flushed) == 2
    await sql(store, "UPDATE step SET status='READY' WHERE vertex_id = 'c'")
    # r1 failed (another step's flush) after its step c became READY: the backstop's case.
    await sql(store, "UPDATE run SET status='FAILED' WHERE id = :r", r=r1.id)

    async def flush() -> None:
        await store.complete(
            [
                StepSucceeded(flushed[(r1.id, "a")], {"v": 1}),  # a straggler of r1
                StepFailed(flushed[(r2.id, "a")], {"message": "boom"}),  # fails r2
            ]
        )

    async def claim() -> list[Any]:
        async with store._engines.write.begin() as conn:
            rows = await claim_rows(store, conn)  # r1.c (FAILED run), r2.c (RUNNING run)
            assert sorted(r.run_status for r in rows) == ["FAILED", "RUNNING"]
            task = asyncio.create_task(flush())
            async with asyncio.timeout(10):
                while not await waiting_for_a_lock(store):  # the flush waits for r2.c
                    await asyncio.sleep(0.02)
            try:
                return await store._claimed(conn, rows)  # FOR SHARE of r1: the flush holds it
            finally:
                flush_task.append(task)

    flush_task: list[asyncio.Task[None]] = []
    outcomes = await asyncio.gather(claim(), return_exceptions=True)
    outcomes += await asyncio.gather(*flush_task, return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert not errors, errors


async def step_states(store: Store) -> dict[tuple[str, str], tuple[str, bool]]:
    async with store._engines.read.connect() as conn:
        rows = await conn.execute(
            text("SELECT run_id, vertex_id, status, claim_token IS NOT NULL AS c FROM step")
        )
        return {(r.run_id, r.vertex_id): (r.status, r.c) for r in rows}


async def test_after_the_flush_the_given_back_step_is_held_by_the_next_claim(
    store: Store,
) -> None:
    await claim_beside_a_failing_flush(store)
    (r1,) = [
        r for (r, v), s in (await step_states(store)).items() if v == "a" and s[0] == "SUCCEEDED"
    ]
    # The flush had r1 locked: its step c went back to READY, not run, not held.
    assert (await step_states(store))[(r1, "c")] == ("READY", False)
    assert await store.claim(10, lease_s=30) == []  # r1 is still FAILED: held back now
    assert (await step_states(store))[(r1, "c")] == ("PENDING", False)


async def test_a_claim_meeting_a_retry_that_holds_the_run_lock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await failed_run_with_a_ready_step(store)
    paused, resume = asyncio.Event(), asyncio.Event()
    original = results_.insert_logs

    async def insert_logs(conn: Any, lines: Any, now: float) -> None:
        if not paused.is_set():
            paused.set()
            await resume.wait()  # inside the Retry's transaction: the run reopened, locked
        await original(conn, lines, now)

    monkeypatch.setattr(results_, "insert_logs", insert_logs)
    retry = asyncio.create_task(store.retry_runs([run_id], actor="test"))
    await asyncio.wait_for(paused.wait(), 10)
    async with store._engines.write.begin() as conn:
        rows = await claim_rows(store, conn)
        assert [row.run_status for row in rows] == ["FAILED"]
        claimed = await asyncio.wait_for(store._claimed(conn, rows), 5)  # no wait
    assert claimed == []
    resume.set()
    assert (await asyncio.wait_for(retry, 10)).retried == [run_id]
    assert await first_step(store, run_id) == ("READY", False)
    (step,) = await store.claim(10, lease_s=30)
    assert step.vertex_id == "a"
