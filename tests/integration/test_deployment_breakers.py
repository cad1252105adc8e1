"""A failing candidate and the circuit breakers it shares with the serving version: its
failures open a tenant layer of its own, never the one the serving version's calls of the same
tenant and destination go through (engine/execution/admission_guard.py, `candidate_scope`).
Real runs against the demo downstream, on both backends."""

from __future__ import annotations

from typing import Any

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.operations.views import RunSummary
from tests.integration.deploy_harness import Deploying
from tests.integration.operations_harness import eventually, gateway


def _doc(url: str) -> dict[str, Any]:
    return {"name": "orders", "vertices": {"call": gateway(url, retry={"maxAttempts": 1})}}


async def _submit(env: Deploying, count: int, prefix: str) -> list[RunSummary]:
    runs = []
    for n in range(count):
        key = f"{prefix}-{n}"
        runs.append((await env.ops.runs.submit("orders", {}, idempotency_key=key)).run)
    return runs


async def test_a_failing_candidate_does_not_open_the_serving_versions_breaker(
    env: Deploying, downstream: RunningDownstream
) -> None:
    # Both versions call the same destination (the downstream's host and port); the
    # candidate's path answers 500, a failure every breaker layer counts.
    await env.publish(
        _doc(f"{downstream.url}/orders"), _doc(f"{downstream.url}/orders-v2?status=500")
    )
    # A stage that cannot end while the test runs (the clock does not move), so the candidate
    # keeps its half of the traffic: the verdict is not what is tested here.
    stages = [StageSpec(weight=50, min_runs=1000, min_duration_seconds=3600)]
    rollback = RollbackSpec(max_failure_ratio=0.05, min_finished_runs=1000)
    deployment = await env.start("orders", 2, [*stages, StageSpec(weight=100)], rollback)

    first = await _submit(env, 24, "a")
    assert len([r for r in first if r.version == 2]) >= 5, "the candidate's layer's threshold"
    destination = downstream.url.lower()

    async def layers() -> dict[str, Any]:
        views = {d.destination: d for d in await env.ops.settings.destinations()}
        view = views.get(destination)
        return {} if view is None else {**view.tenant_breakers, "": view.global_breaker}

    async def candidate_open() -> bool:
        layer = (await layers()).get("default/orders@v2")
        return layer is not None and layer.state == "open"

    # (The candidate's calls made once its layer opened wait behind it: not waited for.)
    await eventually(candidate_open, timeout_s=20)
    for run in (r for r in first if r.version == 1):
        await env.ops.runs.wait(run.id, 30)
    seen = await layers()
    assert "default" not in seen or seen["default"].state == "closed"
    assert seen[""].state == "closed"

    # The serving version's runs after the candidate's layer opened: every one succeeds at
    # once, none waits behind the candidate's breaker.
    second = await _submit(env, 24, "b")
    serving = [r for r in second if r.version == 1]
    assert serving
    for run in serving:
        detail = await env.ops.runs.wait(run.id, 30)
        assert detail.status == "SUCCEEDED", (detail.status, detail.error)

    # The candidate's own runs are refused by its layer, which names it and the reset that
    # closes it.
    candidate = [r for r in second if r.version == 2]

    async def refused() -> bool:
        run = await env.ops.runs.get(candidate[0].id)
        return any(s.error and "circuit open" in s.error.message for s in run.steps)

    await eventually(refused, timeout_s=15)
    run = await env.ops.runs.get(candidate[0].id)
    message = next(s.error.message for s in run.steps if s.error)
    assert "the calls of the deployment candidate orders@v2 only" in message
    assert "--tenant default/orders@v2" in message
    assert (await env.ops.deployments.get(deployment.id)).status == "RUNNING"
