"""A candidate whose inputSchema refuses what clients send: the submissions routed to it are
refused (422, no run), and each counts in its deployment as a failed run of the candidate, so
the deployment sees them and rolls back by its normal rules (docs/architecture.md, 'The
verdict'). On both backends, with a real worker and the demo downstream."""

from __future__ import annotations

from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.store.models import RunRoute
from schemas.errors import InvalidRequest
from tests.integration.actions_harness import statements
from tests.integration.deploy_harness import Deploying, version_doc

NEEDS_PRIORITY = {"type": "object", "required": ["priority"]}
BATCHES = 20


def strict(base: str, note: str = "-v2") -> dict[str, Any]:
    return {**version_doc("tickets", base, note=note), "inputSchema": NEEDS_PRIORITY}


async def send(env: Deploying, run_input: Any, count: int, prefix: str) -> list[InvalidRequest]:
    """`count` submissions of `run_input` with distinct keys; the refusals, in order (the runs
    created are waited for)."""
    refused: list[InvalidRequest] = []
    created = []
    for index in range(count):
        try:
            result = await env.ops.runs.submit(
                "tickets", run_input, idempotency_key=f"{prefix}-{index}"
            )
        except InvalidRequest as refusal:
            refused.append(refusal)
            continue
        created.append(result.run.id)
    for run_id in created:
        await env.ops.runs.wait(run_id, 30)
    return refused


async def test_a_candidate_refusing_the_input_counts_its_refusals_and_rolls_back(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(version_doc("tickets", downstream.url), strict(downstream.url))
    stages = [StageSpec(weight=25, min_runs=10, min_duration_seconds=30), StageSpec(weight=100)]
    started = await env.start("tickets", 2, stages, RollbackSpec(min_finished_runs=10))

    refused: list[InvalidRequest] = []
    sent = 0
    for batch in range(BATCHES):  # the candidate's share is 25 % of the keys, drawn anew
        if len(refused) >= 10:
            break
        refused += await send(env, {}, 10, f"k{batch}")
        sent += 10

    assert 10 <= len(refused) < sent
    first = refused[0]
    assert first.code == "invalid_input"
    # The version is named (the same request meets v1 under another key), and the deployment.
    assert first.message.startswith("the input does not match the inputSchema of tickets v2, ")
    assert f"the candidate of deployment {started.id}" in first.message
    assert "v1, the serving version, accepts it" in first.message
    assert first.details["version"] == 2 and first.details["deploymentId"] == started.id
    held = await env.ops.deployments.get(started.id)
    assert held.candidate.refused == len(refused)
    assert (held.candidate.runs, held.candidate.failed) == (len(refused), len(refused))
    assert held.candidate.failure_ratio == 1.0 and held.exposure == len(refused)
    assert held.serving.refused == 0 and held.serving.runs == sent - len(refused)

    ended = await env.checked(held, 1)

    assert ended.status == "ROLLED_BACK" and ended.stage == 1
    assert ended.outcome is not None
    assert f"({len(refused)} refused by the candidate's inputSchema)" in ended.outcome.reason
    figures = ended.outcome.figures or {}
    assert figures["candidate"]["refused"] == len(refused)
    # From the rollback on, the same requests are all v1's, and accepted.
    assert await send(env, {}, 10, "after") == []


async def test_an_input_both_versions_refuse_is_the_clients_mistake(
    env: Deploying, downstream: RunningDownstream
) -> None:
    serving = {**version_doc("tickets", downstream.url), "inputSchema": {"type": "object"}}
    await env.publish(serving, strict(downstream.url))
    stages = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
    started = await env.start("tickets", 2, stages, RollbackSpec())

    refused = await send(env, [], 20, "k")

    assert len(refused) == 20
    messages = {r.message.split(",")[0] for r in refused}
    assert messages == {
        "the input does not match the inputSchema of tickets v1",
        "the input does not match the inputSchema of tickets v2",
    }
    to_candidate = [r for r in refused if r.details["version"] == 2]
    assert to_candidate and all("refuses it too" in r.message for r in to_candidate)
    assert (await env.ops.deployments.get(started.id)).candidate.refused == 0


async def test_a_refusal_costs_a_statement_only_when_a_candidate_refused_it(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        {**version_doc("tickets", downstream.url), "inputSchema": NEEDS_PRIORITY},
        strict(downstream.url),
    )
    await send(env, {}, 1, "warm")  # the version, now in memory
    with statements(env.runtime) as routing:
        assert len(await send(env, {}, 1, "no-deployment")) == 1
    # No deployment running: the refusal path sends what routing reads, and writes nothing.
    assert not [s for s in routing if s.lstrip().upper().startswith(("INSERT", "UPDATE"))]

    await env.publish(
        {**version_doc("tickets", downstream.url, note="-v3"), "inputSchema": {"required": ["x"]}}
    )
    stages = [StageSpec(weight=100, min_runs=1000)]
    started = await env.start("tickets", 3, stages, RollbackSpec())
    await send(env, {"priority": 1}, 1, "warm-2")
    with statements(env.runtime) as sent:
        refusal = (await send(env, {"priority": 1}, 1, "candidate"))[0]
    assert "the candidate of deployment" in refusal.message
    # The candidate's refusal adds one UPDATE of the deployment's row (and its transaction).
    added = [s for s in sent if s not in routing and not s.upper().startswith("BEGIN")]
    assert len(added) == 1 and added[0].startswith("UPDATE deployment SET candidate_refused")
    assert (await env.ops.deployments.get(started.id)).candidate.refused == 2


async def test_a_refusal_routed_by_a_deployment_that_ended_meanwhile_routes_again(
    env: Deploying, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission read the routing row while the deployment ran, and the deployment rolled
    back before its refusal was counted: it is not refused by a version no longer deployed,
    the serving version (which accepts the input) runs it."""
    await env.publish(version_doc("tickets", downstream.url), strict(downstream.url))
    stages = [StageSpec(weight=100, min_runs=1000)]
    started = await env.start("tickets", 2, stages, RollbackSpec())
    store = env.runtime.store
    stale = await store.serving("tickets")
    assert stale is not None and stale.candidate_version == 2
    await env.ops.deployments.rollback(started.id, actor="key:ops")
    reads = []
    fresh_read = store.serving

    async def stale_once(name: str) -> Any:
        reads.append(name)
        return stale if len(reads) == 1 else await fresh_read(name)

    monkeypatch.setattr(store, "serving", stale_once)
    result = await env.ops.runs.submit("tickets", {}, idempotency_key="raced")

    assert reads == ["tickets", "tickets"]  # the stale row, then the store's
    assert (result.run.version, result.run.route) == (1, RunRoute.SERVING)
    assert (await env.ops.deployments.get(started.id)).candidate.refused == 0
