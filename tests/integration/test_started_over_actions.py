"""A run that was started over is not run again: retry (single and batch, and their
previews), resolve and reprocess refuse it and the runs under it (`started_over`), since the
new run already sends their calls; a second start over names the new run and its status.
Real store (both backends), real workers, the demo downstream on loopback."""

from __future__ import annotations

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from schemas.errors import WrongState
from tests.integration.actions_harness import (
    failed_chain,
    failed_fan_out,
    requests_by_path,
    statements,
)
from tests.integration.engine_harness import running_worker, wait_for_run


async def test_a_run_started_over_is_not_retried(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: `runs start-over R` made R2, which SUCCEEDED; a retry of R then ran R too and
    the downstream POST went out twice. Every retry path refuses R, naming R2 and its
    status."""
    old_id = await failed_chain(runtime, downstream)
    new_id = (await ops.actions.start_over(old_id, actor="cli")).new_run_id
    async with running_worker(runtime):
        assert (await wait_for_run(runtime, new_id)).status == "SUCCEEDED"
    sent = requests_by_path(downstream)
    assert sent == {"/a/1": 2, "/b/1": 2, "/c": 1}

    with pytest.raises(WrongState) as refused:
        await ops.actions.retry(old_id, actor="cli")
    assert refused.value.code == "started_over"
    assert refused.value.details == {
        "state": "FAILED",
        "runId": old_id,
        "startedOverRun": old_id,
        "newRunId": new_id,
        "newRunStatus": "SUCCEEDED",
    }
    assert refused.value.message.startswith(
        f"run {old_id} was started over as run {new_id}, SUCCEEDED: a retry would run its "
        "steps and send their calls a second time"
    )
    assert f"Look at run {new_id} instead" in refused.value.message
    assert "A run can be retried only while nobody has started it over" in refused.value.message

    preview = await ops.actions.retry_preview(old_id)
    assert (preview.retriable, preview.status) == (False, "FAILED")
    assert preview.warnings == [refused.value.message]

    by_id = await ops.actions.batch_retry([old_id], actor="cli")
    assert by_id.retried == []
    (skipped,) = by_id.skipped
    assert (skipped.reason, skipped.state) == ("started_over", "FAILED")
    assert skipped.message == refused.value.message

    counted = await ops.actions.batch_retry_preview(RunFilter())
    assert counted.matching == 0
    assert [(s.reason, s.state, s.count) for s in counted.skipped] == [
        ("started_over", "FAILED", 1)
    ]
    assert "were started over" in counted.skipped[0].message
    by_filter = await ops.actions.batch_retry(filter=RunFilter(), actor="cli")
    assert by_filter.retried == []
    assert [(s.run_id, s.reason) for s in by_filter.skipped] == [(old_id, "started_over")]

    with pytest.raises(WrongState) as resolve:
        await ops.actions.resolve(old_id, "b", {"status": 200}, actor="cli")
    assert resolve.value.code == "started_over"
    # With no dead letter to revive, a reprocess does nothing and says so, as before.
    nothing = await ops.actions.reprocess(old_id, actor="cli")
    assert (nothing.changed, nothing.revived) == (False, 0)

    async with running_worker(runtime):
        old = await runtime.store.get_run(old_id)
    assert old is not None and old.status == "FAILED"
    assert requests_by_path(downstream) == sent  # nothing was sent a second time


async def test_run_lists_name_the_run_a_start_over_made(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: a FAILED run already started over read as one more failure in the list, and
    "Select failed" picked it for a retry that skips it. A page names on it the run its start
    over made (`startedOverAs`), read for the whole page at once, and its detail says the
    same; the new run and a failure nobody started over name none."""
    old_id = await failed_chain(runtime, downstream)
    other_id = await failed_chain(runtime, downstream)
    new_id = (await ops.actions.start_over(old_id, actor="cli")).new_run_id

    with statements(runtime) as sent:
        page = await ops.runs.list(RunFilter(), limit=10)
    assert {run.id: run.started_over_as for run in page.items} == {
        old_id: new_id,
        other_id: None,
        new_id: None,
    }
    assert len([s for s in sent if "restarted_from IN" in s]) == 1, sent
    # Page by page (one run each, newest first), the started-over run keeps its new run.
    paged: dict[str, str | None] = {}
    cursor = None
    for _ in range(4):
        one = await ops.runs.list(RunFilter(), limit=1, cursor=cursor)
        paged.update({run.id: run.started_over_as for run in one.items})
        if (cursor := one.next) is None:
            break
    assert paged == {old_id: new_id, other_id: None, new_id: None}

    assert (await ops.runs.get(old_id)).started_over_as == new_id
    assert (await ops.runs.get(new_id)).started_over_as is None


async def test_runs_under_a_run_started_over_are_not_run_again(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A child's retry would reopen its root's join, and a reprocess revives the children:
    either runs the root again beside its start over."""
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 2, failing={0})
    (child,) = await runtime.store.children(parent_id, status="FAILED")
    new_id = (await ops.actions.start_over(parent_id, actor="cli")).new_run_id
    # A synchronous wait's short answer names the new run as the whole detail does.
    assert (await ops.runs.wait_for_end(child.id, 1)).started_over_as == new_id
    assert (await ops.runs.get(child.id)).started_over_as == new_id
    assert (await ops.runs.wait_for_end(parent_id, 1)).started_over_as == new_id

    with pytest.raises(WrongState) as retry:
        await ops.actions.retry(child.id, actor="cli")
    assert retry.value.code == "started_over"
    assert retry.value.details["startedOverRun"] == parent_id
    assert retry.value.message.startswith(
        f"run {child.id} is under run {parent_id}, which was started over as run {new_id}, RUNNING"
    )
    with pytest.raises(WrongState) as reprocess:
        await ops.actions.reprocess(parent_id, actor="cli")
    assert reprocess.value.code == "started_over"
    assert "a reprocess would run its steps" in reprocess.value.message
    preview = await ops.actions.reprocess_preview(parent_id)
    assert preview.reprocessable is False
    assert preview.warnings == [reprocess.value.message]
    wide = await ops.actions.batch_retry_preview(RunFilter(roots_only=False))
    assert wide.matching == 0
    assert [(s.reason, s.count) for s in wide.skipped] == [("started_over", 2)]
    child_after = await runtime.store.get_run(child.id)
    assert child_after is not None and child_after.status == "FAILED"
    # Lists and the child's detail name the run its root's start over made, as the refusal
    # does: a FAILED child there is handled, not one more to select for a retry.
    children = await ops.runs.list(RunFilter(parent=parent_id, status="FAILED"))
    assert [(r.id, r.started_over_as) for r in children.items] == [(child.id, new_id)]
    assert (await ops.runs.get(child.id)).started_over_as == new_id
    others = await ops.runs.list(RunFilter(roots_only=False))
    assert {r.id: r.started_over_as for r in others.items}[new_id] is None


async def test_a_second_start_over_names_the_new_run_and_its_status(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    old_id = await failed_chain(runtime, downstream)
    new_id = (await ops.actions.start_over(old_id, actor="cli")).new_run_id
    again = await ops.actions.start_over(old_id, actor="cli")
    assert (again.changed, again.message) == (
        False,
        f"already started over as run {new_id}, RUNNING",
    )
    await ops.actions.cancel(new_id, actor="cli")
    cancelled = await ops.actions.start_over(old_id, actor="cli")
    assert cancelled.message == (
        f"already started over as run {new_id}, CANCELLED: start it over "
        f"(`schemabridge runs start-over {new_id}`) to run the input again"
    )


async def test_a_second_start_over_of_a_run_whose_new_run_failed_says_what_to_do(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    old_id = await failed_chain(runtime, downstream)
    new_id = (await ops.actions.start_over(old_id, actor="cli")).new_run_id
    downstream.script([400], path="/b/1")
    async with running_worker(runtime):
        assert (await wait_for_run(runtime, new_id)).status == "FAILED"
    again = await ops.actions.start_over(old_id, actor="cli")
    assert again.message == (
        f"already started over as run {new_id}, FAILED: retry it (`schemabridge runs retry "
        f"{new_id}`) or start it over (`schemabridge runs start-over {new_id}`)"
    )
