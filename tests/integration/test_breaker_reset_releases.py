"""A breaker reset releases the steps waiting behind it (docs/architecture.md, 'Circuit
breakers'): an operator who closes a tenant breaker says the destination is fixed, so the
fan-out's children redispatched behind it run at once, not at their redispatch time, and no
front door says the breaker is open any more. Time is a `FakeClock` that never moves: the
children's redispatch time never comes, so the run ends only if the reset released them."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import queue
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.test_breaker_reset_flow import fan_out

CHILDREN = 12


def renamed(workflows: list[Workflow], name: str) -> list[Workflow]:
    """`fan_out`'s parent and child under names of their own (`name`, `name-child`)."""
    parent, child = (w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows)
    parent["name"], child["name"] = name, f"{name}-child"
    parent["vertices"]["each"]["config"]["workflow"] = child["name"]
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


async def parked_children(ops: Operations, run_id: str, children: int) -> str:
    """The text of the fan-out's `breaker_open` group once `children` children wait in it
    (bounded: 20 s of looks 50 ms apart)."""
    for _ in range(400):
        groups = (await ops.runs.progress(run_id)).fanout.waiting
        parked = [g for g in groups if g.reason == "breaker_open"]
        if parked and parked[0].children == children:
            return parked[0].text
        await asyncio.sleep(0.05)
    raise AssertionError(f"the children of {run_id} never all waited on the breaker: {groups}")


@pytest.mark.parametrize(
    ("tenant", "batch"),
    [("default", 1_000), (None, 1_000), ("default", 5)],
    ids=["tenant-layer", "every-layer", "in-batches-of-5"],
)
async def test_a_breaker_reset_runs_the_children_waiting_behind_it(
    backend: Backend,
    downstream: RunningDownstream,
    tenant: str | None,
    batch: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tenant layer's reset (`--tenant default`), or the destination's (every layer);
    released a batch at a time (5 here: three transactions for the 12)."""
    monkeypatch.setattr(queue, "RELEASE_BATCH", batch)
    destination = f"brk-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    downstream.script([500] * 5, path="/outage")  # five failures open the tenant breaker
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, idle_poll_s=0.05), clock=clock)
    try:
        ops = Operations(runtime)
        async with running_worker(runtime):
            outage = await start(
                runtime, fan_out(f"{downstream.url}/outage", destination), list(range(5))
            )
            assert (await wait_for_run(runtime, outage)).status == "FAILED"
            # The downstream answers 200 on /fixed; the children are refused by the open
            # breaker and redispatched (1/2) for when it half-opens, 30 s of a clock that
            # never gets there.
            waiters = renamed(fan_out(f"{downstream.url}/fixed", destination, 2), "waiters")
            run_id = await start(runtime, waiters, list(range(CHILDREN)))
            before = await parked_children(ops, run_id, CHILDREN)
            # Another tenant's reset releases nothing of this tenant's (a tenant the engine
            # knows: one it does not is refused as a typo's).
            await ops.settings.set_tenant_rate("other", 100)
            other = await ops.settings.reset_breakers(destination, "other")
            still = await parked_children(ops, run_id, CHILDREN)
            reset = await ops.settings.reset_breakers(destination, tenant)
            now = clock.now()
            steps = [
                step
                for child in await runtime.store.children(run_id)
                for step in await runtime.store.get_steps(child.id)
            ]
            after = (await ops.runs.progress(run_id)).fanout.waiting
            run = await wait_for_run(runtime, run_id, timeout_s=20)
    finally:
        await runtime.close()
    assert "is open" in before and "is open" in still
    assert (other.closed, other.steps_released) == ([], 0)
    # Right after the reset, in the store: every child's step claimable now, not saying why
    # it waited; none of the fan-out's children is said to wait.
    assert len(steps) == CHILDREN
    assert [s for s in steps if s.status == "READY" and s.not_before > now] == []
    assert [s.wait_reason for s in steps if s.wait_reason is not None] == []
    assert [g.reason for g in after] == []
    assert [(c.layer, c.tenant_id, c.was) for c in reset.closed] == [("tenant", "default", "open")]
    assert reset.steps_released == CHILDREN
    # The clock never moved: the children ran because they were released.
    assert run.status == "SUCCEEDED", run.error
    assert clock.now() == now
