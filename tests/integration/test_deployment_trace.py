"""What a deployment leaves behind as it goes, on both backends: one structured process-log
line per lifecycle event (started, a stage passed, promoted, rolled back by the engine or by
hand, aborted) from the process that made the change, with its figures; the lines its
`gradual_deploy` run's log gets (what it deploys, what each check waits for with the failure
ratio so far, a stage passed, the promotion, the rollback); an operator's reason and name;
the warning that a child workflow's deployment waits, said for as long as it does; and the
deployment a candidate's run belongs to."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.operations.deployment_views import RollbackSpec, StageSpec
from schemas.errors import InvalidRequest
from tests.integration.deploy_harness import Deploying, version_doc
from tests.integration.operations_harness import spawner_of


def events(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The deployment lifecycle records logged so far, in order."""
    return [r for r in caplog.records if str(getattr(r, "event", "")).startswith("deployment.")]


async def run_log(env: Deploying, run_id: str) -> list[str]:
    page = await env.ops.runs.logs(run_id, limit=500)
    return [f"{line.level} {line.message}" for line in page.items]


async def test_a_promotion_is_logged_and_said_in_its_runs_log(
    env: Deploying, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await env.publish_orders(downstream.url)
    stages = [
        StageSpec(weight=50, min_runs=3, min_duration_seconds=30),
        StageSpec(weight=100, min_runs=3, min_duration_seconds=30),
    ]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=3))
    ended = await env.drive(started, "orders", wave=8, advance_s=10)
    assert ended.status == "SUCCEEDED"

    found = events(caplog)
    assert [r.event for r in found] == [  # type: ignore[attr-defined]
        "deployment.started",
        "deployment.stage_passed",
        "deployment.promoted",
    ]
    start, passed, promoted = found
    assert start.getMessage() == (
        f"deployment {ended.id} of orders started by test: v2 gets 50 % of new runs (v1 the "
        "rest), stages 50 % → 100 %"
    )
    assert start.name == "engine.operations.deployments"
    for record in found:
        assert vars(record)["deployment_id"] == ended.id
        assert (vars(record)["workflow"], vars(record)["candidate_version"]) == ("orders", 2)
        assert vars(record)["serving_version"] == 1
    assert (vars(passed)["stage"], vars(passed)["actor"], vars(passed)["weight"]) == (
        1,
        "engine",
        100,
    )
    assert vars(passed)["failed"] == 0 and vars(passed)["failure_ratio"] == 0.0
    assert vars(passed)["threshold"] == 0.05 and vars(passed)["runs"] >= 3
    assert passed.name == "engine.execution.deploy_stage"
    assert "stage 1 passed: failure ratio 0.000 (0 failed of " in passed.getMessage()
    assert passed.getMessage().endswith("; stage 2 begins: v2 gets 100 % of new runs")
    assert vars(promoted)["stage"] == 2 and promoted.levelno == logging.INFO
    assert promoted.getMessage().endswith("; promoted: orders v2 now serves every new run (was v1)")

    lines = await run_log(env, ended.run_id)
    assert lines[0] == (
        f"info run created: deployment {ended.id} of orders v2 (over the serving v1), started "
        "by test; this run (gradual_deploy v1, the engine's own workflow) drives its 2 stages"
    )
    parked = [line for line in lines if line.startswith("info parked: ")]
    assert parked and all("waiting at stage " in line for line in parked), parked
    assert all(" threshold 0.050" in line for line in parked), parked
    assert any("; failure ratio 0.000 (0 failed of " in line for line in parked), parked
    said = [line for line in lines if " passed: " in line]
    assert len(said) == 2, lines
    assert said[0].startswith("info stage 1 passed: failure ratio 0.000 (0 failed of ")
    assert said[0].endswith(" within threshold 0.050; stage 2 begins: v2 gets 100 % of new runs")
    assert said[1].startswith("info stage 2 passed: ")
    assert said[1].endswith("; promoted: orders v2 now serves every new run (was v1)")
    # The timeline says a stage passed, never "held" (read as "is holding").
    assert ended.timeline[1].note is not None
    assert ended.timeline[1].note.startswith("stage 1 passed: failure ratio 0.000")
    assert not any("held" in (e.note or "") for e in ended.timeline)


