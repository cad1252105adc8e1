"""A running deployment's stage check (`holding`: "waiting at stage 1: 2/3 runs, …") comes
with when it was taken, so `deployments show` tells it from the table of the runs now (the
tour: "2/3 finished" beside a table with other numbers), through the operations layer on both
backends with a real worker."""

from __future__ import annotations

import io

from rich.console import Console

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from tests.integration.deploy_harness import Deploying

HELD = [StageSpec(weight=100, min_runs=1000, min_duration_seconds=0)]


def rendered(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=300, color_system=None)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


async def test_the_stage_check_says_when_it_was_taken(
    env: Deploying, downstream: RunningDownstream
) -> None:
    from api.cli.deployment_display import deployment_view
    from api.cli.text import clock
    from api.cli.wire import DeploymentView as WireView

    await env.publish_orders(downstream.url)
    started = await env.start("orders", 2, HELD, RollbackSpec(min_finished_runs=1000))
    await env.wave("orders", 2)
    checked = await env.checked(started, 5)
    taken = env.clock.now()
    # More runs before the next check is due (the clock stands still): the table has them.
    await env.wave("orders", 3)

    shown = await env.ops.deployments.get(started.id)
    assert shown.holding is not None and shown.holding.startswith("waiting at stage 1: 2/1,000 ")
    assert shown.holding_checked_at == taken, (shown.holding_checked_at, taken, checked)
    assert shown.candidate.runs == 5  # now, past the check's 2

    wire = WireView.model_validate(shown.model_dump(mode="json", by_alias=True))
    text = rendered(deployment_view(wire, taken + 30))
    assert f"stage check at {clock(taken)} " in text, text
    assert " (30 s ago): waiting at stage 1: 2/1,000 runs" in text, text
    assert "runs routed to each version, now:" in text, text
