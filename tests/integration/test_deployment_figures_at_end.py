"""An ended deployment's figures are those it ended on, whatever an operator's retries of its
runs do later (the tour: rolled back "for 4 of 12 failed", then, once the 4 were retried and
succeeded, listed as "ROLLED_BACK … 12 runs · ratio 0.000"): through the operations layer on
both backends with a real worker, and the CLI's words on the views it answers."""

from __future__ import annotations

import io

from rich.console import Console

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import DeploymentView, RollbackSpec, StageSpec
from tests.integration.deploy_harness import Deploying, version_doc

FAILING_FIRST = 4
WAVE = 12


def rendered(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=300, color_system=None)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def wire(view: DeploymentView) -> object:
    from api.cli.wire import DeploymentView as WireView

    return WireView.model_validate(view.model_dump(mode="json", by_alias=True))


async def rolled_back_then_retried(env: Deploying, base: str) -> DeploymentView:
    """v2's first 4 calls fail (400, no retry), every later one succeeds: 4 of 12 failed roll
    it back; the 4 retried then succeed."""
    note = "-fixed-by-retry"
    await env.publish(version_doc("orders", base), version_doc("orders", base, note=note))
    # Every new run to the candidate, judged from 12 finished runs.
    stages = [StageSpec(weight=100, min_runs=1000)]
    policy = RollbackSpec(max_failure_ratio=0.1, min_finished_runs=WAVE)
    return await env.start("orders", 2, stages, policy)


async def test_an_ended_deployments_figures_stay_those_it_ended_on(
    env: Deploying, downstream: RunningDownstream
) -> None:
    from api.cli.deployment_display import deployment_view, deployments_table

    downstream.script([{"status": 400}] * FAILING_FIRST, path="/orders-fixed-by-retry")
    started = await rolled_back_then_retried(env, downstream.url)
    ended = await env.drive(started, "orders", wave=WAVE, advance_s=1)
    assert ended.status == "ROLLED_BACK", ended
    failed = [r.id for r in env.submitted if r.version == 2]
    failed = [i for i in failed if (await env.ops.runs.get(i)).status == "FAILED"]
    assert len(failed) == FAILING_FIRST
    for run_id in failed:
        await env.ops.actions.retry(run_id, actor="key:ops")
    for run_id in failed:
        assert (await env.ops.runs.wait(run_id, 15)).status == "SUCCEEDED"

    shown = await env.ops.deployments.get(ended.id)
    listed = next(d for d in (await env.ops.deployments.recent()).items if d.id == ended.id)
    for view in (shown, listed):
        assert view.candidate.failed == 0  # the runs now
        assert view.outcome is not None and view.outcome.figures is not None
        at_end = view.outcome.figures["candidate"]
        assert (at_end["failed"], at_end["finished"]) == (FAILING_FIRST, WAVE), at_end

    table = rendered(deployments_table([wire(listed)], env.clock.now()))  # type: ignore[list-item]
    assert "0.333 at the rollback" in table, table
    assert "0.000" not in table, table
    text = rendered(deployment_view(wire(shown), env.clock.now()))  # type: ignore[arg-type]
    assert (
        "runs routed to each version, as they are now, after any retries since the rollback "
        "(at the rollback: 4 of 12 finished failed):"
    ) in text, text
