"""Gradual deployments end to end through the operations layer, on both backends: the
`gradual_deploy` run executed by a real worker, real runs against the demo downstream, and an
injected clock for the stages' durations (no sleeping)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from tests.conftest import Backend
from tests.integration.deploy_harness import Deploying, deploying, version_doc


@pytest.fixture
async def env(backend: Backend) -> AsyncIterator[Deploying]:
    async with deploying(backend) as deploying_env:
        yield deploying_env


async def test_a_failing_candidate_is_rolled_back_during_the_first_stage(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        version_doc("orders", downstream.url),
        version_doc("orders", downstream.url, fails=True),
    )
    stages = [StageSpec(weight=10, min_runs=10, min_duration_seconds=60), StageSpec(weight=100)]
    rollback = RollbackSpec(max_failure_ratio=0.05, min_finished_runs=5)
    started = await env.start("orders", 2, stages, rollback)
    assert (started.status, started.stage, started.weight) == ("RUNNING", 1, 10)

    ended = await env.drive(started, "orders", wave=10, advance_s=1)

    assert ended.status == "ROLLED_BACK" and ended.stage == 1 and ended.weight == 0
    candidate_runs = [r for r in env.submitted if r.version == 2]
    assert all(r.route == "candidate" for r in candidate_runs)
    # Every wave ended before the check, so none was in flight: the exposure is bounded by
    # the stage's minimum runs, and it is exactly the runs the candidate received.
    assert 5 <= ended.exposure == len(candidate_runs) <= 10
    assert ended.candidate.failed == ended.candidate.finished == ended.exposure
    assert ended.candidate.failure_ratio == 1.0
    assert await env.run_count(workflow="orders", version=2, route="candidate") == ended.exposure
    assert ended.outcome is not None and ended.outcome.actor == "engine"
    figures = ended.outcome.figures or {}
    assert figures["threshold"] == 0.05 and figures["candidate"]["failureRatio"] == 1.0
    assert figures["serving"]["failed"] == 0
    # The system run failed with the verdict, visible like any run.
    run = await env.ops.runs.get(ended.run_id)
    assert (run.workflow, run.status, run.tenant_id, run.route) == (
        "gradual_deploy",
        "FAILED",
        "system",
        "system",
    )
    assert run.error is not None and run.error.kind == "deployment_ended"
    assert "rolled back at stage 1" in run.error.message
    assert [(s.vertex_id, s.status) for s in run.steps] == [
        ("stage-1", "FAILED"),
        ("stage-2", "PENDING"),
    ]
    # From the rollback on, every new run gets the serving version.
    after = await env.wave("orders", 20, prefix="after")
    assert {(r.version, r.route) for r in after} == {(1, "serving")}
    assert (await env.ops.deployments.serving("orders")).candidate_version is None
