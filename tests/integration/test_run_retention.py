"""Run retention on both backends: root runs that ended more than `run_retention_s` ago go
with their whole tree (children at any depth, steps, log lines, payload chunks), in bounded
batches, children first and the root last; recent runs, unfinished trees and runs reopened
meanwhile stay (docs/architecture.md, 'Run retention')."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from demo.downstream import RunningDownstream
from engine.execution import run_retention
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import run_purge
from engine.store.models import Run
from engine.store.records import RunsPurged, StepFailed
from schemas.clock import FakeClock
from schemas.errors import NotFound
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.test_merge_outputs import items
from tests.integration.test_merge_outputs import workflows as merge_workflows
from tests.integration.test_payload_retention import one_step, until
from tests.integration.tree_harness import plant_tree, purge_mark, rows_left, status_of

RETENTION_S = 3600.0
GONE = {"runs": 0, "steps": 0, "log_lines": 0, "payload_chunks": 0}


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    """A runtime on a fake clock, run (and payload) retention an hour, leases long enough for
    the clock's jumps."""
    clock = FakeClock()
    settings = settings_for(
        backend, payload_retention_s=RETENTION_S, run_retention_s=RETENTION_S, lease_s=60.0
    )
    runtime = await Runtime.open(settings, clock=clock)
    yield runtime, clock
    await runtime.close()


async def a_pass(runtime: Runtime, *, batch: int = 1000, batches: int = 10) -> RunsPurged:
    return await run_retention.purge_pass(runtime.store, RETENTION_S, batch=batch, batches=batches)


async def test_an_old_tree_goes_whole_and_recent_or_unfinished_trees_stay(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    # A fan-out of 20 children run by the engine: steps, log lines, a merge.
    old = await start(runtime, merge_workflows(downstream.url, {}), {"items": items(20)})
    async with running_worker(runtime):
        assert (await wait_for_run(runtime, old)).status == "SUCCEEDED"
    before = await rows_left(runtime, old)
    assert before["runs"] == 21 and before["steps"] > 21 and before["log_lines"] > 0
    now = clock.now()
    # Ended as long ago, with a nested fan-out: grandchildren go too.
    nested = await plant_tree(runtime, at=now, ended_at=now, children=3, grandchildren=2)
    # A root still running (its ended children stay with it), and one failed with a child
    # still running (an unfinished tree stays whole).
    running = await plant_tree(runtime, at=now, ended_at=None, status="RUNNING", children=4)
    unfinished = await plant_tree(
        runtime, at=now, ended_at=now, status="FAILED", children=2, child_status="RUNNING"
    )
    clock.advance(RETENTION_S / 2)
    recent = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=2)
    assert await a_pass(runtime) == RunsPurged()  # nothing is an hour old yet
    clock.advance(RETENTION_S / 2 + 1)
    counted = await runtime.store.count_ended_runs(runtime.store.cutoff(RETENTION_S))

    purged = await a_pass(runtime)

    assert counted == purged  # a dry run counts what a purge deletes
    assert (purged.roots, purged.children) == (2, 20 + 3 + 6)
    assert purged.steps == before["steps"] + 10 * 2
    assert purged.log_lines == before["log_lines"] + 10
    assert await rows_left(runtime, old) == GONE
    assert await rows_left(runtime, nested) == GONE
    assert (await rows_left(runtime, running))["runs"] == 5
    assert (await rows_left(runtime, unfinished))["runs"] == 3
    assert (await rows_left(runtime, recent))["runs"] == 3
    assert await a_pass(runtime) == RunsPurged()
    # The recent one goes once it too is past the retention.
    clock.advance(RETENTION_S / 2)
    assert (await a_pass(runtime)).runs == 3


async def test_a_large_tree_goes_in_batches_and_the_next_pass_finishes_an_interrupted_one(
    clocked: tuple[Runtime, FakeClock], caplog: pytest.LogCaptureFixture
) -> None:
    runtime, clock = clocked
    root = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=3000)
    clock.advance(RETENTION_S + 1)
    caplog.set_level(logging.INFO, logger="engine.execution.run_retention")

    # A pass cut short after two batches (a crash, or its bound): children only so far.
    first = await a_pass(runtime, batch=500, batches=2)
    assert (first.roots, first.children, first.steps) == (0, 1000, 2000)
    assert await status_of(runtime, root) == "SUCCEEDED"  # still there, and still ended

    second = await a_pass(runtime, batch=500, batches=10)
    assert (second.roots, second.children) == (1, 2000)
    assert second.steps == 2000 * 2 + 2 and second.payload_chunks == 1
    assert await rows_left(runtime, root) == GONE
    # One structured line per pass that deleted something (docs/monitoring.md).
    lines = [r for r in caplog.records if getattr(r, "event", None) == "runs.purged"]
    assert [(r.roots, r.children, r.log_lines) for r in lines] == [  # type: ignore[attr-defined]
        (0, 1000, 1000),
        (1, 2000, 2001),
    ]
    assert lines[1].getMessage() == (
        "run retention: deleted 2,001 runs (1 root, 2,000 children), 4,002 steps, "
        "2,001 log lines, 1 payload chunk of runs ended over 3600 s ago in "
        f"{lines[1].seconds:.1f} s"  # type: ignore[attr-defined]
    )
    assert await a_pass(runtime) == RunsPurged()
    assert len([r for r in caplog.records if getattr(r, "event", None) == "runs.purged"]) == 2


