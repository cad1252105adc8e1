"""A fan-out whose join failed on a child an operator cancelled (the tour: "a dead end"). The
join's message names the CANCELLED child and where to list it; a retry of the parent, which
runs the join again against the same cancelled child and fails at once, says so up front (a
single retry's preview and answer, a batch's preview) and points to what helps: resolving the
join or starting the run over, never a reprocess, which runs FAILED children only. Through
the operations layer on both backends, with a real worker and the demo downstream."""

from __future__ import annotations

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from tests.integration.actions_harness import fan_out, submit, wait_until
from tests.integration.engine_harness import running_worker, wait_for_run

# The straggler's 8 s outlast, on a loaded host, the other two ending and the cancel.
ITEMS = [{"status": 200}, {"status": 200, "sleep": 8000}, {"status": 200}]


async def failed_on_a_cancelled_child(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> tuple[str, str]:
    """The parent run, FAILED at its join on the straggler an operator cancelled, and the
    straggler's id."""
    run_id = await submit(runtime, fan_out(downstream.url), {"items": ITEMS})
    async with running_worker(runtime):

        async def others_done() -> bool:
            return (await runtime.store.fanout_progress(run_id))["succeeded"] == 2

        await wait_until(others_done)
        (straggler,) = await runtime.store.children(run_id, status="RUNNING")
        await ops.actions.cancel(straggler.id, actor="cli")
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED", run.status
    return run_id, straggler.id


async def test_the_join_and_every_retry_say_a_cancelled_child_blocks_it(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id, _ = await failed_on_a_cancelled_child(ops, runtime, downstream)
    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.error.kind, run.error.children_cancelled) == ("child_failures", 1)
    assert run.error.message == (
        "1 of 3 children ended with a status not tolerated: 1 CANCELLED, which no retry runs "
        f"again; see `schemabridge runs children {run_id} --status CANCELLED`"
    )
    said = (
        f"run {run_id}: its join 'join' fails again at once: 1 child it does not tolerate was "
        "CANCELLED, which neither a retry nor a reprocess runs again; resolve the join with "
        f"the output it should give (`schemabridge runs resolve {run_id} join --output JSON`) "
        f"or start the run over (`schemabridge runs start-over {run_id}`; a child run's root)"
    )

    preview = await ops.actions.retry_preview(run_id)
    assert (preview.stuck_joins, preview.children_cancelled) == (["join"], 1)
    assert preview.warnings == [said]

    batch = await ops.actions.batch_retry_preview(RunFilter(workflow="parent"))
    assert (batch.stuck.count, batch.stuck.run_ids) == (1, [run_id])
    assert batch.stuck.message == (
        "The run has a join that fails again at once: it failed on CANCELLED children, which "
        "neither a retry nor a reprocess runs again. Resolve the join (`schemabridge runs "
        "resolve RUN JOIN --output JSON`) or start the run over instead; run: " + run_id
    )

    retried = await ops.actions.retry(run_id, actor="cli")
    assert (retried.stuck_joins, retried.children_cancelled) == (["join"], 1)
    assert retried.warnings == [said]
    async with running_worker(runtime):
        again = await wait_for_run(runtime, run_id)
    assert again.status == "FAILED" and again.error is not None
    assert again.error.children_cancelled == 1  # as the warning said: nothing changed


async def test_resolving_the_join_ends_the_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """What the warning offers does help: the join resolved, the run SUCCEEDED."""
    run_id, _ = await failed_on_a_cancelled_child(ops, runtime, downstream)
    await ops.actions.resolve(run_id, "join", {"counts": "by hand"}, actor="cli")
    run = await ops.runs.get(run_id)
    assert run.status == "SUCCEEDED", run.status
