"""Gradual deployments end to end through the operations layer, on both backends: the
`gradual_deploy` run executed by a real worker, real runs against the demo downstream, and an
injected clock for the stages' durations (no sleeping)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from demo.downstream import RunningDownstream
from engine.operations import Operations, routing, submission
from engine.operations.audit_views import AuditFilter
from engine.operations.deployment_views import DeploymentView, RollbackSpec, StageSpec
from engine.operations.views import RunDetail, RunFilter
from engine.runtime import Runtime
from engine.store.models import Run
from schemas.clock import FakeClock
from schemas.errors import InvalidRequest, NotFound, WrongState
from tests.conftest import Backend
from tests.integration.deploy_harness import Deploying, version_doc
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from tests.integration.operations_harness import ended, fanout, items, single

UNREACHABLE = "http://127.0.0.1:9/never"
"""Runs of tests without a worker never reach it."""
WAVES = 30
KEYS = 150
"""Submissions of the routing test (the share over 1,000 keys is tests/unit/test_routing.py's:
routing there is the same function, without a database round trip per key)."""


async def test_a_failing_candidate_is_rolled_back_during_the_first_stage(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish_orders(downstream.url, candidate_fails=True)
    stages = [StageSpec(weight=10, min_runs=10, min_duration_seconds=60), StageSpec(weight=100)]
    rollback = RollbackSpec(max_failure_ratio=0.05, min_finished_runs=5)
    started = await env.start("orders", 2, stages, rollback)
    assert (started.status, started.stage, started.weight) == ("RUNNING", 1, 10)

    ended = await env.drive(started, "orders", wave=10, advance_s=1)

    assert ended.status == "ROLLED_BACK" and ended.stage == 1 and ended.weight is None
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
    # The system run did its job: it ends SUCCEEDED with the verdict as its stage's output
    # (a FAILED run would wait for an operator, and be counted among the failures beside the
    # candidate's own); the later stage is not run. The deployment says it rolled back.
    run = await env.ops.runs.get(ended.run_id)
    assert (run.workflow, run.status, run.tenant_id, run.route) == (
        "gradual_deploy",
        "SUCCEEDED",
        "system",
        "system",
    )
    assert run.error is None
    assert [(s.vertex_id, s.status) for s in run.steps] == [
        ("stage-1", "SUCCEEDED"),
        ("stage-2", "SUCCEEDED"),
    ]
    judged, after_it = (s.output for s in run.steps)
    assert judged["outcome"] == "rolled_back" and judged["deployment"] == "ROLLED_BACK"
    assert "rolled back at stage 1" in judged["verdict"]
    assert judged["exposure"] == ended.exposure and judged["threshold"] == 0.05
    assert after_it["outcome"] == "not_run" and after_it["verdict"].startswith("not run: ")
    assert await env.run_count(workflow="gradual_deploy", status="FAILED") == 0
    await operator_actions_are_refused(env, ended, run)
    ops = env.ops.actions
    # From the rollback on, every new run gets the serving version.
    after = await env.wave("orders", 20, prefix="after")
    assert {(r.version, r.route) for r in after} == {(1, "serving")}
    assert (await env.ops.deployments.serving("orders")).candidate_version is None
    # "Retry all matching": the preview counts the candidate's FAILED runs, not the engine's
    # own run, and the batch sent with that count as its `limit` (what the monitor's confirm
    # sends) retries them all and skips the engine's run beside them.
    counted = await ops.batch_retry_preview(RunFilter())
    assert (counted.matching, counted.truncated) == (len(candidate_runs), False)
    every = await ops.batch_retry(filter=RunFilter(), limit=counted.matching, actor="key:ops")
    assert sorted(every.retried) == sorted(r.id for r in candidate_runs)
    assert every.skipped == []
    for retried in candidate_runs:
        await env.ops.runs.wait(retried.id, 15)


async def operator_actions_are_refused(
    env: Deploying, ended: DeploymentView, run: RunDetail
) -> None:
    """Operator actions on the engine's own run would rewrite the rollback's record: refused,
    pointing at the deployment; the run keeps its end and its stage's outcome."""
    ops = env.ops.actions
    actions = {
        "retry": ops.retry(ended.run_id, actor="key:ops"),
        "resolve": ops.resolve(ended.run_id, "stage-1", {}, actor="key:ops"),
        "start over": ops.start_over(ended.run_id, actor="key:ops"),
        "reprocess": ops.reprocess(ended.run_id, actor="key:ops"),
    }
    for action, refused in actions.items():
        with pytest.raises(WrongState) as refusal:
            await refused
        assert refusal.value.code == "deployment_run"
        assert refusal.value.details == {
            "state": run.status,
            "runId": ended.run_id,
            "deploymentId": ended.id,
        }
        assert f"a {action} would rewrite the record" in refusal.value.message
        assert "start a new deployment" in refusal.value.message
    preview = await ops.retry_preview(ended.run_id)
    assert not preview.retriable and "deployment_run" not in preview.warnings[0]
    assert preview.warnings[0].startswith(f"run {ended.run_id} is the engine's own run")
    before = await ops.reprocess_preview(ended.run_id)
    assert (before.reprocessable, before.status, before.revived) == (False, run.status, 0)
    assert before.warnings == [preview.warnings[0].replace("a retry", "a reprocess")]
    batch = await ops.batch_retry(ids=[ended.run_id], actor="key:ops")
    assert batch.retried == [] and [s.reason for s in batch.skipped] == ["deployment_run"]
    after_actions = await env.ops.runs.get(ended.run_id)
    assert (after_actions.status, after_actions.ended_at) == (run.status, run.ended_at)
    assert [s.status for s in after_actions.steps] == [s.status for s in run.steps]
    assert (await env.ops.deployments.get(ended.id)).status == "ROLLED_BACK"