async def test_a_pass_goes_on_while_batches_come_back_full(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    """A backlog drains as fast as the batches go: a pass is no longer cut at ten batches,
    only by its time (the batch that crosses it ends the pass) and its count of batches."""
    runtime, clock = clocked
    for _ in range(15):
        await plant_tree(runtime, at=clock.now(), ended_at=clock.now())
    clock.advance(RETENTION_S + 1)

    assert (
        await run_retention.purge_pass(runtime.store, RETENTION_S, batch=1, budget_s=0)
    ).roots == 1
    assert (
        await run_retention.purge_pass(runtime.store, RETENTION_S, batch=1, batches=3)
    ).roots == 3
    drained = await run_retention.purge_pass(runtime.store, RETENTION_S, batch=1)
    assert drained.roots == 11
    assert await a_pass(runtime) == RunsPurged()


async def test_a_run_reopened_after_it_was_chosen_keeps_its_rows(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """A root past the cutoff no purge has taken yet may be reopened (an operator's Retry):
    the batch that chose it before reads it again under its lock and neither marks it nor
    deletes it, and the DELETE's own check would keep it too, with its steps and lines."""
    runtime, clock = clocked
    run_id = await start(runtime, one_step(downstream.url), {})
    (step,) = await runtime.store.claim(10, lease_s=600)
    await runtime.store.complete([StepFailed(step, {"kind": "http_error", "message": "boom"})])
    clock.advance(RETENTION_S + 1)
    ended_before = runtime.store.cutoff(RETENTION_S)
    async with runtime.store._engines.read.connect() as conn:
        due = run_purge.due_roots(ended_before).add_columns(Run.__table__.c.purge_started_at)
        chosen_rows = (await conn.execute(due)).all()
    chosen = [row.id for row in chosen_rows]
    assert chosen == [run_id]
    await runtime.store.retry_runs([run_id], actor="ops")
    mark = run_purge.PurgeMark(clock.now(), RETENTION_S)
    async with runtime.store._engines.write.begin() as conn:
        assert await run_purge._take_roots(conn, chosen_rows, ended_before, mark) == []
        assert await run_purge._delete_runs(conn, chosen, roots=True) == RunsPurged()
    left = await rows_left(runtime, run_id)
    assert left["runs"] == 1 and left["steps"] == 1 and left["log_lines"] > 0
    assert await purge_mark(runtime, run_id) == (None, None)
    assert await a_pass(runtime) == RunsPurged()  # RUNNING again: not due


async def test_two_passes_at_once_delete_each_run_once_and_both_finish(
    clocked: tuple[Runtime, FakeClock], backend: Backend
) -> None:
    """Two workers purge at once: on PostgreSQL SKIP LOCKED gives them different runs, on
    SQLite they take turns at the write lock; either way each run goes once. (The trees are
    taken first: the batch that marks a root holds it, and the other passes it over.)"""
    runtime, clock = clocked
    roots = [
        await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=400)
        for _ in range(4)
    ]
    clock.advance(RETENTION_S + 1)
    ended_before = runtime.store.cutoff(RETENTION_S)
    first = await runtime.store.purge_ended_runs(ended_before, limit=100, retention_s=None)
    assert first.children == 100
    marks = [(await purge_mark(runtime, root))[0] for root in roots]
    assert None not in marks
    one, other = await asyncio.wait_for(
        asyncio.gather(
            run_retention.purge_until_done(runtime.store, ended_before, batch=100),
            run_retention.purge_until_done(runtime.store, ended_before, batch=100),
        ),
        timeout=60,
    )
    both = one + other
    assert (both.roots, both.children + 100, both.steps + 200) == (4, 1600, 1604 * 2)
    assert one.runs and other.runs  # both took part
    for root in roots:
        assert await rows_left(runtime, root) == GONE


async def test_workers_purge_every_period_only_when_a_retention_is_set(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock = FakeClock()
    settings = settings_for(backend, payload_retention_s=RETENTION_S, lease_s=60.0)
    assert settings.run_retention_s == 0  # the default keeps runs for ever
    runtime = await Runtime.open(settings, clock=clock)
    try:
        root = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=5)
        clock.advance(100 * RETENTION_S)
        kept = dataclasses.replace(runtime.worker_config(), run_purge_every_s=0.05)
        async with running_worker(runtime, kept):
            await asyncio.sleep(0.5)
        assert (await rows_left(runtime, root))["runs"] == 6

        on = dataclasses.replace(kept, run_retention_s=RETENTION_S)
        async with running_worker(runtime, on):

            async def purged() -> bool:
                return (await rows_left(runtime, root))["runs"] == 0

            await until(purged)
    finally:
        await runtime.close()


async def test_a_running_deployment_keeps_the_runs_its_checks_count(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    v1 = one_step(downstream.url)
    documents = [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in v1]
    await ops.workflows.publish(documents)
    v2 = dict(documents[0], description="v2")
    await ops.workflows.publish([v2])
    before = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), workflow_name="one")
    clock.advance(1)
    deployment = await ops.deployments.start("one", 2, actor="ops")
    clock.advance(1)
    counted = await plant_tree(
        runtime, at=clock.now(), ended_at=clock.now(), workflow_name="one", route="serving"
    )
    await plant_tree(  # the candidate's, which its checks count too
        runtime,
        at=clock.now(),
        ended_at=clock.now(),
        status="FAILED",
        workflow_name="one",
        workflow_version=2,
        route="candidate",
    )
    other = await plant_tree(runtime, at=clock.now(), ended_at=clock.now())
    clock.advance(RETENTION_S + 1)

    purged = await a_pass(runtime)

    assert await rows_left(runtime, before) == GONE  # created before the deployment began
    assert await rows_left(runtime, other) == GONE  # another workflow's
    assert (await rows_left(runtime, counted))["runs"] == 1
    assert purged.roots == 2

    # Once the deployment has ended its runs go, its own run too; it shows that run gone.
    await ops.deployments.abort(deployment.id, actor="ops")
    kept = await ops.deployments.get(deployment.id)
    assert not kept.run_purged
    routed = (kept.candidate.runs, kept.serving.runs, kept.exposure)
    assert routed == (1, 1, 1), routed
    clock.advance(RETENTION_S + 1)
    assert (await a_pass(runtime)).roots == 3  # the deployment's runs, and its own run
    ended = await ops.deployments.get(deployment.id)
    assert (ended.status, ended.run_purged) == ("ABORTED", True)
    assert ended.timeline  # what it did stays with the deployment
    # Its figures are those it ended on, not a count of the runs left (none): the candidate
    # did receive runs.
    assert (ended.candidate.runs, ended.serving.runs, ended.exposure) == routed
    (listed,) = [d for d in (await ops.deployments.list("one")).items if d.id == deployment.id]
    assert (listed.candidate.runs, listed.serving.runs) == routed[:2]


