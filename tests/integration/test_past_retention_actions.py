"""A run whose root ended longer ago than run retention is not reopened: retry (single and
batch, and their previews), resolve and reprocess refuse it and the runs under it
(`run_past_retention`), since retention is deleting its tree across passes; a start over
still makes a new run. Retention off, or a root not yet past the cutoff: as before. Real
store (both backends), real workers, the demo downstream on loopback
(docs/architecture.md, 'Run retention')."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.execution import run_retention
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from schemas.clock import FakeClock
from schemas.errors import WrongState
from tests.conftest import Backend
from tests.integration.actions_harness import failed_chain, failed_fan_out
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.tree_harness import plant_tree, rows_left, status_of

RETENTION_S = 30 * 86400.0
CODE = "run_past_retention"


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


async def test_a_failed_root_past_retention_is_not_reopened_but_starts_over(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    run_id = await failed_chain(runtime, downstream)
    clock.advance(RETENTION_S + 86400)

    retry = await _refused(ops.actions.retry(run_id, actor="ops"))
    assert retry.message == (
        f"run {run_id} ended 31 d ago, past SCHEMABRIDGE_RUN_RETENTION_S (30 d), and is being "
        "deleted: a retry would reopen a tree that retention is deleting; start it over to run "
        "its input again"
    )
    assert retry.details["state"] == "FAILED" and retry.details["rootRunId"] == run_id
    preview = await ops.actions.retry_preview(run_id)
    assert (preview.retriable, preview.status, preview.warnings) == (
        False,
        "FAILED",
        [retry.message],
    )
    resolve = await _refused(ops.actions.resolve(run_id, "b", {"fixed": True}, actor="ops"))
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
    by_filter = await ops.actions.batch_retry(filter=RunFilter(workflow="chain"), actor="ops")
    assert by_filter.retried == [] and [s.reason for s in by_filter.skipped] == [CODE]
    counted = await ops.actions.batch_retry_preview(RunFilter(workflow="chain"))
    assert counted.matching == 0
    assert [(s.reason, s.state, s.count) for s in counted.skipped] == [(CODE, "FAILED", 1)]
    assert "SCHEMABRIDGE_RUN_RETENTION_S" in counted.skipped[0].message
    of_ids = await ops.actions.batch_retry_preview(ids=[run_id])
    assert (of_ids.matching, [s.reason for s in of_ids.skipped]) == (0, [CODE])

    # Nothing was reopened: the run is as it was, its failed step still failed.
    run = await runtime.store.get_run(run_id)
    assert run is not None and (run.status, run.ended_at is not None) == ("FAILED", True)
    steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
    assert steps["b"] == "FAILED"

    # A start over makes a new run, which runs.
    started = await ops.actions.start_over(run_id, actor="ops")
    assert started.changed and await status_of(runtime, started.new_run_id) == "RUNNING"


async def test_the_runs_under_a_root_past_retention_are_not_reopened(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    ops = Operations(runtime)
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 2, failing={0})
    (child,) = await runtime.store.children(parent_id, status="FAILED")
    clock.advance(RETENTION_S + 1)

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


async def test_a_root_not_yet_past_retention_is_retried_as_before(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """The cutoff is the passes' own: a run ended a minute short of it retries; a batch that
    names both takes the recent one and skips the one past it."""
    runtime, clock = clocked
    ops = Operations(runtime)
    old = await failed_chain(runtime, downstream)
    clock.advance(120)
    recent = await failed_chain(runtime, downstream)
    clock.advance(RETENTION_S - 60)
    assert runtime.store.cutoff(RETENTION_S) == clock.now() - RETENTION_S
    assert not (await ops.actions.retry_preview(old)).retriable
    assert (await ops.actions.retry_preview(recent)).retriable

    batch = await ops.actions.batch_retry([old, recent], actor="ops")

    assert batch.retried == [recent]
    assert [(s.run_id, s.reason) for s in batch.skipped] == [(old, CODE)]
    assert (await status_of(runtime, old), await status_of(runtime, recent)) == (
        "FAILED",
        "RUNNING",
    )


async def test_with_retention_off_an_old_run_is_retried_as_before(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A guard (it passes without the refusal too): retention off refuses nothing."""
    runtime, clock = await _clocked(backend, 0.0)
    try:
        ops = Operations(runtime)
        run_id = await failed_chain(runtime, downstream)
        clock.advance(10 * RETENTION_S)
        assert (await ops.actions.retry_preview(run_id)).retriable
        batch = await ops.actions.batch_retry([run_id], actor="ops")
        assert batch.retried == [run_id]
    finally:
        await runtime.close()