async def test_an_automatic_rollback_is_logged_with_its_figures(
    env: Deploying, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await env.publish_orders(downstream.url, candidate_fails=True)
    stages = [StageSpec(weight=10, min_runs=10, min_duration_seconds=60), StageSpec(weight=100)]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=5))
    ended = await env.drive(started, "orders", wave=10, advance_s=1)
    assert ended.status == "ROLLED_BACK"

    rolled = events(caplog)[-1]
    assert rolled.event == "deployment.rolled_back"  # type: ignore[attr-defined]
    assert rolled.levelno == logging.WARNING
    fields = vars(rolled)
    assert (fields["stage"], fields["actor"], fields["exposure"]) == (1, "engine", ended.exposure)
    assert (fields["failure_ratio"], fields["threshold"]) == (1.0, 0.05)
    assert fields["failed"] == fields["finished"] == ended.exposure
    message = rolled.getMessage()
    assert message.startswith(f"deployment {ended.id} of orders v2 rolled back at stage 1: ")
    assert "(ratio 1.000 > threshold 0.050); v1 serves every new run again" in message
    assert f"exposure {ended.exposure} runs went to v2" in message

    lines = await run_log(env, ended.run_id)
    said = [line for line in lines if line.startswith("warning rolled back at stage 1: ")]
    assert len(said) == 1, lines
    assert said[0].endswith(f"; exposure {ended.exposure} runs went to v2")


async def test_a_stop_by_hand_says_who_and_why_once(
    env: Deploying, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await env.publish_orders(downstream.url)
    stages = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
    actor = "key:410577f5e3b5 (release-bot)"
    first = await env.start("orders", 2, stages, RollbackSpec())
    with pytest.raises(InvalidRequest) as long:
        await env.ops.deployments.abort(first.id, actor=actor, reason="x" * 501)
    assert long.value.code == "invalid_reason"
    aborted = await env.ops.deployments.abort(
        first.id, actor=actor, reason="  p99 doubled\n on EU  "
    )
    outcome = aborted.deployment.outcome
    assert outcome is not None and outcome.actor == actor
    # Not "aborted by …" after a reader's own "aborted at stage 1": who and why, once.
    assert outcome.reason == f"stopped by {actor}: p99 doubled on EU"
    assert aborted.deployment.timeline[-1].note == outcome.reason
    said = [line for line in await run_log(env, first.run_id) if "p99" in line]
    cancel = [line for line in said if line.startswith("info ")]
    assert cancel == [f"info deployment aborted by {actor}: p99 doubled on EU"]
    # A stage check the worker ran as the abort landed fails its step saying the abort (a
    # race CI met once): the step's own line, not the abort said twice.
    stage_failed = f"error step failed: deployment {first.id} of orders v2 aborted at stage 1: "
    assert all(line.startswith(stage_failed) for line in said if line not in cancel), said
    await env.ops.deployments.abort(first.id, actor=actor)  # nothing left to do: not logged

    env.clock.advance(1)
    second = await env.start("orders", 2, stages, RollbackSpec())
    rolled = await env.ops.deployments.rollback(second.id, actor="key:0123456789ab")
    assert rolled.deployment.outcome is not None
    assert rolled.deployment.outcome.reason == "stopped by key:0123456789ab"

    env.clock.advance(1)
    third = await env.start("orders", 2, stages, RollbackSpec())
    await env.ops.actions.cancel(third.run_id, actor="key:ops")  # aborts the deployment

    found = [(r.event, vars(r)["deployment_id"]) for r in events(caplog)]  # type: ignore[attr-defined]
    assert found == [
        ("deployment.started", first.id),
        ("deployment.aborted", first.id),
        ("deployment.started", second.id),
        ("deployment.rolled_back", second.id),
        ("deployment.started", third.id),
        ("deployment.aborted", third.id),
    ]
    by_hand, rolled_back, cancelled = (events(caplog)[i] for i in (1, 3, 5))
    assert by_hand.levelno == logging.WARNING
    assert (vars(by_hand)["actor"], vars(by_hand)["reason"]) == (actor, "p99 doubled on EU")
    assert vars(by_hand)["stage"] == 1 and vars(by_hand)["runs"] == 0
    assert by_hand.getMessage().startswith(
        f"deployment {first.id} of orders v2 aborted by hand at stage 1 by {actor}: p99 "
        "doubled on EU; v2 gets no new runs, v1 serves (v2: 0 runs, 0 failed of 0 finished"
    )
    assert "reason" not in vars(rolled_back) and vars(rolled_back)["actor"] == "key:0123456789ab"
    assert vars(cancelled)["actor"] == "key:ops"
    assert f"its run {third.run_id} (gradual_deploy) was cancelled by key:ops" in (
        cancelled.getMessage()
    )


async def test_a_child_workflows_deployment_keeps_saying_why_it_waits(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        version_doc("orders", downstream.url),
        version_doc("orders", downstream.url, note="-v2"),
        spawner_of("batches", "orders"),
    )
    stages = [StageSpec(weight=10, min_runs=5), StageSpec(weight=100)]
    # As many finished runs as runs: stage 1 waits for nothing more (no warning of it).
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=5))
    assert len(started.warnings) == 1
    assert started.warnings[0].startswith("orders is a SPAWNER's child in the serving version ")
    shown = await env.checked(started, 1)
    assert shown.holding is not None and shown.holding.startswith("waiting at stage 1: 0/5 runs")
    assert shown.warnings == started.warnings, "said while it waits, not only at its start"
    assert (await env.ops.deployments.list("orders")).items[0].warnings == []  # lists: no reads
    await env.ops.deployments.abort(started.id, actor="test")
    assert (await env.ops.deployments.get(started.id)).warnings == []  # ended: nothing waits


