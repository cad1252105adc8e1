"""What a deployment's start and view warn about, and what an operator's retry or start over of
a run of an old version says it repeats (docs/architecture.md, 'Versions and deployments'),
through the operations layer on both backends, with a real worker and the demo downstream."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import pytest

from demo.downstream import RunningDownstream
from engine.coordination.heartbeat import Heartbeat
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.operations.views import RunFilter
from engine.store.deployments import DeploymentSpec
from engine.store.records import DeploymentRecord
from schemas.clock import utc_moment
from schemas.definitions import Workflow
from tests.integration.deploy_harness import Deploying, version_doc

HOLD = [StageSpec(weight=10, min_runs=1000), StageSpec(weight=100)]


async def test_a_retry_or_start_over_of_a_rolled_back_version_says_it_runs_it_again(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish_orders(downstream.url, candidate_fails=True)
    stages = [StageSpec(weight=50, min_runs=5, min_duration_seconds=0), StageSpec(weight=100)]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=3))
    ended = await env.drive(started, "orders", wave=8, advance_s=1)
    assert ended.status == "ROLLED_BACK" and ended.ended_at is not None
    failed = next(r for r in env.submitted if r.version == 2)
    ended_at = re.escape(utc_moment(ended.ended_at))
    said = (
        f"v2 of orders was rolled back by deployment {ended.id} at {ended_at}; this ACTION "
        "runs v2 again, not the serving v1: a ACTION always repeats the run's own version; "
        "to run this input on v1, submit it anew without a version "
        r"\(`schemabridge runs submit orders --input JSON`\)"
    )

    preview = await env.ops.actions.retry_preview(failed.id)
    retried = await env.ops.actions.retry(failed.id, actor="key:ops")
    await env.ops.runs.wait(failed.id, 15)
    # The monitor's Start over dialog says it before the click: the start over's preview.
    before = await env.ops.actions.start_over_preview(failed.id)
    assert (before.startable, before.new_run_id) == (True, None), before
    assert before.message == "would start a new run of v2 with the same input"
    restarted = await env.ops.actions.start_over(failed.id, actor="key:ops")
    after = await env.ops.actions.start_over_preview(failed.id)
    assert (after.startable, after.new_run_id, after.warnings) == (
        False,
        restarted.new_run_id,
        [],
    ), after
    assert after.message.startswith(f"already started over as run {restarted.new_run_id}")

    answers = ((preview, "retry"), (retried, "retry"), (before, "start over"))
    for answer, action in (*answers, (restarted, "start over")):
        assert any(re.fullmatch(said.replace("ACTION", action), w) for w in answer.warnings), (
            answer.warnings
        )
    # A run of the serving version says nothing of the kind.
    healthy = next(r for r in env.submitted if r.version == 1)
    again = await env.ops.actions.start_over(healthy.id, actor="key:ops")
    assert again.changed and again.warnings == [], again


async def test_a_batch_retry_of_a_rolled_back_version_says_it_once(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """The tour: `runs retry ID1 ID2` and `runs retry --status FAILED --workflow W` of runs of a
    rolled-back version answered `warnings: []`, where a retry of one of them warns. The
    batch and its preview say it once for the version, however many of its runs they take."""
    await env.publish_orders(downstream.url, candidate_fails=True)
    stages = [StageSpec(weight=50, min_runs=5, min_duration_seconds=0), StageSpec(weight=100)]
    started = await env.start("orders", 2, stages, RollbackSpec(min_finished_runs=3))
    ended = await env.drive(started, "orders", wave=8, advance_s=1)
    assert ended.status == "ROLLED_BACK" and ended.ended_at is not None
    failed = [r.id for r in env.submitted if r.version == 2]
    for run_id in failed:
        assert (await env.ops.runs.wait(run_id, 15)).status == "FAILED"
    assert len(failed) >= 2
    said = (
        f"v2 of orders was rolled back by deployment {ended.id} at "
        f"{utc_moment(ended.ended_at)}; this retry runs v2 again, not the serving v1"
    )
    selection = RunFilter(workflow="orders")

    preview = await env.ops.actions.batch_retry_preview(selection)
    assert preview.matching == len(failed)
    assert [w.startswith(said) for w in preview.warnings] == [True], preview.warnings
    # The monitor's "Retry selected" says it before the operator confirms: the preview of
    # the ids it sends, the deployment's own run and an unknown id among them skipped.
    asked = [*failed[:2], ended.run_id, "no-such-run"]
    before = await env.ops.actions.batch_retry_preview(ids=asked)
    assert before.matching == 2 and not before.truncated
    assert [w.startswith(said) for w in before.warnings] == [True], before.warnings
    assert sorted((s.reason, s.count) for s in before.skipped) == [
        ("deployment_run", 1),
        ("run_not_found", 1),
    ]
    by_ids = await env.ops.actions.batch_retry(failed[:2], actor="key:ops")
    assert sorted(by_ids.retried) == sorted(failed[:2])
    assert [w.startswith(said) for w in by_ids.warnings] == [True], by_ids.warnings
    for run_id in failed[:2]:
        await env.ops.runs.wait(run_id, 15)
    by_filter = await env.ops.actions.batch_retry(filter=selection, actor="key:ops")
    assert sorted(by_filter.retried) == sorted(failed)
    assert [w.startswith(said) for w in by_filter.warnings] == [True], by_filter.warnings
    # The same runs, once their version serves again, are retried without a word of it: the
    # batch above warned on them, so only the serving version differs.
    for run_id in failed:
        assert (await env.ops.runs.wait(run_id, 15)).status == "FAILED"
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")
    served = await env.ops.actions.batch_retry(failed, actor="key:ops")
    assert sorted(served.retried) == sorted(failed), served
    assert served.warnings == [], served


async def test_a_retry_of_a_version_that_no_longer_serves_says_so(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        version_doc("orders", downstream.url, fails=True), version_doc("orders", downstream.url)
    )
    (old,) = await env.wave("orders", 1)
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")

    preview = await env.ops.actions.retry_preview(old.id)

    assert preview.retriable
    assert preview.warnings[0].startswith(
        "v1 of orders no longer serves; this retry runs v1 again, not the serving v2"
    )
    # A run that pinned its version asked for it: nothing to warn about.
    pinned = (await env.ops.runs.submit("orders", {}, version=1)).run
    assert (await env.ops.runs.wait(pinned.id, 15)).status == "FAILED"
    asked = await env.ops.actions.retry_preview(pinned.id)
    assert asked.retriable and asked.warnings == [], asked


async def test_a_started_over_run_of_a_version_that_no_longer_serves_is_warned_of_too(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """A start over repeats the run it started over, so its route (`start_over`) does not
    hide that the run was routed to a version that no longer serves: its retry, its own start
    over and their previews say so, down a chain of start overs; one of a run that pinned
    its version says nothing, as that run's retry does not."""
    await env.publish(
        version_doc("orders", downstream.url, fails=True), version_doc("orders", downstream.url)
    )
    (old,) = await env.wave("orders", 1)
    pinned = (await env.ops.runs.submit("orders", {}, version=1)).run
    assert (await env.ops.runs.wait(pinned.id, 15)).status == "FAILED"
    first = (await env.ops.actions.start_over(old.id, actor="key:ops")).new_run_id
    repeat = (await env.ops.actions.start_over(pinned.id, actor="key:ops")).new_run_id
    for run_id in (first, repeat):
        assert (await env.ops.runs.wait(run_id, 15)).status == "FAILED"
        assert (await env.ops.runs.get(run_id)).route == "start_over"
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")
    said = "v1 of orders no longer serves; this ACTION runs v1 again, not the serving v2"

    async def warned(run_id: str) -> None:
        retry = await env.ops.actions.retry_preview(run_id)
        start_over = await env.ops.actions.start_over_preview(run_id)
        assert retry.warnings[0].startswith(said.replace("ACTION", "retry")), retry
        assert start_over.warnings[0].startswith(said.replace("ACTION", "start over"))

    await warned(first)
    second = await env.ops.actions.start_over(first, actor="key:ops")
    assert second.warnings[0].startswith(said.replace("ACTION", "start over")), second
    assert (await env.ops.runs.wait(second.new_run_id, 15)).status == "FAILED"
    await warned(second.new_run_id)  # started over from a start over: the chain's first run
    assert (await env.ops.actions.retry_preview(repeat)).warnings == []
    assert (await env.ops.actions.start_over_preview(repeat)).warnings == []
    # A batch says it once for v1, whether it is given the start overs or a filter (which
    # takes just them: the runs started over are skipped).
    ids = [second.new_run_id, repeat]
    for preview in (
        await env.ops.actions.batch_retry_preview(RunFilter(workflow="orders")),
        await env.ops.actions.batch_retry_preview(ids=ids),
    ):
        assert preview.matching == 2, preview
        assert [w.startswith(said.replace("ACTION", "retry")) for w in preview.warnings] == [True]
    retried = await env.ops.actions.batch_retry(ids, actor="key:ops")
    assert sorted(retried.retried) == sorted(ids), retried
    assert [w.startswith(said.replace("ACTION", "retry")) for w in retried.warnings] == [True]


