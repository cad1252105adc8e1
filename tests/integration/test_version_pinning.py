"""The child-workflow versions of a run tree are fixed once, when its root run is created:
each child workflow's serving version then (both backends, real store, the real executor, an
injected clock)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine.execution import executor, fanout
from engine.runtime import Runtime
from engine.store.records import ClaimedStep, StepAwaitingChildren, StepFailed
from schemas.clock import FakeClock
from schemas.definitions import SpawnerConfig, Workflow
from schemas.errors import StepFailure
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for

LEASE_S = 60.0
BATCH = 10


def spawning(name: str, child: str, **extra: Any) -> Workflow:
    """A workflow whose one spawner starts `child` for each element of its input's items."""
    return Workflow.model_validate(
        {
            "name": name,
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": child, **extra},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"]},
            },
        }
    )


def leaf(name: str, path: str) -> Workflow:
    """A one-GATEWAY workflow; `path` tells its versions apart (it is never called here)."""
    return Workflow.model_validate(
        {
            "name": name,
            "vertices": {
                "call": {"type": "GATEWAY", "config": {"url": f"http://127.0.0.1:1/{path}"}}
            },
        }
    )


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, spawn_batch=BATCH), clock=clock)
    yield runtime, clock
    await runtime.close()


async def claim_spawners(runtime: Runtime, run_ids: set[str]) -> list[ClaimedStep]:
    """Claim every READY step and return the `each` steps of `run_ids`, one per run (the
    other claimed steps, children's GATEWAY calls, are left to their leases)."""
    claimed = await runtime.store.claim(1000, lease_s=LEASE_S)
    spawners = [s for s in claimed if s.run_id in run_ids and s.vertex_id == "each"]
    assert sorted(s.run_id for s in spawners) == sorted(run_ids)
    return spawners


async def child_versions(runtime: Runtime, run_id: str) -> list[int]:
    return [c.workflow_version for c in await runtime.store.children(run_id, limit=1000)]


