"""A deployment survives a SIGKILL of the process that drives it, mid-stage, on both backends:
the `gradual_deploy` run's stage is a durable step with a durable timer, and the stage's start
is on the deployment's row, so a new worker resumes the same stage without restarting its
clock. Real `schemabridge worker` subprocesses on the real clock (no injected clock can cross a
process boundary)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from engine.operations import Operations
from engine.operations.deployment_views import DeploymentView, RollbackSpec, StageSpec
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import eventually, single
from tests.integration.processes import start_worker, stop_worker, worker_env

pytestmark = pytest.mark.slow

STAGE_S = 8.0
"""The first stage's minimum duration."""
KILL_AFTER_S = 3.5
"""How far into the stage the worker is killed: what a restarted clock would lose."""
UNREACHABLE = "http://127.0.0.1:9/never"


@pytest.fixture
async def ops(backend: Backend) -> AsyncIterator[Operations]:
    runtime = await Runtime.open(settings_for(backend))  # migrates; runs no worker
    yield Operations(runtime)
    await runtime.close()


def _marker(tmp_path: Path, name: str) -> Callable[[], Awaitable[bool]]:
    async def up() -> bool:
        return (tmp_path / "health" / name).is_file()

    return up


async def stage_step(ops: Operations, deployment: DeploymentView, stage: int) -> tuple[str, int]:
    run = await ops.runs.get(deployment.run_id)
    step = next(s for s in run.steps if s.vertex_id == f"stage-{stage}")
    return step.status, step.attempts


async def test_a_deployment_resumes_its_stage_after_a_sigkill(
    ops: Operations, backend: Backend, tmp_path: Path
) -> None:
    await ops.workflows.publish(single("orders", UNREACHABLE))
    await ops.workflows.publish(single("orders", UNREACHABLE, description="v2"))
    env = worker_env(backend, tmp_path, lease_s="2", idle_poll_s="0.2")
    first = start_worker(env, "w1", tmp_path / "w1.log")
    try:
        # Up first (a cold start on a loaded machine takes seconds): the stage's clock then
        # runs while a worker drives it.
        await eventually(_marker(tmp_path, "w1"), timeout_s=60)
        deployment = await ops.deployments.start(
            "orders",
            2,
            actor="test",
            stages=[
                StageSpec(weight=50, min_runs=0, min_duration_seconds=STAGE_S),
                StageSpec(weight=100, min_runs=0, min_duration_seconds=0.5),
            ],
            rollback=RollbackSpec(min_finished_runs=0),
            check_interval_s=0.5,
        )
        stage_started = deployment.stages[0].started_at
        assert stage_started is not None

        async def checked_and_far_enough() -> bool:
            _, attempts = await stage_step(ops, deployment, 1)
            return attempts >= 2 and time.time() >= stage_started + KILL_AFTER_S

        await eventually(checked_and_far_enough, timeout_s=30)
    finally:
        killed = await asyncio.to_thread(stop_worker, first, signal.SIGKILL)
    assert killed == -signal.SIGKILL

    # Mid-stage, nothing drives it now; its row and its step keep where it was.
    before = await ops.deployments.get(deployment.id)
    assert (before.status, before.stage, before.weight) == ("RUNNING", 1, 50)
    assert before.stages[0].started_at == stage_started
    assert time.time() < stage_started + STAGE_S, "the machine was too slow to kill mid-stage"

    second = start_worker(env, "w2", tmp_path / "w2.log")
    try:
        # A restarted clock could start no earlier than the new worker is up; a cold start on a
        # loaded machine takes seconds, so the bound below counts from there, not from launch.
        await eventually(_marker(tmp_path, "w2"), timeout_s=60)
        second_up_at = time.time()

        async def finished() -> bool:
            return (await ops.deployments.get(deployment.id)).status != "RUNNING"

        await eventually(finished, timeout_s=90)
    finally:
        assert await asyncio.to_thread(stop_worker, second) == 0
    done = await ops.deployments.get(deployment.id)
    assert done.status == "SUCCEEDED", done.outcome
    one, two = done.stages
    assert one.started_at == stage_started
    assert two.started_at is not None and two.started_at - stage_started >= STAGE_S
    # The stage ended on its own clock: before a clock restarted by the new worker (which
    # would have ended it STAGE_S after that worker was up) could.
    assert two.started_at < second_up_at + STAGE_S
    assert [e.event for e in done.timeline] == ["started", "stage", "succeeded"]
    assert (await ops.deployments.serving("orders")).serving_version == 2
    run = await ops.runs.get(done.run_id)
    assert run.status == "SUCCEEDED"