async def test_a_start_warns_of_what_will_keep_it_from_a_sound_verdict(
    env: Deploying, downstream: RunningDownstream
) -> None:
    serving = {**version_doc("orders", downstream.url), "inputSchema": {"type": "object"}}
    strict = {
        **version_doc("orders", downstream.url, note="-v2"),
        "inputSchema": {"type": "object", "required": ["priority"]},
    }
    await env.publish(serving, strict)
    await env.wave("orders", 3)  # v1 accepts {} from every client

    # Judged on nothing (minFinishedRuns 0); its stages hold for runs, so it stays to be
    # rolled back below (a start with no minimum at all: tests/unit/test_deployment_warnings.py).
    first = await env.start("orders", 2, HOLD, RollbackSpec(min_finished_runs=0))

    assert first.warnings[0].startswith(
        "v2's inputSchema refuses 3 of the 3 latest inputs v1 accepted (e.g. at /: "
    )
    assert 'missing the required field "priority"' in first.warnings[0]
    assert first.warnings[1] == (
        "the rollback policy needs no finished run (minFinishedRuns 0): the candidate can pass "
        "every stage without a single run judged; give --min-finished (minFinishedRuns) at "
        "least 1 for a verdict on evidence"
    )
    rolled = await env.ops.deployments.rollback(first.id, actor="key:ops")
    assert rolled.deployment.ended_at is not None

    env.clock.advance(1)
    again = await env.start("orders", 2, HOLD, RollbackSpec())

    assert len(again.warnings) == 2  # the input, and the rollback before
    assert again.warnings[1].startswith(
        f"v2 was rolled back manually by key:ops in deployment {first.id} at "
    )
    # Stopped by hand with no run failed: nothing to fix, and none asked.
    assert again.warnings[1].endswith(
        "Z, with none of its runs failed; this deployment starts it again at stage 1"
    ), again.warnings[1]