async def test_a_spawner_run_again_after_a_publish_starts_every_child_on_the_pinned_version(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    runtime, clock = clocked
    store = runtime.store
    await store.publish(leaf("child", "v1"))
    parent = await store.publish(spawning("parent", "child"))
    run, _ = await store.create_run(parent, {"items": list(range(3 * BATCH))})
    assert run.pinned_versions == {"child": 1}
    (first,) = await claim_spawners(runtime, {run.id})
    assert first.pinned_versions == {"child": 1}

    async def worker_dies_after_its_first_batch() -> None:
        # Called once a batch of children exists: the worker stops renewing its lease, the
        # step is requeued, and v2 of the child is published before the spawner runs again.
        if clock.now() < first_deadline:
            clock.advance(LEASE_S + 1)
            assert len(await store.requeue_expired()) == 1
            await store.publish(leaf("child", "v2"))

    first_deadline = clock.now() + LEASE_S
    dying = dataclasses.replace(runtime.executor_deps(), notify=worker_dies_after_its_first_batch)
    lost, _ = await executor.execute(first, parent.workflow, dying)
    assert isinstance(lost, StepFailed) and "lost its claim" in lost.error["message"]
    assert (await store.complete([lost])).dropped == [first.step_id]
    assert await child_versions(runtime, run.id) == [1] * BATCH
    assert (await store.get_version("child")).version == 2

    (again,) = await claim_spawners(runtime, {run.id})
    assert again.step_id == first.step_id and again.attempts == 2
    result, lines = await executor.execute(again, parent.workflow, runtime.executor_deps())
    assert isinstance(result, StepAwaitingChildren) and result.total == 3 * BATCH
    assert any(f"{2 * BATCH} created, {BATCH} re-attached" in line.message for line in lines)
    assert await child_versions(runtime, run.id) == [1] * (3 * BATCH)
    children = await store.children(run.id, limit=1000)
    assert {c.pinned_versions == {"child": 1} for c in children} == {True}

    # Publishing alone moves no traffic: a root run created after the publish still pins
    # the serving v1; once v2 serves, new roots pin (and start) it.
    still, _ = await store.create_run(parent, {"items": [0, 1]})
    assert still.pinned_versions == {"child": 1}
    await store.set_serving("child", 2, actor="test")
    later, _ = await store.create_run(parent, {"items": [0, 1]})
    assert later.pinned_versions == {"child": 2}
    (spawner,) = await claim_spawners(runtime, {later.id})
    result, _ = await executor.execute(spawner, parent.workflow, runtime.executor_deps())
    assert isinstance(result, StepAwaitingChildren)
    assert await child_versions(runtime, later.id) == [2, 2]


async def test_grandchildren_use_the_versions_pinned_at_the_root(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    runtime, _ = clocked
    store = runtime.store
    await store.publish(leaf("leaf", "v1"))
    await store.publish(spawning("mid", "leaf"))
    top = await store.publish(spawning("top", "mid", input={"items": [0, 1]}))
    run, _ = await store.create_run(top, {"items": [0, 1, 2]})
    assert run.pinned_versions == {"mid": 1, "leaf": 1}
    # New versions of both child workflows before anything runs.
    await store.publish(leaf("leaf", "v2"))
    mid_v2 = await store.publish(spawning("mid", "leaf", input={"v": 2}))
    assert mid_v2.version == 2

    (spawner,) = await claim_spawners(runtime, {run.id})
    result, _ = await executor.execute(spawner, top.workflow, runtime.executor_deps())
    assert isinstance(result, StepAwaitingChildren)
    await store.complete([result])
    mids = await store.children(run.id)
    assert [m.workflow_version for m in mids] == [1, 1, 1]
    assert {m.pinned_versions == {"mid": 1, "leaf": 1} for m in mids} == {True}

    mid_v1 = await store.get_version("mid", 1)
    for step in await claim_spawners(runtime, {m.id for m in mids}):
        assert step.pinned_versions == {"mid": 1, "leaf": 1}
        result, _ = await executor.execute(step, mid_v1.workflow, runtime.executor_deps())
        assert isinstance(result, StepAwaitingChildren) and result.total == 2
        assert await child_versions(runtime, step.run_id) == [1, 1]
        leaves = await store.children(step.run_id)
        assert {c.pinned_versions == {"mid": 1, "leaf": 1} for c in leaves} == {True}

    # A new root run pins the serving versions of the whole tree: still v1 until the new
    # versions serve.
    unchanged, _ = await store.create_run(top, {"items": []})
    assert unchanged.pinned_versions == {"mid": 1, "leaf": 1}
    await store.set_serving("leaf", 2, actor="test")
    await store.set_serving("mid", 2, actor="test")
    later, _ = await store.create_run(top, {"items": []})
    assert later.pinned_versions == {"mid": 2, "leaf": 2}


async def test_pins_of_bulk_runs_explicit_versions_and_unpublished_children(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    runtime, _ = clocked
    store = runtime.store
    await store.publish(leaf("leaf", "v1"))
    await store.publish(leaf("leaf", "v2"))
    await store.publish(spawning("mid", "leaf"))
    await store.set_serving("leaf", 2, actor="test")
    # `mid@1` is pinned by its name itself, but the workflows it reaches are walked.
    explicit = await store.publish(spawning("explicit", "mid@1"))
    (bulk_a, bulk_b) = await store.create_runs(explicit, [{"items": []}, {"items": []}])
    for run_id in (bulk_a, bulk_b):
        bulk = await store.get_run(run_id)
        assert bulk is not None and bulk.pinned_versions == {"leaf": 2}
    # A child workflow that is not published yet has no pin (its spawner fails when it runs,
    # asking for it to be published).
    orphan = await store.publish(spawning("orphan", "nobody"))
    run, _ = await store.create_run(orphan, {"items": [1]})
    assert run.pinned_versions == {}
    # Given explicitly, the map is stored as it is.
    given, _ = await store.create_run(orphan, {"items": []}, pinned_versions={"nobody": 7})
    assert given.pinned_versions == {"nobody": 7}
    stored = await store.get_run(given.id)
    assert stored is not None and stored.pinned_versions == {"nobody": 7}


async def test_child_version_prefers_explicit_then_pinned_then_serving(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    runtime, _ = clocked
    store = runtime.store
    await store.publish(leaf("child", "v1"))
    await store.publish(leaf("child", "v2"))
    await store.publish(leaf("child", "v3"))
    await store.set_serving("child", 2, actor="test")
    unversioned = SpawnerConfig(items="{{ input }}", workflow="child")
    explicit = SpawnerConfig(items="{{ input }}", workflow="child@1")
    assert (await fanout.child_version(store, unversioned, {"child": 1})).version == 1
    assert (await fanout.child_version(store, explicit, {"child": 2})).version == 1
    # A run created before versions were pinned (no map), or a name the map lacks: the
    # serving version (not the latest, v3, which no deployment has moved traffic to).
    assert (await fanout.child_version(store, unversioned, None)).version == 2
    assert (await fanout.child_version(store, unversioned, {"other": 1})).version == 2
    missing = SpawnerConfig(items="{{ input }}", workflow="child@9")
    with pytest.raises(StepFailure, match="publish the child workflow first"):
        await fanout.child_version(store, missing, None)
