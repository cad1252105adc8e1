"""A stage check reads each version's latest runs, a bounded read (`vertices.deploy.JUDGED_RUNS`).
The latest runs include those still running: a candidate's read bounded at exactly as many
runs as the policy's `minFinishedRuns` would count fewer finished runs than there are whenever
some newer run is still in flight, and a policy asking for more finished runs than the bound
(`minFinishedRuns` above 10,000) could never pass. Through the store on both backends: runs
finished by a real worker, then newer runs submitted with no worker, so they stay unfinished."""

from __future__ import annotations

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.runtime import Runtime
from tests.integration.deploy_harness import version_doc
from tests.integration.engine_harness import running_worker

FINISHED = 4
IN_FLIGHT = 3


async def test_runs_still_in_flight_do_not_hide_the_finished_ones_a_check_waits_for(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    ops = Operations(runtime)
    for document in (
        version_doc("orders", downstream.url),
        version_doc("orders", downstream.url, note="-v2"),
    ):
        await ops.workflows.publish(document)
    # Every submission goes to the candidate; the stage holds (60 s of a clock nobody moves).
    started = await ops.deployments.start(
        "orders",
        2,
        actor="test",
        stages=[StageSpec(weight=100, min_runs=1)],
        rollback=RollbackSpec(min_finished_runs=FINISHED),
        check_interval_s=1.0,
    )
    async with running_worker(runtime):
        for n in range(FINISHED):
            run = (await ops.runs.submit("orders", {}, idempotency_key=f"done-{n}")).run
            assert (await ops.runs.wait(run.id, 30)).status == "SUCCEEDED"
    for n in range(IN_FLIGHT):
        run = (await ops.runs.submit("orders", {}, idempotency_key=f"open-{n}")).run
        assert run.route == "candidate"
    record = await runtime.store.deployment(started.id)
    assert record is not None

    # A check's read bounded at the policy's minimum finished runs, as the engine's is at
    # JUDGED_RUNS: the 3 newest runs still in flight must not push finished ones out of it.
    counts = await runtime.store.deployment_counts(record, recent=FINISHED)

    assert (counts.candidate.runs, counts.candidate.finished) == (
        FINISHED + IN_FLIGHT,
        FINISHED,
    )
