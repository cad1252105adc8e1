"""Cancelling runs through the operations layer (`Operations.actions.cancel`), on both
backends: whole trees of runs end CANCELLED in a few statements, in-flight results are dropped,
and a cancelled child counts in its parent's join."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterable, Iterator

import pytest

from demo.downstream import RunningDownstream
from engine.execution.worker import WorkerConfig
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import ClaimLost
from engine.store.records import ChildRow, StepAwaitingChildren, StepSucceeded
from schemas.errors import NotFound, WrongState
from tests.integration.actions_harness import (
    action_lines,
    failed_chain,
    fan_out,
    items,
    nested,
    single,
    statements,
    submit,
    wait_until,
)
from tests.integration.engine_harness import running_worker, wait_for_run


@contextlib.contextmanager
def announced(runtime: Runtime) -> Iterator[list[set[str]]]:
    """The run ids each cancel announces to the workers while the block runs."""
    told: list[set[str]] = []
    announce = runtime.cancellations.announce

    async def recording(run_ids: Iterable[str]) -> bool:
        told.append(set(run_ids))
        return await announce(told[-1])

    runtime.cancellations.announce = recording  # type: ignore[method-assign]
    try:
        yield told
    finally:
        del runtime.cancellations.announce


# ── cancel ──────────────────────────────────────────────────────────────────────────────────


async def test_cancel_of_a_running_5000_child_fan_out(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    n, concurrency = 5000, 16
    run_id = await submit(runtime, fan_out(downstream.url), {"items": items(n, sleep=3000)})
    config = WorkerConfig(concurrency=concurrency, claim_batch=concurrency, lease_s=30)
    async with running_worker(runtime, config) as worker:

        async def all_children_created() -> bool:
            steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
            return steps["each"] == "PARKED" and downstream.stats.in_flight > 0

        await wait_until(all_children_created, timeout_s=120)
        with statements(runtime) as sent:
            started = time.monotonic()
            result = await ops.actions.cancel(run_id, actor="cli")
            elapsed = time.monotonic() - started
        at_cancel = downstream.stats.total
        print(f"cancel: {elapsed:.2f} s, {len(sent)} statements, {result}")
        assert len(sent) <= 20, sent  # a handful of statements, not some per child
        assert elapsed < 10, elapsed

        async def drained() -> bool:
            return worker.in_flight == 0 and downstream.stats.in_flight == 0

        await wait_until(drained, timeout_s=60)
        assert await runtime.store.ready_depth() == 0
        assert await runtime.store.claim(100, lease_s=5) == []  # nothing left to start
    # Only steps already claimed at the cancel may still have sent their request.
    assert downstream.stats.total <= at_cancel + concurrency
    # The steps in flight were stopped (or, had their answers come first, dropped as late).
    assert worker.stats.abandoned + worker.stats.dropped > 0
    cancelled_children = result.runs_cancelled - 1
    children = await runtime.store.children(run_id, limit=n + 1)
    statuses = Counter(child.status for child in children)
    assert len(children) == n
    # Children that succeeded before the cancel keep their status; every other one is
    # CANCELLED, and no in-flight step's result turned one into SUCCEEDED afterwards.
    assert statuses == Counter(CANCELLED=cancelled_children, SUCCEEDED=n - cancelled_children)
    assert cancelled_children >= n - at_cancel
    run = await runtime.store.get_run(run_id)
    assert run is not None and run.status == "CANCELLED"
    steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
    assert steps == {"each": "CANCELLED", "join": "CANCELLED"}
    for child in children[:: n // 50]:
        if child.status == "CANCELLED":
            (step,) = await runtime.store.get_steps(child.id)
            assert step.status == "CANCELLED" and step.claim_token is None
    progress = await runtime.store.fanout_progress(run_id)
    assert (progress["cancelled"], progress["running"]) == (cancelled_children, 0)
    (line,) = await action_lines(runtime, run_id)
    assert line["data"] == {"action": "cancel", "actor": "cli"}


async def test_cancel_reaches_grandchildren(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    # The leaves' 8 s must span the spread of their starts across the two groups, the wait
    # below and the cancel on a loaded host: all six are still in flight when it lands.
    run_id = await submit(
        runtime, nested(downstream.url, leaf_sleep_ms=8000), {"groups": [{"leaves": [1, 2, 3]}] * 2}
    )
    async with running_worker(runtime) as worker:

        async def leaves_running() -> bool:
            # The six leaves call, and the three spawners' "awaiting children" are recorded:
            # on a loaded machine a spawner's result can still be on its way to the store
            # when the leaves start, and the cancel would then drop it too.
            return downstream.stats.in_flight == 6 and worker.stats.recorded == 3

        await wait_until(leaves_running)
        with announced(runtime) as told:
            result = await ops.actions.cancel(run_id, actor="cli")
        assert (result.changed, result.runs_cancelled, result.status) == (True, 9, "CANCELLED")
        mid_ids = {mid.id for mid in await runtime.store.children(run_id)}
        # What the workers are told: the root and the two groups name all nine runs' steps.
        assert told == [{run_id, *mid_ids}]
        steps = result.steps_cancelled
        assert result.message == f"cancelled with 8 runs under it ({steps} steps)"

        async def drained() -> bool:
            return worker.in_flight == 0

        await wait_until(drained)
    assert (worker.stats.abandoned, worker.stats.dropped) == (6, 0)  # stopped, not late
    mids = await runtime.store.children(run_id)
    leaves = [leaf for mid in mids for leaf in await runtime.store.children(mid.id)]
    assert [r.status for r in [*mids, *leaves]] == ["CANCELLED"] * 8
    for mid in mids:
        assert (await runtime.store.fanout_progress(mid.id))["cancelled"] == 3
    leaf_log = await action_lines(runtime, leaves[0].id)
    assert leaf_log[0]["message"] == f"cancelled by cli with run {run_id}"


async def test_a_cancelled_child_counts_in_its_parents_join(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    merge = {"tolerateChildFailures": ["CANCELLED"]}
    # The straggler's 8 s outlast, on a loaded host, the other two ending and the cancel.
    slow = [{"status": 200}, {"status": 200, "sleep": 8000}, {"status": 200}]
    run_id = await submit(runtime, fan_out(downstream.url, merge), {"items": slow})
    async with running_worker(runtime):

        async def others_done() -> bool:
            return (await runtime.store.fanout_progress(run_id))["succeeded"] == 2

        await wait_until(others_done)
        (straggler,) = await runtime.store.children(run_id, status="RUNNING")
        with announced(runtime) as told:
            result = await ops.actions.cancel(straggler.id, actor="cli")
        assert result.runs_cancelled == 1
        assert told == [{straggler.id}]  # not its parent: the parent goes on
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error  # the merge tolerates a cancelled child
    assert run.output["join"]["counts"] == {
        "total": 3, "succeeded": 2, "failed": 0, "cancelled": 1, "pending": 0
    }  # fmt: skip
    assert run.output["join"]["outputs"][1] is None


async def test_a_late_result_of_a_cancelled_run_is_dropped(
    ops: Operations, runtime: Runtime
) -> None:
    run_id = await submit(runtime, [single("http://127.0.0.1:1")], {})
    (step,) = await runtime.store.claim(10, lease_s=60)
    assert await runtime.store.lost_claims([step.claim_token]) == {}  # still held
    await ops.actions.cancel(run_id, actor="cli")
    # What the worker's renewal asks when it renewed fewer claims than it holds.
    assert await runtime.store.lost_claims([step.claim_token, "not-a-token"]) == {
        step.claim_token: True
    }
    report = await runtime.store.complete([StepSucceeded(step, {"late": True})])
    assert report.dropped == [step.step_id] and report.recorded == 0
    lines = [line["message"] for line in await runtime.store.run_logs(run_id, limit=100)]
    assert "late result dropped: step cancelled" in lines, lines  # not "claim expired"
    (stored,) = await runtime.store.get_steps(run_id)
    assert (stored.status, stored.output) == ("CANCELLED", None)
    run = await runtime.store.get_run(run_id)
    assert run is not None and (run.status, run.output) == ("CANCELLED", None)
    assert await runtime.store.requeue_expired() == []


async def test_cancel_during_the_fan_out_stops_the_spawner(
    ops: Operations, runtime: Runtime
) -> None:
    parent, child = fan_out("http://127.0.0.1:1")
    run_id = await submit(runtime, [parent, child], {"items": items(20)})
    (spawner,) = await runtime.store.claim(1, lease_s=60)
    version = await runtime.store.get_version("child")
    first = [ChildRow(i, "{}", None) for i in range(10)]
    assert await runtime.store.create_children(spawner, version, 20, first) == 10
    result = await ops.actions.cancel(run_id, actor="cli")
    assert result.runs_cancelled == 11
    rest = [ChildRow(i, "{}", None) for i in range(10, 20)]
    with pytest.raises(ClaimLost):
        await runtime.store.create_children(spawner, version, 20, rest)
    assert await runtime.store.existing_children(run_id, "each") == 10
    assert (await runtime.store.complete([StepAwaitingChildren(spawner, 20)])).dropped == [
        spawner.step_id
    ]
    assert [c.status for c in await runtime.store.children(run_id)] == ["CANCELLED"] * 10
    assert await runtime.store.claim(100, lease_s=60) == []


async def test_cancel_is_idempotent_and_refuses_ended_runs(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await submit(runtime, [single(downstream.url)], {})
    assert (await ops.actions.cancel(run_id, actor="cli")).changed
    again = await ops.actions.cancel(run_id, actor="cli")
    assert (again.changed, again.runs_cancelled, again.status) == (False, 0, "CANCELLED")
    assert len(await action_lines(runtime, run_id)) == 1
    failed = await failed_chain(runtime, downstream)
    with pytest.raises(WrongState) as ended:
        await ops.actions.cancel(failed, actor="cli")
    assert (ended.value.code, ended.value.state) == ("run_ended", "FAILED")
    with pytest.raises(NotFound):
        await ops.actions.cancel("no-such-run", actor="cli")
    with pytest.raises(NotFound):
        await ops.actions.cancel(failed, actor="cli", tenant="globex")