async def test_a_candidate_run_names_its_deployment(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish_orders(downstream.url)
    stages = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
    first = await env.start("orders", 2, stages, RollbackSpec())
    early = await env.wave("orders", 20, prefix="first")
    await env.ops.deployments.abort(first.id, actor="test")
    env.clock.advance(1)
    # The same candidate again: each run belongs to the deployment that routed it.
    second = await env.start("orders", 2, stages, RollbackSpec())
    late = await env.wave("orders", 20, prefix="second")

    def owners(runs: list[Any]) -> set[tuple[str, str | None]]:
        return {(r.route, r.deployment_id) for r in runs}

    assert owners([await env.ops.runs.get(r.id) for r in early]) == {
        ("candidate", first.id),
        ("serving", None),
    }
    assert owners([await env.ops.runs.get(r.id) for r in late]) == {
        ("candidate", second.id),
        ("serving", None),
    }
    system = await env.ops.runs.get(second.run_id)
    assert (system.route, system.deployment_id) == ("system", second.id)
    pinned = (await env.ops.runs.submit("orders", {}, version=2)).run
    assert (await env.ops.runs.get(pinned.id)).deployment_id is None


async def test_a_child_workflows_deployment_past_stage_1_names_the_stage_it_waits_in(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """Direct submissions took it past stage 1: the warning that parents pin the workflow
    names the stage in force, not "stays in stage 1" beside "stage 2 of 2"."""
    await env.publish(
        version_doc("orders", downstream.url),
        version_doc("orders", downstream.url, note="-v2"),
        spawner_of("batches", "orders"),
    )
    stages = [
        StageSpec(weight=50, min_runs=1, min_duration_seconds=0),
        StageSpec(weight=100, min_runs=1000),
    ]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=1))
    assert "with none it stays in stage 1;" in started.warnings[0]
    await env.candidate_run("orders")
    shown = await env.checked(started, 1)
    assert (shown.status, shown.stage) == ("RUNNING", 2), shown
    (warning,) = shown.warnings
    assert "with none it stays in stage 2;" in warning, warning
    await env.ops.deployments.abort(started.id, actor="test")