async def test_a_start_over_whose_old_run_was_purged_shows_it_gone_and_starts_over_again(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    old = await start(runtime, one_step(downstream.url), {})
    (step,) = await runtime.store.claim(10, lease_s=600)
    await runtime.store.complete([StepFailed(step, {"kind": "http_error", "message": "boom"})])
    new = (await ops.actions.start_over(old, actor="ops")).new_run_id
    clock.advance(RETENTION_S / 2)
    (step,) = await runtime.store.claim(10, lease_s=600)
    await runtime.store.complete([StepFailed(step, {"kind": "http_error", "message": "again"})])
    assert not (await ops.runs.get(new)).restarted_from_purged
    clock.advance(RETENTION_S / 2 + 1)

    assert (await a_pass(runtime)).roots == 1  # the old run only

    detail = await ops.runs.get(new)
    assert (detail.restarted_from, detail.restarted_from_purged) == (old, True)
    with pytest.raises(NotFound) as gone:  # following the link says why it leads nowhere
        await ops.runs.get(old)
    assert gone.value.code == "run_not_found"
    assert str(gone.value) == (
        f"no run {old!r} (root runs are deleted with their trees 1 h after they end: "
        "SCHEMABRIDGE_RUN_RETENTION_S)"
    )
    again = await ops.actions.start_over(new, actor="ops")
    assert (await ops.runs.get(again.new_run_id)).restarted_from == new


async def test_a_batch_passes_over_a_run_another_transaction_holds(
    clocked: tuple[Runtime, FakeClock], backend: Backend
) -> None:
    """PostgreSQL: a child whose row another worker's batch holds is passed over, not waited
    for (SKIP LOCKED), and its root waits for it."""
    if backend.name != "server":
        pytest.skip("PostgreSQL only: SQLite lets one writer in at a time")
    runtime, clock = clocked
    root = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=3)
    clock.advance(RETENTION_S + 1)
    ended_before = runtime.store.cutoff(RETENTION_S)
    engines = runtime.store._engines
    async with engines.write.begin() as holder:
        held = await holder.execute(
            text("SELECT id FROM run WHERE parent_run_id = :root ORDER BY id LIMIT 1 FOR UPDATE"),
            {"root": root},
        )
        held_id = held.scalar_one()
        async with engines.write.begin() as purger:
            batch = await asyncio.wait_for(
                run_purge.purge_batch(
                    purger, ended_before, 100, run_purge.PurgeMark(clock.now(), RETENTION_S)
                ),
                timeout=10,
            )
        assert (batch.roots, batch.children) == (0, 2)
        assert await status_of(runtime, held_id) == "SUCCEEDED"
    assert (await a_pass(runtime)).runs == 2  # the held child, then its root
    assert await rows_left(runtime, root) == GONE
