"""Reprocessing a run whose joins had closed, through the operations layer, on both backends,
with real workers and the demo downstream on loopback: the steps after a reopened join run
again and call their destinations again, so the preview says so before (changing nothing),
and the answer and the run's log say so after, in the words a retry uses for the run it
reopens. The preview says what the reprocess then does (`engine.store.reprocess_plan` walks
the tree `engine.store.recovery` changes)."""

from __future__ import annotations

import asyncio
import time

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.actions import reopened_words
from engine.runtime import Runtime
from schemas.errors import NotFound
from tests.integration.actions_harness import (
    action_lines,
    failed_fan_out,
    requests_by_path,
    single,
    statements,
    submit,
    succeeded_over_a_failed_mid,
    succeeded_with_a_report,
)
from tests.integration.engine_harness import running_worker, wait_for_run
from vertices.gateway import destination_key

FAILING = {3, 97, 250, 499}


async def test_reprocessing_a_succeeded_fan_out_says_first_and_after_that_report_runs_again(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The integrator's case: 500 children, 4 FAILED and tolerated, the run SUCCEEDED and the
    partner got one POST /report. The preview names the 4 children, the run reopened and
    `report` with its destination, and sends nothing; the reprocess does what it said (the
    partner gets /report a second time), answers the retry's warning, and logs it with who."""
    destination = destination_key(downstream.url, None)
    async with running_worker(runtime):
        parent = await succeeded_with_a_report(runtime, downstream, 500, FAILING)
        dead = {c.id for c in await runtime.store.children(parent, status="FAILED", limit=10)}
        sent = downstream.stats.total
        preview = await ops.actions.reprocess_preview(parent)
        assert downstream.stats.total == sent, "the preview sends nothing"
        assert (await wait_for_run(runtime, parent)).status == "SUCCEEDED"
        assert await action_lines(runtime, parent) == [], "the preview logs no action"
        acted = time.time()
        result = await ops.actions.reprocess(parent, actor="key:ops")
        run = await wait_for_run(runtime, parent, timeout_s=60)
    assert run.status == "SUCCEEDED", run.error
    assert requests_by_path(downstream)["/report"] == 2
    # `report` ran again: its start is its second execution's, not its first one's.
    (report,) = [s for s in (await ops.runs.get(parent)).steps if s.vertex_id == "report"]
    assert report.started_at is not None and report.started_at >= acted - 0.01, report

    assert (preview.reprocessable, preview.status, preview.revived) == (True, "SUCCEEDED", 4)
    assert {c.id for c in preview.dead_letters} == dead and len(dead) == 4
    assert [c.item_index for c in preview.dead_letters] == sorted(FAILING)
    assert (preview.reopened_run, preview.reopened_join) == (parent, "join")
    (join,) = preview.reopened_joins
    assert (join.run_id, join.join, join.spawner, join.ended) == (
        parent,
        "join",
        "each",
        "SUCCEEDED",
    )
    assert [(s.vertex_id, s.type, s.destinations) for s in join.steps_again] == [
        ("report", "GATEWAY", [destination])
    ]
    said = reopened_words(parent, "join", above=False, again=[f"report (calls {destination})"])
    assert said == (
        f"run {parent} had SUCCEEDED and runs again from its join 'join': the steps after that "
        f"join run a second time: report (calls {destination})"
    )
    assert preview.warnings == [said]

    # The reprocess answered what the preview had said, in the same words.
    assert (result.changed, result.revived, result.status) == (True, 4, "RUNNING")
    assert result.warnings == preview.warnings
    assert (result.reopened_run, result.reopened_join) == (parent, "join")
    assert result.reopened_joins == preview.reopened_joins
    (line,) = await action_lines(runtime, parent)
    assert line["data"] == {"action": "reprocess", "actor": "key:ops"}
    assert line["message"] == (
        "reprocess by key:ops: 4 dead-lettered children run again; the run, which had "
        "SUCCEEDED, runs again from its join 'join' (report run a second time)"
    )
    # Nothing left to revive: the preview and the reprocess say so, and warn of nothing.
    after = await ops.actions.reprocess_preview(parent)
    assert (after.revived, after.warnings, after.reopened_joins) == (0, [], [])
    again = await ops.actions.reprocess(parent, actor="key:ops")
    assert (again.changed, again.warnings, again.reopened_run) == (False, [], None)


async def test_a_join_that_failed_reopens_without_a_warning(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The usual reprocess: a run FAILED at its join; nothing after the join had run, so
    nothing runs a second time and there is nothing to warn of."""
    async with running_worker(runtime):
        parent = await failed_fan_out(runtime, downstream, 4, failing={1})
        preview = await ops.actions.reprocess_preview(parent)
        result = await ops.actions.reprocess(parent, actor="cli")
        await wait_for_run(runtime, parent)
    assert (preview.status, preview.revived, preview.warnings) == ("FAILED", 1, [])
    (join,) = preview.reopened_joins
    assert (join.run_id, join.join, join.ended, join.steps_again) == (parent, "join", "FAILED", [])
    assert preview.reopened_run is None
    assert (result.revived, result.warnings, result.reopened_run) == (1, [], None)
    assert result.reopened_joins == preview.reopened_joins


async def test_nested_dead_letters_reopen_every_join_the_preview_names(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A mid FAILED (one of its leaves failed) under a top that SUCCEEDED: reprocessing the
    mid reopens the top above it (the retry's "above it" words, and a line in the top's
    log); reprocessing the top revives the mid and its leaf, reopening both joins. Each time
    the preview named what the reprocess then reopened."""
    async with running_worker(runtime):
        top, mid = await succeeded_over_a_failed_mid(runtime, downstream)
        downstream.script([400], path="/leaf")
        preview = await ops.actions.reprocess_preview(mid.id)
        result = await ops.actions.reprocess(mid.id, actor="cli")
        assert (await wait_for_run(runtime, top)).status == "SUCCEEDED"
        # Its leaf failed again (scripted): the mid is a dead letter again, under a top that
        # SUCCEEDED again. Reprocessed from the top, the mid and its leaf are revived.
        again_failed = await runtime.store.get_run(mid.id)
        assert again_failed is not None and again_failed.status == "FAILED"
        (leaf,) = await runtime.store.children(mid.id, status="FAILED")
        from_top = await ops.actions.reprocess_preview(top)
        done = await ops.actions.reprocess(top, actor="cli")
        assert (await wait_for_run(runtime, top)).status == "SUCCEEDED"
    assert (preview.revived, result.revived) == (1, 1)
    assert result.reopened_joins == preview.reopened_joins
    assert [(j.run_id, j.ended) for j in result.reopened_joins] == [
        (mid.id, "FAILED"),
        (top, "SUCCEEDED"),
    ]
    assert (result.reopened_run, result.reopened_join) == (top, "join")
    assert result.warnings == preview.warnings == [reopened_words(top, "join")]
    top_lines = [line["message"] for line in await action_lines(runtime, top)]
    assert f"reprocess by cli of run {mid.id} below: the join 'join' reopens" in top_lines

    assert (from_top.revived, done.revived) == (2, 2)
    assert done.reopened_joins == from_top.reopened_joins
    assert [(j.run_id, j.ended) for j in done.reopened_joins] == [
        (top, "SUCCEEDED"),
        (mid.id, None),
    ]
    assert done.warnings == from_top.warnings
    # The nested dead letter revived with the mid says so too, naming the run reprocessed.
    for child in (mid.id, leaf.id):
        said = [line["message"] for line in await action_lines(runtime, child)]
        assert said[-1] == f"reprocess by cli of run {top} above: this dead letter runs again"


async def test_each_revived_child_logs_who_reprocessed_it_in_one_insert(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A revived child's log went from its failure straight to a new attempt: each now gets
    the action's line (who, and the run reprocessed), as a cancel's children do, and the
    lines of all the children go in one statement, not one per child. Children that had
    succeeded get none."""
    failing = {1, 4, 6, 9}
    async with running_worker(runtime):
        parent = await failed_fan_out(runtime, downstream, 10, failing=failing)
        dead = {c.id for c in await runtime.store.children(parent, status="FAILED", limit=20)}
        with statements(runtime) as sent:
            result = await ops.actions.reprocess(parent, actor="key:ops")
        assert (await wait_for_run(runtime, parent)).status == "SUCCEEDED"
    assert result.revived == len(dead) == len(failing)
    for child in await runtime.store.children(parent, limit=20):
        lines = await action_lines(runtime, child.id)
        if child.id not in dead:
            assert lines == [], child
            continue
        (line,) = lines
        assert line["data"] == {"action": "reprocess", "actor": "key:ops"}
        assert line["message"] == (
            f"reprocess by key:ops of run {parent} above: this dead letter runs again"
        )
    log_writes = [s for s in sent if "INSERT INTO run_log" in s]
    assert len(log_writes) == 1, log_writes  # the parent's line and the children's


async def test_the_preview_of_a_cancelled_or_unknown_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    with pytest.raises(NotFound):
        await ops.actions.reprocess_preview("no-such-run")
    async with running_worker(runtime):
        parent = await failed_fan_out(runtime, downstream, 2, failing={0})
    with pytest.raises(NotFound):
        await ops.actions.reprocess_preview(parent, tenant="globex")
    cancelled = await submit(runtime, [single(downstream.url)], {})
    await ops.actions.cancel(cancelled, actor="cli")
    said = await ops.actions.reprocess_preview(cancelled)
    assert (said.reprocessable, said.status, said.revived) == (False, "CANCELLED", 0)


async def test_a_reprocessed_child_starts_anew_and_its_wait_is_not_its_duration(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """After a reprocess the long tail listed the revived children as the slowest, at the
    minutes they sat FAILED: a child (and its parent) run again start anew, so `endedAt -
    startedAt` is the latest run's work."""
    gap_s = 1.5
    async with running_worker(runtime):
        parent = await failed_fan_out(runtime, downstream, 4, failing={1})
        (dead,) = await runtime.store.children(parent, status="FAILED", limit=10)
        await asyncio.sleep(gap_s)  # the operator's wait
        acted = time.time()
        await ops.actions.reprocess(parent, actor="cli")
        await wait_for_run(runtime, parent)
        child = await runtime.store.get_run(dead.id)
        run = await runtime.store.get_run(parent)
    assert child is not None and run is not None
    assert child.started_at is not None and child.started_at >= acted - 0.01, child
    assert run.started_at is not None and run.started_at >= acted - 0.01, run
    # Its revived step too (`runs show` had "TOOK 6 min 35 s" for a call of 7.5 ms): the
    # re-run's claim stamps its own start, as after a retry.
    (step,) = (await ops.runs.get(dead.id)).steps
    assert (step.vertex_id, step.status) == ("call", "SUCCEEDED")
    assert step.started_at is not None and step.started_at >= acted - 0.01, step
    assert step.ended_at is not None and step.ended_at - step.started_at < gap_s, step
    tail = await ops.runs.long_tail(parent, "each", limit=5)
    # The tail's durations are the children's latest runs (the revived one's started after
    # the act, above), not bounded by a time a loaded host may exceed.
    children = await runtime.store.children(parent, limit=10)
    durations = {c.id: (c.ended_at or 0) - (c.started_at or 0) for c in children}
    assert tail.max_s == pytest.approx(max(durations.values())), (tail, durations)
    (revived,) = [entry for entry in tail.slowest if entry.run.id == dead.id]
    assert revived.duration_s == pytest.approx(durations[dead.id]), (revived, durations)
