"""Deployments under test: a runtime on an injected clock with a worker, workflows whose
versions succeed or fail against the demo downstream, and a driver that sends traffic in
waves and moves the clock between them, so stage durations cost no wall time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.execution.worker import Worker
from engine.operations import Operations
from engine.operations.deployment_views import DeploymentView, RollbackSpec, StageSpec
from engine.operations.views import RunFilter, RunSummary
from engine.runtime import Runtime
from schemas.clock import FakeClock
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import TERMINAL, eventually, gateway

WAVES_MAX = 60
"""Waves a driver sends at most before the test fails (every loop is bounded)."""


def version_doc(name: str, base: str, *, fails: bool = False, note: str = "") -> dict[str, Any]:
    """One GATEWAY call to the demo downstream: answered 200, or 400 (no retry) when `fails`;
    `note` tells versions with the same behaviour apart."""
    url = f"{base}/{name}{note}" + ("?status=400" if fails else "")
    return {"name": name, "vertices": {"call": gateway(url, retry={"maxAttempts": 1})}}


@dataclass
class Deploying:
    """A runtime on a `FakeClock` with a worker, seen through the operations layer."""

    runtime: Runtime
    clock: FakeClock
    worker: Worker
    ops: Operations
    submitted: list[RunSummary] = field(default_factory=list)

    async def publish(self, *documents: dict[str, Any]) -> None:
        for document in documents:
            await self.ops.workflows.publish(document)

    async def publish_orders(self, base: str, *, candidate_fails: bool = False) -> None:
        """v1 of `orders`, which succeeds against the demo downstream at `base`, and a v2 to
        deploy: one that also succeeds, or with `candidate_fails` one whose every run fails."""
        note = "" if candidate_fails else "-v2"
        candidate = version_doc("orders", base, fails=candidate_fails, note=note)
        await self.publish(version_doc("orders", base), candidate)

    async def start(
        self,
        workflow: str,
        version: int,
        stages: list[StageSpec],
        rollback: RollbackSpec,
        check_interval_s: float = 1.0,
    ) -> DeploymentView:
        return await self.ops.deployments.start(
            workflow,
            version,
            actor="test",
            stages=stages,
            rollback=rollback,
            check_interval_s=check_interval_s,
        )

    async def wave(self, workflow: str, size: int, *, prefix: str = "k") -> list[RunSummary]:
        """Submit `size` runs (distinct idempotency keys) and wait until all have ended."""
        runs = []
        for _ in range(size):
            key = f"{prefix}-{len(self.submitted)}"
            run = (await self.ops.runs.submit(workflow, {}, idempotency_key=key)).run
            self.submitted.append(run)
            runs.append(run)
        for run in runs:
            detail = await self.ops.runs.wait(run.id, 30)
            assert detail.status in TERMINAL, f"run {run.id} still {detail.status}"
        return runs

    async def candidate_run(self, workflow: str, *, most: int = 64) -> RunSummary:
        """Submit runs until one is routed to the candidate. A run's place is a hash of the
        deployment's random id, so a fixed wave can miss a candidate by chance (1 in 256
        for eight runs at weight 50); `most` runs at 50 miss with odds of 2^-64."""
        for _ in range(most):
            (run,) = await self.wave(workflow, 1)
            if run.route == "candidate":
                return run
        raise AssertionError(f"none of {most} runs of {workflow} was routed to the candidate")

    async def checked(self, deployment: DeploymentView, advance_s: float) -> DeploymentView:
        """Move the clock by `advance_s`, then wait until the deployment's stage step has been
        checked at the new time (parked for later, or the deployment changed)."""
        before = await self.ops.deployments.get(deployment.id)
        if before.status != "RUNNING":
            # Its stage step's first check can come after the wave (a loaded machine claims it
            # late) and decide at once, with no clock moved: nothing is left to wait for.
            return before
        self.clock.advance(advance_s)
        now = self.clock.now()

        async def looked_at() -> bool:
            current = await self.ops.deployments.get(deployment.id)
            if current.status != before.status or current.stage != before.stage:
                return True
            run = await self.ops.runs.get(current.run_id)
            step = next(s for s in run.steps if s.vertex_id == f"stage-{current.stage}")
            return step.status == "READY" and step.not_before > now

        await eventually(looked_at, timeout_s=15)
        return await self.ops.deployments.get(deployment.id)

    async def run_ended(self, run_id: str) -> None:
        """Wait until the run `run_id` has ended (its status and its log are final)."""

        async def ended() -> bool:
            run = await self.ops.runs.get(run_id)
            return run.status in ("SUCCEEDED", "FAILED", "CANCELLED")

        await eventually(ended, timeout_s=15)

    async def drive(
        self, deployment: DeploymentView, workflow: str, wave: int, advance_s: float
    ) -> DeploymentView:
        """Waves of `wave` runs, each followed by a check `advance_s` later, until the
        deployment ends, and then its `gradual_deploy` run: the deployment's row changes in
        the stage step's execution, the run's log lines when the step's result is recorded
        (a moment later, longer on a loaded machine)."""
        current = deployment
        for _ in range(WAVES_MAX):
            if current.status != "RUNNING":
                await self.run_ended(current.run_id)
                return current
            await self.wave(workflow, wave)
            current = await self.checked(current, advance_s)
        raise AssertionError(f"deployment still {current.status} after {WAVES_MAX} waves")

    async def run_count(self, **selection: Any) -> int:
        page = await self.ops.runs.list(RunFilter(**selection), limit=500)
        assert page.next is None
        return len(page.items)


@contextlib.asynccontextmanager
async def deploying(backend: Backend) -> AsyncIterator[Deploying]:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, idle_poll_s=0.05), clock=clock)
    try:
        async with running_worker(runtime) as worker:
            yield Deploying(runtime, clock, worker, Operations(runtime))
    finally:
        await runtime.close()