async def test_a_healthy_candidate_reaches_every_stage_and_becomes_serving(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish_orders(downstream.url)
    stages = [
        StageSpec(weight=50, min_runs=3, min_duration_seconds=30),
        StageSpec(weight=100, min_runs=3, min_duration_seconds=30),
    ]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=3))

    ended = await env.drive(started, "orders", wave=8, advance_s=10)

    assert ended.status == "SUCCEEDED" and ended.stage == 2 and ended.weight is None
    assert ended.candidate.failed == 0 and ended.candidate.runs >= 6
    # Each stage held for its minimum duration on the injected clock, no wall time.
    first, second = ended.stages
    assert first.started_at is not None and second.started_at is not None
    assert second.started_at - first.started_at >= 30
    assert ended.ended_at is not None and ended.ended_at - second.started_at >= 30
    assert [e.event for e in ended.timeline] == ["started", "stage", "succeeded"]
    assert ended.timeline[1].note is not None and "within threshold" in ended.timeline[1].note
    serving = await env.ops.deployments.serving("orders")
    assert (serving.serving_version, serving.candidate_version) == (2, None)
    assert serving.updated_by == f"deployment:{ended.id}"
    run = await env.ops.runs.get(ended.run_id)
    assert run.status == "SUCCEEDED"
    assert [s.status for s in run.steps] == ["SUCCEEDED", "SUCCEEDED"]
    # The candidate now serves every run that names no version.
    after = await env.wave("orders", 5, prefix="after")
    assert {(r.version, r.route) for r in after} == {(2, "serving")}


