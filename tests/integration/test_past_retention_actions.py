"""A run whose tree is being deleted is not reopened: once a purge (a worker's retention pass
or an operator's `runs purge`) has taken its root, retry (single and batch, and their
previews), resolve and reprocess refuse it and the runs under it (`run_past_retention`),
whatever the acting process's own retention setting; a start over still makes a new run. A
root past the cutoff that no purge has taken yet is reopened, and the passes then leave it.
On PostgreSQL an action that read the root before a purge's mark committed is refused too.
Real store (both backends), real workers, the demo downstream on loopback
(docs/architecture.md, 'Run retention')."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from api.cli.text import parse_since
from demo.downstream import RunningDownstream
from engine.execution import run_retention
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from engine.store import run_purge
from engine.store.models import Run
from engine.store.records import RunsPurged
from schemas.clock import FakeClock
from schemas.errors import WrongState
from tests.conftest import Backend
from tests.integration.actions_harness import failed_chain, failed_fan_out
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.tree_harness import (
    plant_tree,
    purge_mark,
    rows_left,
    status_of,
    take_tree,
)

RETENTION_S = 30 * 86400.0
CODE = "run_past_retention"
runs = Run.__table__  # type: ignore[attr-defined]


async def _clocked(backend: Backend, retention_s: float) -> tuple[Runtime, FakeClock]:
    clock = FakeClock()
    settings = settings_for(
        backend, payload_retention_s=retention_s, run_retention_s=retention_s, lease_s=60.0
    )
    return await Runtime.open(settings, clock=clock), clock


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    """A runtime on a fake clock, run retention 30 days."""
    runtime, clock = await _clocked(backend, RETENTION_S)
    yield runtime, clock
    await runtime.close()


async def _refused(action: object) -> WrongState:
    with pytest.raises(WrongState) as refused:
        await action  # type: ignore[misc]
    assert refused.value.code == CODE
    return refused.value


async def test_a_failed_root_being_deleted_is_not_reopened_but_starts_over(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    async with running_worker(runtime):
        run_id = await failed_fan_out(runtime, downstream, 2, failing={0})
    clock.advance(RETENTION_S + 86400)
    # A root with runs below is marked by the first batch that takes it (a root alone goes
    # in one transaction, never seen half deleted).
    assert await take_tree(runtime, run_id, ended_before=clock.now(), retention_s=RETENTION_S)

    retry = await _refused(ops.actions.retry(run_id, actor="ops"))
    assert retry.message == (
        f"run {run_id} ended 31 d ago, past SCHEMABRIDGE_RUN_RETENTION_S (30 d), and is being "
        "deleted: a retry would reopen a tree that retention is deleting; start it over to run "
        "its input again"
    )
    assert retry.details["state"] == "FAILED" and retry.details["rootRunId"] == run_id
    assert retry.details["runId"] == run_id
    preview = await ops.actions.retry_preview(run_id)
    assert (preview.retriable, preview.status, preview.warnings) == (
        False,
        "FAILED",
        [retry.message],
    )
    resolve = await _refused(ops.actions.resolve(run_id, "join", {"fixed": True}, actor="ops"))
    assert "a resolve would reopen" in resolve.message
    reprocess = await _refused(ops.actions.reprocess(run_id, actor="ops"))
    assert "a reprocess would reopen" in reprocess.message
    reprocessing = await ops.actions.reprocess_preview(run_id)
    assert (reprocessing.reprocessable, reprocessing.warnings) == (False, [reprocess.message])

    by_id = await ops.actions.batch_retry([run_id], actor="ops")
    assert by_id.retried == []
    assert [(s.run_id, s.reason, s.state, s.message) for s in by_id.skipped] == [
        (run_id, CODE, "FAILED", retry.message)
    ]
    by_filter = await ops.actions.batch_retry(filter=RunFilter(workflow="parent"), actor="ops")
    assert by_filter.retried == [] and [s.reason for s in by_filter.skipped] == [CODE]
    counted = await ops.actions.batch_retry_preview(RunFilter(workflow="parent"))
    assert counted.matching == 0
    assert [(s.reason, s.state, s.count) for s in counted.skipped] == [(CODE, "FAILED", 1)]
    assert "being deleted by run retention" in counted.skipped[0].message
    of_ids = await ops.actions.batch_retry_preview(ids=[run_id])
    assert (of_ids.matching, [s.reason for s in of_ids.skipped]) == (0, [CODE])

    # Nothing was reopened: the run is as it was, its failed step still failed.
    run = await runtime.store.get_run(run_id)
    assert run is not None and (run.status, run.ended_at is not None) == ("FAILED", True)
    steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
    assert steps["join"] == "FAILED"

    # A start over makes a new run, which runs.
    started = await ops.actions.start_over(run_id, actor="ops")
    assert started.changed and await status_of(runtime, started.new_run_id) == "RUNNING"


async def test_the_runs_under_a_root_being_deleted_are_not_reopened(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 2, failing={0})
    (child,) = await runtime.store.children(parent_id, status="FAILED")
    clock.advance(RETENTION_S + 1)
    assert await take_tree(runtime, parent_id, ended_before=clock.now(), retention_s=RETENTION_S)

    retry = await _refused(ops.actions.retry(child.id, actor="ops"))
    assert retry.details["rootRunId"] == parent_id
    assert retry.message.startswith(
        f"run {child.id} is under run {parent_id}, which ended 30 d ago, past "
        "SCHEMABRIDGE_RUN_RETENTION_S (30 d), and is being deleted with its tree"
    )
    assert retry.message.endswith(f"start over run {parent_id} to run its input again")
    assert (await ops.actions.retry_preview(child.id)).warnings == [retry.message]
    (failed,) = [s for s in await runtime.store.get_steps(child.id) if s.status == "FAILED"]
    await _refused(ops.actions.resolve(child.id, failed.vertex_id, {"ok": 1}, actor="ops"))
    await _refused(ops.actions.reprocess(parent_id, actor="ops"))
    batch = await ops.actions.batch_retry([child.id, parent_id], actor="ops")
    assert batch.retried == [] and [s.reason for s in batch.skipped] == [CODE, CODE]
    wide = await ops.actions.batch_retry_preview(RunFilter(roots_only=False))
    assert (wide.matching, [(s.reason, s.count) for s in wide.skipped]) == (0, [(CODE, 2)])
    assert await status_of(runtime, child.id) == "FAILED"
    assert await status_of(runtime, parent_id) == "FAILED"


async def test_a_tree_part_deleted_between_two_passes_is_not_reopened(
    clocked: tuple[Runtime, FakeClock],
) -> None:
    """The hole this closes: a pass deleted part of a large tree; a retry of its root, or of
    a child left, before the next pass would reopen a tree whose counters name children that
    are gone."""
    runtime, clock = clocked
    ops = Operations(runtime)
    at = clock.now()
    root = await plant_tree(
        runtime, at=at, ended_at=at, status="FAILED", children=5, child_status="FAILED"
    )
    clock.advance(RETENTION_S + 1)
    first = await run_retention.purge_pass(runtime.store, RETENTION_S, batch=2, batches=1)
    assert (first.roots, first.children) == (0, 2)
    (left, *_) = await runtime.store.children(root, status="FAILED")

    await _refused(ops.actions.retry(root, actor="ops"))
    await _refused(ops.actions.retry(left.id, actor="ops"))
    batch = await ops.actions.batch_retry([root, left.id], actor="ops")
    assert batch.retried == [] and {s.reason for s in batch.skipped} == {CODE}

    assert (await rows_left(runtime, root))["runs"] == 4  # still ended: the next pass goes on
    await run_retention.purge_pass(runtime.store, RETENTION_S)
    assert (await rows_left(runtime, root))["runs"] == 0


async def test_a_root_past_the_cutoff_no_purge_has_taken_is_retried_and_then_kept(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """Past the cutoff is not refused by itself: until a purge takes the tree, a retry
    reopens it, and the pass that finds it RUNNING leaves it (its retention starts again
    when it ends); a batch takes it beside a recent one."""
    runtime, clock = clocked
    ops = Operations(runtime)
    old = await failed_chain(runtime, downstream)
    clock.advance(120)
    recent = await failed_chain(runtime, downstream)
    clock.advance(RETENTION_S + 60)
    assert (await ops.actions.retry_preview(old)).retriable

    batch = await ops.actions.batch_retry([old, recent], actor="ops")

    assert (sorted(batch.retried), batch.skipped) == (sorted([old, recent]), [])
    assert await run_retention.purge_pass(runtime.store, RETENTION_S) == RunsPurged()
    assert (await status_of(runtime, old), await purge_mark(runtime, old)) == (
        "RUNNING",
        (None, None),
    )


@pytest.mark.parametrize("retention_s", [0.0, RETENTION_S])
async def test_a_tree_an_operators_purge_is_deleting_is_refused_whatever_the_setting(
    backend: Backend, downstream: RunningDownstream, retention_s: float
) -> None:
    """The holes this closes: the refusal read the acting process's setting, so a process
    with retention off (an `api` started without it), or a manual purge with a cutoff more
    recent than the setting, let a partly deleted tree be reopened. The purge's mark is in
    the database: refused either way, `retentionS` null."""
    runtime, clock = await _clocked(backend, retention_s)
    try:
        ops = Operations(runtime)
        async with running_worker(runtime):
            root = await failed_fan_out(runtime, downstream, 3, failing={0, 1, 2})
        clock.advance(60)
        ended_before = clock.now()
        first = await runtime.store.purge_ended_runs(ended_before, limit=2, retention_s=None)
        assert (first.roots, first.children) == (0, 2)
        assert (await purge_mark(runtime, root))[1] is None
        (left,) = await runtime.store.children(root, status="FAILED")

        retry = await _refused(ops.actions.retry(root, actor="ops"))
        ended_at = retry.details["endedAt"]
        hinted = datetime.fromtimestamp(math.floor(ended_at) + 1, UTC)
        finish = f"schemabridge runs purge --ended-before {hinted:%Y-%m-%dT%H:%M:%SZ}"
        assert retry.message == (
            f"run {root} ended 1 min ago, purged by an operator (`schemabridge runs purge`), "
            "and is being deleted: a retry would reopen a tree that a purge is deleting; start "
            "it over to run its input again (if that purge stopped before the end, "
            f"`{finish}` ends it)"
        )
        assert (retry.details["rootRunId"], retry.details["retentionS"]) == (root, None)
        under = await _refused(ops.actions.retry(left.id, actor="ops"))
        assert under.details["rootRunId"] == root
        await _refused(ops.actions.reprocess(root, actor="ops"))
        batch = await ops.actions.batch_retry([root, left.id], actor="ops")
        assert batch.retried == [] and {s.reason for s in batch.skipped} == {CODE}
        assert (await status_of(runtime, root), await status_of(runtime, left.id)) == (
            "FAILED",
            "FAILED",
        )

        # The stopped purge is never resumed here: the purge the refusal names ends it.
        cutoff = parse_since(finish.rsplit(" ", 1)[1], clock.now())
        assert ended_at < cutoff < ended_before
        finished = await ops.retention.purge(cutoff, dry_run=False, actor="ops")
        assert (finished.roots, finished.children) == (1, 1)
        assert (await rows_left(runtime, root))["runs"] == 0
    finally:
        await runtime.close()


def _pg_only(backend: Backend) -> None:
    if backend.name != "server":
        pytest.skip("PostgreSQL only: SQLite lets one writer in at a time")


async def _remaining_failed_child(conn: AsyncConnection, root: str) -> Any:
    query = select(runs.c.id).where(runs.c.parent_run_id == root, runs.c.status == "FAILED")
    return (await conn.execute(query)).scalar_one()


@pytest.mark.parametrize("action", ["retry", "resolve", "reprocess"])
async def test_an_action_that_read_the_root_before_a_purge_marked_it_is_refused(
    clocked: tuple[Runtime, FakeClock],
    backend: Backend,
    downstream: RunningDownstream,
    action: str,
) -> None:
    """PostgreSQL, READ COMMITTED: the action reads the root unmarked while a purge's first
    batch on the tree (mark and two children deleted) is uncommitted; the action's writes
    then wait on the root's lock, and once the batch commits, the action reads the mark
    under that lock and is refused, nothing reopened."""
    _pg_only(backend)
    runtime, clock = clocked
    ops = Operations(runtime)
    async with running_worker(runtime):
        root = await failed_fan_out(runtime, downstream, 3, failing={0, 1, 2})
    clock.advance(RETENTION_S + 1)
    ended_before = runtime.store.cutoff(RETENTION_S)
    mark = run_purge.PurgeMark(clock.now(), RETENTION_S)
    async with runtime.store._engines.write.begin() as purger:
        batch = await run_purge.purge_batch(purger, ended_before, 2, mark)
        assert (batch.roots, batch.children) == (0, 2)
        child = await _remaining_failed_child(purger, root)
        (failed,) = [s for s in await runtime.store.get_steps(child) if s.status == "FAILED"]
        acting = {
            "retry": lambda: ops.actions.retry(child, actor="ops"),
            "resolve": lambda: ops.actions.resolve(child, failed.vertex_id, {"ok": 1}, actor="ops"),
            "reprocess": lambda: ops.actions.reprocess(root, actor="ops"),
        }[action]
        task = asyncio.create_task(_refused(acting()))
        await asyncio.sleep(1.0)
        assert not task.done()  # waiting on the root the batch holds
    refused = await asyncio.wait_for(task, timeout=30)
    assert refused.details["rootRunId"] == root
    assert (await status_of(runtime, child), await status_of(runtime, root)) == (
        "FAILED",
        "FAILED",
    )
    assert [s.status for s in await runtime.store.get_steps(child)].count("FAILED") == 1
    await run_retention.purge_pass(runtime.store, RETENTION_S)
    assert (await rows_left(runtime, root))["runs"] == 0


async def test_a_purge_passes_over_a_root_an_action_holds(
    clocked: tuple[Runtime, FakeClock], backend: Backend
) -> None:
    """PostgreSQL: a root an action has locked (`restarts.lock_roots`, FOR KEY SHARE, after
    its writes) is neither waited for nor marked; the next batch takes it."""
    _pg_only(backend)
    runtime, clock = clocked
    root = await plant_tree(runtime, at=clock.now(), ended_at=clock.now(), children=3)
    clock.advance(RETENTION_S + 1)
    ended_before = runtime.store.cutoff(RETENTION_S)
    mark = run_purge.PurgeMark(clock.now(), RETENTION_S)
    engines = runtime.store._engines
    async with engines.write.begin() as action:
        await action.execute(
            text("SELECT id FROM run WHERE id = :root FOR KEY SHARE"), {"root": root}
        )
        async with engines.write.begin() as purger:
            batch = await asyncio.wait_for(
                run_purge.purge_batch(purger, ended_before, 100, mark), timeout=10
            )
        assert batch == RunsPurged()
        assert await purge_mark(runtime, root) == (None, None)
    assert (await run_retention.purge_pass(runtime.store, RETENTION_S)).runs == 4
