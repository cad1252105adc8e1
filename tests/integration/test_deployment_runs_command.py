"""The `runs list` command `deployments show` prints for a deployment's exposure lists exactly
the runs the deployment routed to its candidate, also once a later deployment of the same
version routed more (the tour: 12 runs of exposure, 26 listed), through the operations layer
on both backends with a real worker."""

from __future__ import annotations

import shlex

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.operations.views import RunFilter
from tests.integration.deploy_harness import Deploying

ALL_HELD = [StageSpec(weight=100, min_runs=1000)]
"""Every new run to the candidate, and no verdict before the test stops it."""


def listed_filter(command: str) -> RunFilter:
    """The filter `schemabridge runs list …` (as printed) sends, read by the CLI's own parser."""
    from api.cli.run_options import run_filter

    args = shlex.split(command)
    assert args[:3] == ["schemabridge", "runs", "list"], command
    options = dict(zip(args[3::2], args[4::2], strict=True))
    query = run_filter(
        status=None,
        workflow=options["--workflow"],
        tenant=None,
        since=options.get("--since"),
        until=options.get("--until"),
        roots_only=True,
        version=int(options["--version"]),
        route=options.get("--route"),
    )
    return RunFilter(
        workflow=query.workflow,
        version=query.version,
        route=query.route,
        created_after=query.created_after,
        created_before=query.created_before,
    )


async def test_the_exposure_command_lists_only_this_deployments_runs(
    env: Deploying, downstream: RunningDownstream
) -> None:
    from api.cli.deployment_display import runs_command
    from api.cli.wire import DeploymentView as WireView

    await env.publish_orders(downstream.url)
    first = await env.start("orders", 2, ALL_HELD, RollbackSpec(min_finished_runs=1000))
    env.clock.advance(0.25)
    mine = {r.id for r in await env.wave("orders", 3, prefix="first")}
    env.clock.advance(0.25)
    await env.ops.deployments.abort(first.id, actor="test")
    # A later deployment of the same version within the same second: its runs are not the
    # first one's.
    env.clock.advance(0.25)
    second = await env.start("orders", 2, ALL_HELD, RollbackSpec(min_finished_runs=1000))
    env.clock.advance(0.1)
    later = {r.id for r in await env.wave("orders", 4, prefix="second")}
    await env.ops.deployments.abort(second.id, actor="test")

    shown = await env.ops.deployments.get(first.id)
    assert shown.exposure == len(mine) == 3
    wire = WireView.model_validate(shown.model_dump(mode="json", by_alias=True))
    command = runs_command(wire.candidate, wire.workflow)
    page = await env.ops.runs.list(listed_filter(command), limit=500)
    assert {r.id for r in page.items} == mine, (command, later)


async def test_the_command_printed_at_the_end_still_lists_only_its_runs_later(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """The tour's case: the command `deployments show` printed right after a rollback, pasted
    into an incident ticket, later listed the runs of the next deployment of the same version
    too (4 runs of exposure, 11 listed): with no later deployment yet, its window had no end.
    It ends `WINDOW_GRACE_S` after the deployment did."""
    from api.cli.deployment_display import runs_command
    from api.cli.wire import DeploymentView as WireView
    from engine.store.deployment_rows import WINDOW_GRACE_S

    await env.publish_orders(downstream.url)
    first = await env.start("orders", 2, ALL_HELD, RollbackSpec(min_finished_runs=1000))
    env.clock.advance(0.25)
    mine = {r.id for r in await env.wave("orders", 3, prefix="first")}
    await env.ops.deployments.abort(first.id, actor="test")
    shown = await env.ops.deployments.get(first.id)
    wire = WireView.model_validate(shown.model_dump(mode="json", by_alias=True))
    printed = runs_command(wire.candidate, wire.workflow)
    assert "--until" in printed, printed

    env.clock.advance(WINDOW_GRACE_S + 1)
    second = await env.start("orders", 2, ALL_HELD, RollbackSpec(min_finished_runs=1000))
    later = {r.id for r in await env.wave("orders", 4, prefix="second")}
    await env.ops.deployments.abort(second.id, actor="test")

    page = await env.ops.runs.list(listed_filter(printed), limit=500)
    assert {r.id for r in page.items} == mine, (printed, later)
    again = await env.ops.deployments.get(first.id)
    assert again.exposure == shown.exposure == len(mine)
    assert again.candidate.runs_url == shown.candidate.runs_url
