"""Regressions found in review: stopped runs stay stopped, and reprocess re-opens joins and
held steps correctly (store level, both backends, injected clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine.store import Store
from engine.store.records import (
    ClaimedStep,
    StepAwaitingChildren,
    StepFailed,
    StepParked,
    StepSucceeded,
)
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.conftest import Backend

PARENT = Workflow.model_validate(
    {
        "name": "parent",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input }}", "workflow": "child"}},
            "join": {
                "type": "MERGE",
                "dependsOn": ["each"],
                "config": {
                    "tolerateChildFailures": ["FAILED"],
                    "failureTolerance": {"maxFailures": 1},
                },
            },
        },
    }
)
# a and b run in parallel; c waits for b.
CHILD = Workflow.model_validate(
    {
        "name": "child",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
            "b": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/b"}},
            "c": {"type": "GATEWAY", "dependsOn": ["b"], "config": {"url": "http://127.0.0.1:1/c"}},
        },
    }
)
BAD = {"kind": "http_error", "message": "400"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(backend: Backend, clock: FakeClock) -> AsyncIterator[Store]:
    store = await Store.open(backend.database_url, clock)
    await store.publish(CHILD)
    await store.publish(PARENT)
    yield store
    await store.close()


def by_vertex(claimed: list[ClaimedStep]) -> dict[str, ClaimedStep]:
    return {c.vertex_id: c for c in claimed}


async def test_expired_lease_of_a_failed_run_does_not_run_again(
    store: Store, clock: FakeClock
) -> None:
    version = await store.get_version("child")
    run, _ = await store.create_run(version, None)
    steps = by_vertex(await store.claim(10, lease_s=5))
    await store.complete([StepFailed(steps["a"], BAD)])  # the run fails; b is still running
    clock.advance(6)  # b's worker died
    await store.requeue_expired()
    assert await store.claim(10, lease_s=5) == []
    status = {s.vertex_id: s.status for s in await store.get_steps(run.id)}
    assert status == {"a": "FAILED", "b": "PENDING", "c": "PENDING"}


async def _fan_out(store: Store, n: int) -> tuple[str, ClaimedStep]:
    """A parent run whose spawner created `n` children and is waiting for them."""
    parent = await store.get_version("parent")
    child = await store.get_version("child")
    run, _ = await store.create_run(parent, [{"i": i} for i in range(n)])
    (spawner,) = await store.claim(1, lease_s=60)
    from engine.store.records import ChildRow

    rows = [ChildRow(i, f'{{"i":{i}}}', None) for i in range(n)]
    await store.create_children(spawner, child, n, rows)
    await store.complete([StepAwaitingChildren(spawner, n)])
    return run.id, spawner


async def _run_children(store: Store, fail_a_of: set[int]) -> None:
    """Drive every child: `a` fails in the children listed, everything else succeeds."""
    for _ in range(20):
        claimed = await store.claim(100, lease_s=60)
        if all(c.vertex_id == "join" for c in claimed):
            await store.complete([StepParked(c, 0.0, "joined later by the test") for c in claimed])
            return
        results: list[Any] = []
        for step in claimed:
            if step.vertex_id == "join":
                results.append(StepParked(step, 0.0, "joined later by the test"))
            elif step.vertex_id == "a" and step.item_index in fail_a_of:
                results.append(StepFailed(step, BAD))
            else:
                results.append(StepSucceeded(step, {"v": step.vertex_id}))
        await store.complete(results)


async def _finish_parent(store: Store, run_id: str) -> str:
    for _ in range(5):
        claimed = await store.claim(10, lease_s=60)
        joins = [c for c in claimed if c.run_id == run_id and c.vertex_id == "join"]
        if joins:
            await store.complete([StepSucceeded(joins[0], {"merged": True})])
            break
    run = await store.get_run(run_id)
    assert run is not None
    return run.status


async def test_reprocess_runs_held_steps_and_reopens_a_succeeded_join(store: Store) -> None:
    run_id, _ = await _fan_out(store, 3)
    await _run_children(store, fail_a_of={1})
    # Child 1 failed at `a` (b may have succeeded, c held back); 1 failure is tolerated.
    assert await _finish_parent(store, run_id) == "SUCCEEDED"
    dead = await store.children(run_id, status="FAILED")
    assert [c.item_index for c in dead] == [1]

    assert await store.reprocess(run_id) == 1
    run = await store.get_run(run_id)
    assert run is not None and run.status == "RUNNING"
    await _run_children(store, fail_a_of=set())
    children = await store.children(run_id)
    assert [c.status for c in children] == ["SUCCEEDED"] * 3
    assert await _finish_parent(store, run_id) == "SUCCEEDED"
    counts = await store.spawner_counts(run_id, "each")
    assert (counts.succeeded, counts.failed) == (3, 0)


async def test_reprocess_starts_the_steps_it_reopens_over(store: Store) -> None:
    """A step downstream of a reopened join runs again from the start: its redispatches and
    its tenant item anew (the previous run's are not carried over)."""
    run_id, _ = await _fan_out(store, 2)
    await _run_children(store, fail_a_of={1})
    overload = {"kind": "external_overload", "message": "503"}
    for _ in range(5):  # the join is redispatched once, having taken its tenant item
        joins = [c for c in await store.claim(10, lease_s=60) if c.vertex_id == "join"]
        if joins:
            await store.complete(
                [StepFailed(joins[0], overload, retry_at=0.0, tenant_item_taken=True)]
            )
            break
    (redispatched,) = [c for c in await store.claim(10, lease_s=60) if c.vertex_id == "join"]
    assert (redispatched.auto_retries, redispatched.tenant_item_taken) == (1, True)
    await store.complete([StepSucceeded(redispatched, {"merged": True})])
    assert await store.reprocess(run_id) == 1
    await _run_children(store, fail_a_of=set())
    for _ in range(5):
        joins = [c for c in await store.claim(10, lease_s=60) if c.vertex_id == "join"]
        if joins:
            break
    assert (joins[0].auto_retries, joins[0].tenant_item_taken) == (0, False)


async def test_concurrent_reprocess_revives_each_dead_letter_once(store: Store) -> None:
    run_id, _ = await _fan_out(store, 4)
    await _run_children(store, fail_a_of={0, 2})
    revived = await asyncio.gather(store.reprocess(run_id), store.reprocess(run_id))
    assert sorted(revived) == [0, 2]
    counts = await store.spawner_counts(run_id, "each")
    assert counts.failed == 0
    await _run_children(store, fail_a_of=set())
    assert await _finish_parent(store, run_id) == "SUCCEEDED"
