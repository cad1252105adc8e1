"""Reprocessing many runs at once through the operations layer, on both backends, with a real
worker and the demo downstream on loopback: each run's dead letters run again as a single
reprocess runs them, and every run the batch leaves is named with the reason (the single
action's refusal, nothing to revive, or a SUCCEEDED run it would reopen)."""

from __future__ import annotations

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.batch_reprocess import MAX_REPROCESS_BATCH
from engine.runtime import Runtime
from schemas.errors import InvalidRequest
from tests.integration.actions_harness import (
    TOLERANT,
    action_lines,
    failed_fan_out,
    fan_out,
    items,
    single,
    submit,
)
from tests.integration.engine_harness import running_worker, wait_for_run


async def test_a_batch_reprocesses_each_run_and_says_why_it_left_the_others(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        one = await failed_fan_out(runtime, downstream, 5, failing={1})
        two = await failed_fan_out(runtime, downstream, 5, failing={2, 4})
        # A MERGE that tolerated its dead letter: reprocessing would run it again after its join.
        downstream.script([400], path="/charge/3")
        parent, child = fan_out(downstream.url, TOLERANT)
        tolerant = parent.model_copy(update={"name": "tolerant"})
        succeeded = await submit(runtime, [tolerant, child], {"items": items(5)})
        assert (await wait_for_run(runtime, succeeded)).status == "SUCCEEDED"
        plain = await submit(runtime, [single(downstream.url)], {})
        assert (await wait_for_run(runtime, plain)).status == "SUCCEEDED"
        cancelled = await submit(runtime, [single(downstream.url)], {})
        await ops.actions.cancel(cancelled, actor="cli")
        sent = downstream.stats.total

        asked = [one, "no-such-run", succeeded, two, plain, cancelled, one]
        batch = await ops.actions.batch_reprocess(asked, actor="key:ops")
        assert [(r.run_id, r.revived, r.status) for r in batch.reprocessed] == [
            (one, 1, "RUNNING"),
            (two, 2, "RUNNING"),
        ]
        assert batch.revived == 3
        assert [(s.run_id, s.reason, s.state) for s in batch.skipped] == [
            ("no-such-run", "run_not_found", None),
            (succeeded, "reopens_succeeded", "SUCCEEDED"),
            (plain, "no_dead_letters", "SUCCEEDED"),
            (cancelled, "run_cancelled", "CANCELLED"),
        ]
        reopens = batch.skipped[1].message
        assert reopens == (
            f"run {succeeded} has SUCCEEDED: reprocessing would reopen its join 'join' and run "
            f"the steps after it again; reprocess run {succeeded} alone if that is really wanted"
        )
        assert batch.skipped[2].message == f"run {plain} has no dead-lettered children to run again"
        for run_id in (one, two):
            assert (await wait_for_run(runtime, run_id)).status == "SUCCEEDED"
    assert downstream.stats.total == sent + 3  # only the three dead letters ran again
    assert (await wait_for_run(runtime, succeeded)).status == "SUCCEEDED"  # left alone
    for run_id in (one, two):
        (line,) = await action_lines(runtime, run_id)
        assert line["data"] == {"action": "reprocess", "actor": "key:ops"}
    assert await action_lines(runtime, succeeded) == []


async def test_a_tenant_key_reprocesses_only_its_tenants_runs(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        theirs = await failed_fan_out(runtime, downstream, 3, failing={0})
    batch = await ops.actions.batch_reprocess([theirs], actor="key:k", tenant="globex")
    assert batch.reprocessed == [] and batch.revived == 0
    (skipped,) = batch.skipped
    assert (skipped.run_id, skipped.reason, skipped.state) == (theirs, "run_not_found", None)
    assert (await ops.runs.get(theirs)).status == "FAILED"
    assert await action_lines(runtime, theirs) == []


async def test_a_batch_needs_ids_and_takes_a_bounded_number(ops: Operations) -> None:
    with pytest.raises(InvalidRequest) as empty:
        await ops.actions.batch_reprocess([], actor="cli")
    assert empty.value.code == "invalid_batch"
    too_many = [f"r{i}" for i in range(MAX_REPROCESS_BATCH + 1)]
    with pytest.raises(InvalidRequest) as over:
        await ops.actions.batch_reprocess(too_many, actor="cli")
    assert over.value.code == "too_many_runs"
    assert str(over.value) == (
        f"{MAX_REPROCESS_BATCH + 1:,} runs asked for, more than the {MAX_REPROCESS_BATCH:,} "
        "one batch reprocess takes; send them in several"
    )