async def test_publishing_alone_moves_no_traffic(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(version_doc("orders", downstream.url))
    first = await env.wave("orders", 3)
    await env.publish(version_doc("orders", downstream.url, fails=True))
    later = await env.wave("orders", 10)
    assert {(r.version, r.route) for r in first + later} == {(1, "serving")}
    summary = next(w for w in await env.ops.workflows.list() if w.name == "orders")
    assert (summary.latest_version, summary.serving_version) == (2, 1)
    # Only a request that names v2 gets it.
    pinned = (await env.ops.runs.submit("orders", {}, version=2)).run
    assert (pinned.version, pinned.route) == (2, "pinned")
    # A run may pin the child workflows' versions too (what `schemabridge run` does with the
    # versions it has just published); nothing serves differently for it.
    await env.ops.workflows.publish(fanout(downstream.url))
    await env.publish(version_doc("child", downstream.url, note="-v2"))
    children_pinned = await env.ops.runs.submit(
        "parent", {"items": items(2)}, child_versions={"child": 2}
    )
    detail = await env.ops.runs.wait(children_pinned.run.id, 30)
    assert detail.status == "SUCCEEDED"
    child_runs = (await env.ops.runs.children(detail.id)).items
    assert {(c.workflow, c.version) for c in child_runs} == {("child", 2)}
    assert (await env.ops.deployments.serving("child")).serving_version == 1
    with pytest.raises(NotFound) as unknown:
        await env.ops.runs.submit("parent", {"items": []}, child_versions={"child": 9})
    assert unknown.value.code == "workflow_not_found"


async def test_serve_demo_publishes_serving_unless_a_deployment_runs(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """`serve --demo` publishes its examples at a new address on every start and runs them:
    its new versions serve, recorded as its doing, except where a deployment runs."""
    ops = env.ops
    await ops.workflows.publish_serving(version_doc("orders", downstream.url), actor="demo")
    moved = await ops.workflows.publish_serving(
        version_doc("orders", downstream.url, note="-v2"), actor="serve --demo"
    )
    assert [(p.version, p.created) for p in moved] == [(2, True)]
    serving = await ops.deployments.serving("orders")
    assert (serving.serving_version, serving.updated_by) == (2, "serve --demo")
    assert {r.version for r in await env.wave("orders", 3)} == {2}

    await env.publish(version_doc("orders", downstream.url, note="-v3"))
    stages = [StageSpec(weight=10, min_runs=1000), StageSpec(weight=100)]
    running = await env.start("orders", 3, stages, RollbackSpec())
    kept = await ops.workflows.publish_serving(
        version_doc("orders", downstream.url, note="-v4"), actor="serve --demo"
    )
    assert [p.version for p in kept] == [4]
    during = await ops.deployments.serving("orders")
    assert (during.serving_version, during.candidate_version) == (2, 3)
    assert during.deployment_id == running.id and during.candidate_weight == 10


async def test_routing_is_sticky_and_follows_the_weight(backend: Backend) -> None:
    # No worker: routing is decided at submission, and the runs need not run.
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(single("orders", UNREACHABLE))
        await ops.workflows.publish(single("orders", UNREACHABLE, description="v2"))
        stages = [StageSpec(weight=25), StageSpec(weight=100)]
        deployment = await ops.deployments.start(
            "orders", 2, actor="test", stages=stages, rollback=RollbackSpec()
        )
        keys = [f"order-{i}" for i in range(KEYS)]
        versions = {}
        for key in keys:
            run = (await ops.runs.submit("orders", {}, idempotency_key=key)).run
            versions[key] = run.version
            expected = routing.place(deployment.id, submission.stored_key("default", key)) < 25
            assert run.route == ("candidate" if expected else "serving")
            assert run.version == (2 if expected else 1)
        assert 0 < sum(v == 2 for v in versions.values()) < KEYS
        # A retry with the same key and request is the same run, on the same version.
        for key in keys[:20]:
            again = await ops.runs.submit("orders", {}, idempotency_key=key)
            assert not again.created and again.run.version == versions[key]
        counted = await ops.deployments.get(deployment.id)
        assert counted.exposure == sum(v == 2 for v in versions.values())
        assert counted.serving.runs == KEYS - counted.exposure
    finally:
        await runtime.close()


async def test_abort_and_manual_rollback(env: Deploying, downstream: RunningDownstream) -> None:
    await env.publish_orders(downstream.url)
    stages = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
    first = await env.start("orders", 2, stages, RollbackSpec())
    await env.wave("orders", 6)
    # `deployments show` says what the stage waits for, in the words `runs show` gives its
    # step, with the failure ratio so far.
    held = await env.checked(first, 1)
    assert held.holding is not None and held.holding.startswith("waiting at stage 1: ")
    assert "/1,000 runs" in held.holding and "threshold 0.050" in held.holding
    aborted = await env.ops.deployments.abort(first.id, actor="key:ops")
    assert aborted.changed and aborted.deployment.status == "ABORTED"
    assert aborted.deployment.weight is None and aborted.deployment.outcome is not None
    assert aborted.deployment.outcome.reason == "stopped by key:ops"
    assert aborted.deployment.exposure == sum(r.version == 2 for r in env.submitted)
    assert (await env.ops.runs.get(first.run_id)).status == "CANCELLED"
    assert (await env.ops.deployments.get(first.id)).holding is None  # ended: holds nothing
    again = await env.ops.deployments.abort(first.id, actor="key:ops")
    assert not again.changed and again.deployment.status == "ABORTED"
    with pytest.raises(WrongState) as ended:
        await env.ops.deployments.rollback(first.id, actor="key:ops")
    assert ended.value.code == "deployment_ended" and ended.value.state == "ABORTED"
    assert {r.version for r in await env.wave("orders", 10, prefix="after-abort")} == {1}

    env.clock.advance(1)  # the next deployment's window starts after the first's
    second = await env.start("orders", 2, stages, RollbackSpec())
    await env.wave("orders", 6, prefix="second")
    rolled = await env.ops.deployments.rollback(second.id, actor="key:ops")
    assert rolled.changed and rolled.deployment.status == "ROLLED_BACK"
    outcome = rolled.deployment.outcome
    assert outcome is not None and outcome.actor == "key:ops" and outcome.stage == 1
    assert outcome.figures is not None and "candidate" in outcome.figures
    assert (await env.ops.runs.get(second.run_id)).status == "CANCELLED"
    assert not (await env.ops.deployments.rollback(second.id, actor="x")).changed
    # The first deployment's exposure stops where the second began.
    assert (await env.ops.deployments.get(first.id)).exposure == aborted.deployment.exposure
    listed = (await env.ops.deployments.list("orders")).items
    assert [d.id for d in listed] == [second.id, first.id]
    # A page at a time, newest first; the cursor belongs to its list.
    page = await env.ops.deployments.list("orders", limit=1)
    assert [d.id for d in page.items] == [second.id] and page.next is not None
    rest = await env.ops.deployments.list("orders", limit=1, cursor=page.next)
    assert ([d.id for d in rest.items], rest.next) == ([first.id], None)
    everyone = await env.ops.deployments.recent(limit=1)
    assert [d.id for d in everyone.items] == [second.id]
    for cursor in (everyone.next, (page.next or "")[:-2] + "xx"):
        with pytest.raises(InvalidRequest) as refused:
            await env.ops.deployments.list("orders", limit=1, cursor=cursor)
        assert refused.value.code == "invalid_cursor"
    # Deployments of the same shape run the same version of the system workflow.
    system_runs = [await env.ops.runs.get(d.run_id) for d in (first, second)]
    assert {(r.workflow, r.version) for r in system_runs} == {("gradual_deploy", 1)}
    assert (await env.ops.deployments.serving("orders")).serving_version == 1


async def test_one_deployment_at_a_time_and_no_switch_meanwhile(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        version_doc("orders", downstream.url),
        version_doc("orders", downstream.url, note="-v2"),
        version_doc("orders", downstream.url, note="-v3"),
    )
    stages = [StageSpec(weight=10, min_runs=1000), StageSpec(weight=100)]
    running = await env.start("orders", 2, stages, RollbackSpec())
    with pytest.raises(WrongState) as second:
        await env.start("orders", 3, stages, RollbackSpec())
    assert second.value.code == "deployment_running"
    assert second.value.details["deploymentId"] == running.id
    with pytest.raises(WrongState) as switch:
        await env.ops.deployments.set_serving("orders", 3, actor="key:ops")
    assert switch.value.code == "deployment_running"
    # Cancelling the deployment's run (the run monitor's cancel) aborts the deployment.
    cancelled = await env.ops.actions.cancel(running.run_id, actor="key:ops")
    assert cancelled.message == (
        f"cancelled (2 steps); deployment {running.id} (orders v2), which it drove, is aborted: "
        "v2 gets no new runs, v1 serves"
    )
    assert cancelled.aborted_deployment is not None
    assert cancelled.aborted_deployment.model_dump() == {
        "id": running.id,
        "workflow": "orders",
        "version": 2,
        "serving_version": 1,
    }
    aborted = await env.ops.deployments.get(running.id)
    assert aborted.status == "ABORTED" and aborted.weight is None
    assert aborted.outcome is not None and "cancelled by key:ops" in aborted.outcome.reason
    switched = await env.ops.deployments.set_serving("orders", 3, actor="key:ops")
    assert (switched.serving_version, switched.updated_by) == (3, "key:ops")
    with pytest.raises(WrongState) as same:
        await env.start("orders", 3, stages, RollbackSpec())
    assert same.value.code == "candidate_is_serving"
    assert same.value.message == (
        "orders v3 is already the serving version; publish a new version and deploy that"
    )


async def test_refusals_of_a_deployment_that_cannot_work(env: Deploying) -> None:
    await env.publish(single("orders", UNREACHABLE), single("orders", UNREACHABLE, description="2"))
    with pytest.raises(NotFound) as unknown:
        await env.start("orders", 9, [StageSpec(weight=100)], RollbackSpec())
    # Told as every front door tells an unknown version: with the versions there are.
    assert unknown.value.code == "workflow_not_found"
    assert unknown.value.details == {"versions": [1, 2]}
    assert "workflow 'orders' has no version 9" in unknown.value.message
    with pytest.raises(NotFound) as preview:
        await env.ops.deployments.start_preview(
            "orders", 9, stages=[StageSpec(weight=100)], rollback=RollbackSpec()
        )
    assert preview.value.details == {"versions": [1, 2]}
    with pytest.raises(NotFound) as ghost:
        await env.start("ordres", 1, [StageSpec(weight=100)], RollbackSpec())
    assert ghost.value.details == {"meant": ["orders"]}
    with pytest.raises(NotFound) as listed:
        await env.ops.deployments.list("ordres")
    assert listed.value.details == {"meant": ["orders"]}
    # The serving version (v1) named as the candidate, with a newer one published: that one
    # is the one to deploy, not "publish a new version".
    newest = (
        "orders v1 is already the serving version; deploy its newest, v2 (`schemabridge "
        "deployments start orders --version 2`)"
    )
    with pytest.raises(WrongState) as serving:
        await env.start("orders", 1, [StageSpec(weight=100)], RollbackSpec())
    assert (serving.value.code, serving.value.message) == ("candidate_is_serving", newest)
    with pytest.raises(WrongState) as serving_preview:
        await env.ops.deployments.start_preview(
            "orders", 1, stages=[StageSpec(weight=100)], rollback=RollbackSpec()
        )
    assert serving_preview.value.message == newest
    falling = [StageSpec(weight=50), StageSpec(weight=20), StageSpec(weight=90)]
    with pytest.raises(InvalidRequest) as invalid:
        await env.start("orders", 2, falling, RollbackSpec())
    assert invalid.value.code == "invalid_deployment"
    pointers = {p.pointer for p in invalid.value.problems}
    assert pointers == {"/stages/1/weight", "/stages/2/weight"}
    with pytest.raises(InvalidRequest) as too_fast:
        await env.start("orders", 2, [StageSpec(weight=100)], RollbackSpec(), 0.01)
    assert {p.pointer for p in too_fast.value.problems} == {"/checkIntervalSeconds"}
    with pytest.raises(InvalidRequest) as system:
        await env.start("gradual_deploy", 1, [StageSpec(weight=100)], RollbackSpec())
    assert system.value.code == "system_workflow"
    with pytest.raises(NotFound) as no_deployment:
        await env.ops.deployments.get("0" * 36)
    assert no_deployment.value.code == "deployment_not_found"
    assert (await env.ops.deployments.list("orders")).items == []
    # Nothing was created by the refusals.
    assert (await env.ops.deployments.serving("orders")).deployment_id is None
    assert await env.run_count(workflow="gradual_deploy") == 0


async def test_system_workflow_versions_are_found_by_content(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """Each start stores the gradual_deploy of its number of stages once: a start with a
    shape seen before runs the version stored then."""
    await env.publish_orders(downstream.url)
    store = env.runtime.store
    versions = []
    for shape in [2, 4, 2, 4, 3]:
        stages = [StageSpec(weight=10 * (i + 1), min_runs=1000) for i in range(shape - 1)]
        started = await env.start("orders", 2, [*stages, StageSpec(weight=100)], RollbackSpec())
        versions.append((await env.ops.runs.get(started.run_id)).version)
        await env.ops.deployments.abort(started.id, actor="test")
    assert versions == [1, 2, 1, 2, 3]
    stored = await store.get_version("gradual_deploy", 2)
    assert list(stored.workflow.vertices) == ["stage-1", "stage-2", "stage-3", "stage-4"]


async def test_a_candidate_whose_children_fail_through_a_merge_counts_as_failing(
    env: Deploying, downstream: RunningDownstream
) -> None:
    healthy = fanout(downstream.url)
    # v2 of the parent starts a child workflow whose calls are refused: each child fails, and
    # the MERGE (no tolerance) fails the parent, which is the run the deployment counts.
    broken_parent = {**healthy[0]}
    broken_parent["vertices"] = {
        **healthy[0]["vertices"],
        "each": {
            "type": "SPAWNER",
            "config": {"items": "{{ input.items }}", "workflow": "child-broken"},
        },
    }
    broken_child = version_doc("child-broken", downstream.url, fails=True)
    await env.ops.workflows.publish(healthy)
    await env.ops.workflows.publish([broken_parent, broken_child])
    stages = [StageSpec(weight=50, min_runs=100, min_duration_seconds=60), StageSpec(weight=100)]
    started = await env.start("parent", 2, stages, RollbackSpec(min_finished_runs=3))

    current = started
    for _ in range(WAVES):
        if current.status != "RUNNING":
            break
        for _ in range(4):
            run = (await env.ops.runs.submit("parent", {"items": items(2)})).run
            env.submitted.append(run)
        for run in env.submitted:
            await ended(env.ops, run.id)
        current = await env.checked(current, 1)

    assert current.status == "ROLLED_BACK" and current.stage == 1
    assert current.candidate.failed == current.candidate.finished >= 3
    # Only the roots count: the children (two per parent) are not runs of the candidate.
    assert current.exposure == sum(r.version == 2 for r in env.submitted)
    assert current.serving.failed == 0


async def test_a_failed_gradual_deploy_run_ends_its_deployment(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A stage step that fails with an error of its own (not a verdict) fails the system run;
    the deployment ends with it (ABORTED, the reason named), the candidate's weight drops to
    0, and the next deployment of the workflow is accepted instead of refused with 409."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, idle_poll_s=0.05), clock=clock)
    ops = Operations(runtime)
    try:
        for note in ("", "-v2"):
            await ops.workflows.publish(version_doc("orders", downstream.url, note=note))
        stages = [StageSpec(weight=50, min_runs=1000), StageSpec(weight=100)]
        first = await ops.deployments.start(
            "orders", 2, actor="test", stages=stages, rollback=RollbackSpec()
        )
        # Its stage step no longer finds its deployment: an internal error, no verdict.
        async with runtime.store._engines.write.begin() as conn:
            await conn.execute(
                update(Run.__table__)
                .where(Run.__table__.c.id == first.run_id)
                .values(input={"deploymentId": "gone"})
            )
        async with running_worker(runtime):
            run = await wait_for_run(runtime, first.run_id)
        ended = await ops.deployments.get(first.id)
        serving = await ops.deployments.serving("orders")
        clock.advance(1)
        second = await ops.deployments.start(
            "orders", 2, actor="test", stages=stages, rollback=RollbackSpec()
        )
    finally:
        await runtime.close()
    assert run.status == "FAILED"
    assert ended.status == "ABORTED" and ended.weight is None and ended.ended_at is not None
    assert ended.outcome is not None and ended.outcome.actor == "engine"
    assert ended.outcome.reason.startswith("its gradual_deploy run failed at stage-1: ")
    assert "no deployment 'gone' for this run" in ended.outcome.reason
    # The figures at its end, as every other end records them: later retries change the runs.
    figures = ended.outcome.figures
    assert figures is not None and figures["candidate"]["runs"] == 0, figures
    assert figures["serving"]["runs"] == 0, figures
    assert [e.event for e in ended.timeline][-1] == "aborted"
    assert (serving.serving_version, serving.candidate_version) == (1, None)
    assert (serving.candidate_weight, serving.deployment_id) == (0, None)
    assert second.status == "RUNNING" and second.weight == 50


async def test_identical_switches_at_once_change_the_serving_version_once(env: Deploying) -> None:
    """Six admins switch orders to v2 at the same moment: one switch changes it and is audited,
    the others find it serving already (`changed` False, no event). On PostgreSQL each read v1
    before any wrote, and every one wrote and audited a change after the first committed."""
    await env.publish(
        version_doc("orders", UNREACHABLE), version_doc("orders", UNREACHABLE, note="-v2")
    )
    before = await env.ops.audit.list(AuditFilter(action="workflow.serving_set"))
    switches = await asyncio.gather(
        *(env.ops.deployments.set_serving("orders", 2, actor=f"key:{n:012x}") for n in range(6))
    )
    assert sorted(s.changed for s in switches) == [False] * 5 + [True]
    (changer,) = [s for s in switches if s.changed]
    assert {s.serving_version for s in switches} == {2}
    assert {s.updated_by for s in switches} == {changer.updated_by}
    events = (await env.ops.audit.list(AuditFilter(action="workflow.serving_set"))).items
    assert len(events) == len(before.items) + 1
    assert (events[0].actor, events[0].detail) == (changer.updated_by, {"version": 2, "was": 1})