async def test_a_stage_that_waits_for_finished_runs_says_so_before_and_while_it_waits(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """The tour, scaled down: `--stages 25,50,100 --min-runs 10` with the default
    `--min-finished` 20, shown "25 % (10 runs, 10 s)" while its check said "19/20 finished
    runs", and warned of nothing. The preview and the start warn; each stage's words and the
    check's name the same finished runs."""
    await env.publish_orders(downstream.url)
    stages = [StageSpec(weight=w, min_runs=2, min_duration_seconds=0) for w in (25, 50, 100)]
    policy = RollbackSpec(min_finished_runs=6)
    said = (
        "stage 1 waits for 6 finished runs of v2 (--min-finished, minFinishedRuns) before it "
        "can pass, more than its 2 runs (--min-runs, minRuns): at 25 % of new runs, about "
        "24 submissions"
    )

    preview = await env.ops.deployments.start_preview("orders", 2, stages=stages, rollback=policy)
    started = await env.start("orders", 2, stages, policy)

    assert preview.warnings == [said], preview.warnings
    assert started.warnings == [said], started.warnings
    # Stage 1 alone names them: no stage passes before, so the later ones begin with them.
    waits = ["2 runs, 6 finished runs", "2 runs", "2 runs"]
    assert [s.waits_for for s in started.stages] == waits
    for _ in range(2):
        await env.candidate_run("orders")
    shown = await env.checked(started, 1)
    assert shown.stage == 1 and shown.holding is not None, shown
    # Its 2 runs are there: what it still waits for is what its words said besides them.
    assert shown.holding.startswith("waiting at stage 1: 2/6 finished runs; "), shown.holding
    assert shown.stages[0].waits_for == "2 runs, 6 finished runs"


async def test_a_rollback_later_superseded_by_the_version_serving_is_not_warned_of(
    env: Deploying, downstream: RunningDownstream
) -> None:
    """The tour: `deployments start ticket --version 3` warned that v3 was rolled back in a
    deployment although a later one promoted v3 and it served. A later deployment that
    promoted it, or began while it served, or a serving switch to it, supersedes the
    rollback, for a start as for a retry's warning (one store read)."""
    await env.publish_orders(downstream.url)
    first = await env.start("orders", 2, HOLD, RollbackSpec())
    await env.ops.deployments.rollback(first.id, actor="key:ops")
    assert await env.runtime.store.latest_rolled_back("orders", 2) is not None

    env.clock.advance(1)
    quick = [StageSpec(weight=100, min_runs=0, min_duration_seconds=0)]
    promoted = await env.start("orders", 2, quick, RollbackSpec(min_finished_runs=0))
    promoted = await env.checked(promoted, 1)
    assert promoted.status == "SUCCEEDED", promoted
    env.clock.advance(1)
    await env.ops.deployments.set_serving("orders", 1, actor="key:ops")

    env.clock.advance(1)
    again = await env.start("orders", 2, HOLD, RollbackSpec())
    assert not any("rolled back" in w for w in again.warnings), again.warnings
    assert await env.runtime.store.latest_rolled_back("orders", 2) is None

    # A rollback after it served is news again; a switch to the version after that is not.
    await env.ops.deployments.rollback(again.id, actor="key:ops")
    assert (await env.runtime.store.latest_rolled_back("orders", 2)) is not None
    env.clock.advance(1)
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")
    await env.ops.deployments.set_serving("orders", 1, actor="key:ops")
    assert await env.runtime.store.latest_rolled_back("orders", 2) is None


async def test_no_worker_alive_is_a_warning_and_the_hold_reason(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish_orders(downstream.url)
    runtime = env.runtime

    async def beat(name: str) -> None:
        heartbeat = Heartbeat(name, runtime.redis, env.clock, interval_s=1, ttl_s=30)
        await heartbeat.beat()

    await beat("worker-a")
    await beat("api-host-8000")
    alive = await env.start("orders", 2, HOLD, RollbackSpec())
    assert alive.warnings == []
    assert (await env.ops.deployments.abort(alive.id, actor="key:ops")).changed

    # Both beats stale: the worker is down … Past the wall clock too: the test's clock starts
    # in 2023, so a worker of another test beating into the same Redis now would read as
    # alive, from the future (the full run of 2026-12-05 20:44 met one).
    env.clock.advance(max(60.0, time.time() + 3_600 - env.clock.now()))
    await beat("api-host-8000")  # … and only the API process beats
    stalled = await env.start("orders", 2, HOLD, RollbackSpec())

    assert stalled.warnings == [
        "no worker is alive: nothing runs — not the candidate's runs, not the serving "
        "version's, not the stage's checks — so the deployment cannot progress until one "
        "starts (`schemabridge worker`; `schemabridge services` lists them)"
    ]
    shown = await env.ops.deployments.get(stalled.id)
    assert shown.holding is not None and shown.holding.startswith("no worker is alive: ")
    await beat("worker-b")
    holding = (await env.ops.deployments.get(stalled.id)).holding
    assert holding is None or not holding.startswith("no worker is alive")


async def test_a_done_retry_or_start_over_still_warns_when_the_database_is_lost_after(
    env: Deploying, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning's facts are read before the action: once it has committed, a database
    lost before the answer must not turn a done retry or start over into "unavailable"."""
    await env.publish(
        version_doc("orders", downstream.url, fails=True), version_doc("orders", downstream.url)
    )
    (old,) = await env.wave("orders", 1)
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")
    store = env.runtime.store
    read_facts, retry_runs, start_over = store.rerun_facts, store.retry_runs, store.start_over
    lost = False

    async def facts_unless_lost(run_id: str) -> Any:
        if lost:
            raise ConnectionRefusedError("the database went away after the commit")
        return await read_facts(run_id)

    def then_lost(action: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def committed(*args: Any, **kwargs: Any) -> Any:
            nonlocal lost
            done = await action(*args, **kwargs)
            lost = True
            return done

        return committed

    monkeypatch.setattr(store, "rerun_facts", facts_unless_lost)
    monkeypatch.setattr(store, "retry_runs", then_lost(retry_runs))
    monkeypatch.setattr(store, "start_over", then_lost(start_over))
    said = "v1 of orders no longer serves; this ACTION runs v1 again, not the serving v2"

    retried = await env.ops.actions.retry(old.id, actor="key:ops")
    lost = False
    await env.ops.runs.wait(old.id, 15)
    restarted = await env.ops.actions.start_over(old.id, actor="key:ops")

    assert retried.changed and retried.warnings[0].startswith(said.replace("ACTION", "retry"))
    assert restarted.changed
    assert restarted.warnings[0].startswith(said.replace("ACTION", "start over"))


class _Unreachable:
    """An engine whose database went away: every connection is refused."""

    def connect(self) -> NoReturn:
        raise ConnectionRefusedError("the database went away after the commit")

    begin = connect


def _lost_after_start(
    env: Deploying,
    monkeypatch: pytest.MonkeyPatch,
    before: Callable[[], Awaitable[Any]],
    *,
    lose: bool = True,
) -> Callable[[], None]:
    """Make the store's `start_deployment` run `before()`, commit, then (with `lose`) lose
    the database, every read and write refused, until the returned function is called."""
    store = env.runtime.store
    start, engines = store.start_deployment, store._engines

    async def started_then_lost(spec: DeploymentSpec, system: Workflow) -> DeploymentRecord:
        await before()
        record = await start(spec, system)
        if not lose:
            return record
        lost = _Unreachable()
        monkeypatch.setattr(store, "_engines", dataclasses.replace(engines, read=lost, write=lost))
        return record

    monkeypatch.setattr(store, "start_deployment", started_then_lost)
    return lambda: monkeypatch.setattr(store, "_engines", engines)


async def _nothing() -> None:
    return None


async def test_a_started_deployment_says_so_when_the_database_is_lost_after(
    env: Deploying, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's warnings are read before it, and its answer is the row it wrote: once it
    has committed, a database lost before the answer must not turn a started deployment into
    "unavailable" (the operator's start sent again would be refused: one is running)."""
    serving = {**version_doc("orders", downstream.url), "inputSchema": {"type": "object"}}
    strict = {
        **version_doc("orders", downstream.url, note="-v2"),
        "inputSchema": {"type": "object", "required": ["priority"]},
    }
    await env.publish(serving, strict)
    await env.wave("orders", 3)
    found = _lost_after_start(env, monkeypatch, _nothing)

    started = await env.start("orders", 2, HOLD, RollbackSpec())

    assert (started.status, started.stage, started.weight) == ("RUNNING", 1, 10)
    assert (started.serving_version, started.serving_version_now, started.candidate.runs) == (
        1,
        1,
        0,
    )
    assert len(started.warnings) == 1
    assert started.warnings[0].startswith("v2's inputSchema refuses 3 of the 3 latest inputs v1")
    found()
    shown = await env.ops.deployments.get(started.id)
    assert (shown.status, shown.run_id) == ("RUNNING", started.run_id)


@pytest.mark.parametrize("lost", [False, True], ids=["found", "lost"])
async def test_a_serving_switch_racing_the_start_checks_the_inputs_of_the_new_one(
    env: Deploying, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch, lost: bool
) -> None:
    """The inputs read before the start are the serving version's then: when a switch
    commits in between, those of the version the deployment runs against are read after
    it, and when the database is lost by then the start answers without that warning."""
    schema = {"inputSchema": {"type": "object"}}
    await env.publish(
        {**version_doc("orders", downstream.url), **schema},
        {
            **version_doc("orders", downstream.url, note="-v2"),
            "inputSchema": {"type": "object", "required": ["priority"]},
        },
        {**version_doc("orders", downstream.url, note="-v3"), **schema},
    )
    await env.ops.deployments.set_serving("orders", 3, actor="key:ops")
    await env.wave("orders", 2, prefix="v3")
    await env.ops.deployments.set_serving("orders", 1, actor="key:ops")
    await env.wave("orders", 3, prefix="v1")

    async def switch() -> None:
        await env.runtime.store.set_serving("orders", 3, actor="key:ops")

    _lost_after_start(env, monkeypatch, switch, lose=lost)

    started = await env.start("orders", 2, HOLD, RollbackSpec())

    assert (started.status, started.serving_version) == ("RUNNING", 3)
    if lost:
        assert started.warnings == []
    else:
        assert len(started.warnings) == 1
        assert started.warnings[0].startswith(
            "v2's inputSchema refuses 2 of the 2 latest inputs v3 accepted"
        )
