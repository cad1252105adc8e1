"""A start over records how its run got its version (`route: start_over`: the version of the
run it repeats), and a running deployment does not count it among the submissions its stage
checks judge. Through the operations layer on both backends, a real worker and the demo
downstream."""

from __future__ import annotations

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from tests.integration.deploy_harness import Deploying

HOLD = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
"""A first stage that holds for the whole test, giving the candidate half the runs."""


async def test_a_start_over_of_a_candidates_run_is_not_a_new_candidate_submission(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """The tour: a start over of a run the deployment routed to its candidate had `route:
    null, deploymentId: null`, as if nobody knew how it got v2."""
    await env.publish_orders(downstream.url)
    started = await env.start("orders", 2, HOLD, RollbackSpec(min_finished_runs=1000))
    routed = await env.candidate_run("orders")
    assert routed.version == 2
    record = await env.runtime.store.deployment(started.id)
    assert record is not None
    before = await env.runtime.store.deployment_counts(record)

    new_id = (await env.ops.actions.start_over(routed.id, actor="key:ops")).new_run_id
    new = await env.ops.runs.wait(new_id, 15)

    assert (new.status, new.version, new.route, new.restarted_from) == (
        "SUCCEEDED",
        2,
        "start_over",
        routed.id,
    )
    assert new.deployment_id is None  # not one of the deployment's routed runs
    after = await env.runtime.store.deployment_counts(record)
    assert (after.candidate.runs, after.stage_runs) == (
        before.candidate.runs,
        before.stage_runs,
    )
    assert await env.run_count(route="start_over") == 1
    (created, *_) = await env.runtime.store.run_logs(new_id, limit=10)
    assert created["message"] == (
        "run created by key:ops (orders v2, the version of the run started over)"
    )
