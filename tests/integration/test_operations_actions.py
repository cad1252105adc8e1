"""Operator actions through the operations layer (`Operations.actions`): retry, resolve, start
over, batch retry and reprocess, on both backends, with real workers and the demo downstream on
loopback where runs execute. Cancel has its own module (test_operations_cancel.py)."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from demo.downstream import RunningDownstream
from engine.execution import step_rules
from engine.operations import Operations
from engine.operations.actions import OperatorActions, reopened_words
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from engine.store.records import StepFailed
from schemas.definitions import Workflow
from schemas.errors import InvalidRequest, LimitReached, NotFound, WrongState
from tests.conftest import Backend
from tests.integration.actions_harness import (
    BAD,
    OVERLOAD,
    action_lines,
    failed_chain,
    failed_fan_out,
    failed_runs,
    failed_unaddressed_fan_out,
    fix_first_warning,
    nested,
    requests_by_path,
    single,
    statements,
    submit,
    succeeded_over_a_dead_letter,
    succeeded_over_a_failed_mid,
    succeeded_with_a_report,
)
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from vertices.gateway import destination_key

# ── retry ───────────────────────────────────────────────────────────────────────────────────


async def test_retry_reruns_only_the_failed_step(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream)
    assert requests_by_path(downstream) == {"/a/1": 1, "/b/1": 1}
    retried_at = runtime.clock.now()
    async with running_worker(runtime):
        result = await ops.actions.retry(run_id, actor="cli")
        assert (result.changed, result.status, result.steps_retried) == (True, "RUNNING", 1)
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert requests_by_path(downstream) == {"/a/1": 1, "/b/1": 2, "/c": 1}
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    assert (steps["a"].attempts, steps["b"].attempts, steps["c"].attempts) == (1, 2, 1)
    assert steps["b"].error is None
    # The retried step's duration is its last run's, not the wait for the operator.
    assert steps["a"].started_at is not None and steps["a"].started_at < retried_at
    assert steps["b"].started_at is not None and steps["b"].started_at >= retried_at
    (line,) = await action_lines(runtime, run_id)
    assert line["data"] == {"action": "retry", "actor": "cli"} and line["level"] == "info"
    assert "cli" in line["message"]


async def test_a_gateway_step_sends_one_idempotency_key_across_its_retries(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """Every request a GATEWAY step makes for one (run, vertex) carries the same
    Idempotency-Key, as the downstream (a real server on loopback) records it: the call's
    own attempts, the engine's redispatch after an external_overload, and the operator's
    Retry of the FAILED run."""
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=(0.05,)))
    try:
        call = {"url": f"{downstream.url}/keyed", "retry": {"maxAttempts": 2, "baseDelayMs": 10}}
        workflow = {"call": {"type": "GATEWAY", "maxAutoRetries": 1, "config": call}}
        keyed = Workflow.model_validate({"name": "keyed", "vertices": workflow})
        downstream.script([503] * 4, path="/keyed")  # two attempts, twice (one redispatch)
        run_id = await submit(runtime, [keyed], {})
        async with running_worker(runtime):
            failed = await wait_for_run(runtime, run_id)
            assert failed.status == "FAILED" and failed.error.kind == "external_overload"
            await Operations(runtime).actions.retry(run_id, actor="cli")
            assert (await wait_for_run(runtime, run_id)).status == "SUCCEEDED"
    finally:
        await runtime.close()
    keys = [r.idempotency_key for r in downstream.stats.recent if r.path == "/keyed"]
    assert keys == [step_rules.idempotency_key(run_id, "call")] * 5, keys


async def test_retry_refuses_a_run_that_is_not_failed(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    running = await submit(runtime, [single(downstream.url)], {})  # no worker: stays RUNNING
    with pytest.raises(WrongState) as refused:
        await ops.actions.retry(running, actor="cli")
    assert (refused.value.code, refused.value.state) == ("run_not_failed", "RUNNING")
    assert refused.value.details == {"state": "RUNNING", "runId": running}
    with pytest.raises(NotFound) as missing:
        await ops.actions.retry("no-such-run", actor="cli")
    assert missing.value.code == "run_not_found"
    assert await action_lines(runtime, running) == []


async def test_retry_is_scoped_to_the_tenant(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream, tenant_id="acme")
    with pytest.raises(NotFound) as hidden:
        await ops.actions.retry(run_id, actor="key:other", tenant="globex")
    assert hidden.value.code == "run_not_found"
    result = await ops.actions.retry(run_id, actor="key:acme", tenant="acme")
    assert result.changed


async def test_a_second_retry_is_refused_and_concurrent_retries_retry_once(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream)
    outcomes = await asyncio.gather(
        *(ops.actions.retry(run_id, actor=f"op{i}") for i in range(4)), return_exceptions=True
    )
    done = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, WrongState)]
    assert len(done) == 1 and len(refused) == 3, outcomes
    assert all(r.state == "RUNNING" for r in refused)
    assert len(await action_lines(runtime, run_id)) == 1
    steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
    assert steps == {"a": "SUCCEEDED", "b": "READY", "c": "PENDING"}


async def test_retry_resets_redispatches_and_the_tenant_item_but_counts_attempts(
    ops: Operations, runtime: Runtime
) -> None:
    await runtime.store.publish(single("http://127.0.0.1:1"))
    run, _ = await runtime.store.create_run(await runtime.store.get_version("single"), {})
    (step,) = await runtime.store.claim(10, lease_s=60)
    await runtime.store.complete(
        [StepFailed(step, OVERLOAD, retry_at=runtime.clock.now(), tenant_item_taken=True)]
    )
    (again,) = await runtime.store.claim(10, lease_s=60)
    assert (again.attempts, again.auto_retries, again.tenant_item_taken) == (2, 1, True)
    await runtime.store.complete([StepFailed(again, BAD)])
    assert (await runtime.store.get_run(run.id)).status == "FAILED"  # type: ignore[union-attr]

    await ops.actions.retry(run.id, actor="cli")
    (retried,) = await runtime.store.claim(10, lease_s=60)
    assert (retried.attempts, retried.auto_retries, retried.tenant_item_taken) == (3, 0, False)


async def test_retry_of_a_dead_letter_brings_it_back_into_its_parents_join(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 5, failing={3})
        (dead,) = await runtime.store.children(parent_id, status="FAILED")
        assert dead.dlq_at is not None
        await ops.actions.retry(dead.id, actor="cli")
        run = await wait_for_run(runtime, parent_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["join"]["counts"]["succeeded"] == 5
    assert requests_by_path(downstream)["/charge/3"] == 2
    assert downstream.stats.total == 6  # the other children did not run again
    counts = await runtime.store.spawner_counts(parent_id, "each")
    assert (counts.succeeded, counts.failed) == (5, 0)
    child = await runtime.store.get_run(dead.id)
    assert child is not None and child.dlq_at is None


async def test_retry_of_a_nested_dead_letter_reopens_every_join_above_it(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    downstream.script([400], path="/leaf")  # the first leaf to call fails once
    groups = {"groups": [{"leaves": [1, 2]}] * 3}
    async with running_worker(runtime):
        top_id = await submit(runtime, nested(downstream.url), groups)
        top = await wait_for_run(runtime, top_id)
        assert top.status == "FAILED" and top.error.kind == "child_failures"
        (mid,) = await runtime.store.children(top_id, status="FAILED")
        (leaf,) = await runtime.store.children(mid.id, status="FAILED")
        await ops.actions.retry(leaf.id, actor="cli")
        top = await wait_for_run(runtime, top_id)
    assert top.status == "SUCCEEDED", top.error
    assert downstream.stats.total == 7  # six leaves, one of them twice
    for run_id in (top_id, mid.id):
        counts = await runtime.store.spawner_counts(
            run_id, "groups" if run_id == top_id else "leaves"
        )
        assert counts.failed == 0 and counts.succeeded == counts.total


async def test_batch_retry_of_siblings_updates_their_join_once(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 6, failing={1, 4})
        dead = [c.id for c in await runtime.store.children(parent_id, status="FAILED")]
        # The parent failed at its join too: retrying it with its dead letters in one call
        # leaves the join waiting for them, not failing again at once.
        result = await ops.actions.batch_retry([*dead, parent_id], actor="cli")
        assert result.retried == [*dead, parent_id] and result.skipped == []
        run = await wait_for_run(runtime, parent_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["join"]["counts"]["succeeded"] == 6
    assert downstream.stats.total == 8


# ── resolve ─────────────────────────────────────────────────────────────────────────────────


async def test_resolve_continues_the_run_with_the_given_output(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream)
    output = {"status": 200, "body": {"path": "/from-the-operator"}}
    async with running_worker(runtime):
        result = await ops.actions.resolve(run_id, "b", output, actor="key:3f2a")
        assert (result.changed, result.status, result.vertex_id) == (True, "RUNNING", "b")
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["c"]["body"]["body"] == {"fromB": "/from-the-operator"}
    assert requests_by_path(downstream) == {"/a/1": 1, "/b/1": 1, "/c": 1}
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    assert (steps["b"].status, steps["b"].output, steps["b"].error) == ("RESOLVED", output, None)
    (line,) = await action_lines(runtime, run_id)
    assert line["data"] == {"action": "resolve", "actor": "key:3f2a"}
    assert line["vertex_id"] == "b"


def read_after(base: str) -> Workflow:
    """a → b, b's url read from a's answer: a's resolve without that `body` fails b with
    invalid_config, which a start over (a answering for real) does not repeat."""
    return Workflow.model_validate(
        {
            "name": "read_after",
            "vertices": {
                "a": {
                    "type": "GATEWAY",
                    "config": {"url": f"{base}/a", "retry": {"maxAttempts": 1}},
                },
                "b": {
                    "type": "GATEWAY",
                    "dependsOn": ["a"],
                    "config": {"url": "{{ vertices.a.output.body.next }}"},
                },
            },
        }
    )


async def test_a_failure_after_a_resolve_is_not_said_to_fail_again_on_a_start_over(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: a resolve whose output lacked the `body` the next step read failed that
    step with invalid_config, and `runs show` said retrying, reprocessing "or starting
    over" fails the same way; the start over ran a again and succeeded. The warning now
    names the resolved step and offers the start over, in the run and the retry preview."""
    downstream.script([400], path="/a")
    run_id = await submit(runtime, [read_after(downstream.url)], {})
    async with running_worker(runtime):
        assert (await wait_for_run(runtime, run_id)).status == "FAILED"
        await ops.actions.resolve(run_id, "a", {"status": 200}, actor="cli")
        run = await wait_for_run(runtime, run_id)
    assert (run.status, run.error.vertex_id, run.error.kind) == ("FAILED", "b", "invalid_config")
    said = (
        "step b failed with invalid_config, which comes from the workflow, the run's input or "
        "the output step a was resolved with: retrying or reprocessing runs v1 on that output "
        f"and fails the same way. Start over (`schemabridge runs start-over {run_id}`) to run "
        "a again; or, if the workflow (or the input) is at fault, fix it first, publish it, "
        "then submit a new run (`schemabridge runs submit read_after@VERSION --input JSON`)"
    )
    assert (await ops.runs.get(run_id)).fix_first == said
    assert (await ops.actions.retry_preview(run_id)).fix_first == said


async def test_resolve_is_idempotent_for_the_same_output_only(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream)
    output = {"body": {"path": "/x"}}
    assert (await ops.actions.resolve(run_id, "b", output, actor="cli")).changed
    again = await ops.actions.resolve(run_id, "b", output, actor="cli")
    assert (again.changed, again.status) == (False, "RUNNING")
    with pytest.raises(WrongState) as other:
        await ops.actions.resolve(run_id, "b", {"body": {"path": "/y"}}, actor="cli")
    assert (other.value.code, other.value.state) == ("step_already_resolved", "RESOLVED")
    assert len(await action_lines(runtime, run_id)) == 1


async def test_resolve_refusals(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(runtime, downstream)
    with pytest.raises(NotFound) as unknown:
        await ops.actions.resolve(run_id, "nope", {}, actor="cli")
    assert unknown.value.code == "step_not_found"
    with pytest.raises(WrongState) as done:
        await ops.actions.resolve(run_id, "a", {}, actor="cli")
    assert (done.value.code, done.value.state) == ("step_not_failed", "SUCCEEDED")
    with pytest.raises(NotFound) as missing:
        await ops.actions.resolve("no-such-run", "b", {}, actor="cli")
    assert missing.value.code == "run_not_found"
    with pytest.raises(NotFound):
        await ops.actions.resolve(run_id, "b", {}, actor="cli", tenant="globex")
    for not_json in (object(), float("nan"), {"k": {1, 2}}):
        with pytest.raises(InvalidRequest) as invalid:
            await ops.actions.resolve(run_id, "b", not_json, actor="cli")
        assert invalid.value.code == "invalid_output"
    steps = {s.vertex_id: s.status for s in await runtime.store.get_steps(run_id)}
    assert steps == {"a": "SUCCEEDED", "b": "FAILED", "c": "PENDING"}
    assert await action_lines(runtime, run_id) == []


async def test_resolving_the_last_step_ends_the_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    downstream.script([400], path="/single")
    run_id = await submit(runtime, [single(downstream.url)], {})
    async with running_worker(runtime):
        assert (await wait_for_run(runtime, run_id)).status == "FAILED"
    result = await ops.actions.resolve(run_id, "call", [1, "two"], actor="cli")
    assert result.status == "SUCCEEDED"
    run = await runtime.store.get_run(run_id)
    assert run is not None and run.status == "SUCCEEDED" and run.output == {"call": [1, "two"]}
    assert run.error is None


async def test_a_run_with_another_failed_step_stays_failed(
    ops: Operations, runtime: Runtime
) -> None:
    parallel = Workflow.model_validate(
        {
            "name": "parallel",
            "vertices": {
                "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
                "b": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/b"}},
            },
        }
    )
    run_id = await submit(runtime, [parallel], {})
    claimed = {s.vertex_id: s for s in await runtime.store.claim(10, lease_s=60)}
    await runtime.store.complete([StepFailed(claimed["a"], BAD), StepFailed(claimed["b"], BAD)])
    run = await runtime.store.get_run(run_id)
    assert run is not None and run.status == "FAILED"
    first, second = ("a", "b") if run.error["vertexId"] == "a" else ("b", "a")

    result = await ops.actions.resolve(run_id, first, {"ok": 1}, actor="cli")
    assert result.status == "FAILED"
    run = await runtime.store.get_run(run_id)
    assert run is not None and run.error["vertexId"] == second
    result = await ops.actions.resolve(run_id, second, {"ok": 2}, actor="cli")
    assert result.status == "SUCCEEDED"
    run = await runtime.store.get_run(run_id)
    assert run is not None and run.output == {"a": {"ok": 1}, "b": {"ok": 2}}


async def test_resolving_a_dead_letter_ends_it_succeeded_for_the_join(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 4, failing={2})
        (dead,) = await runtime.store.children(parent_id, status="FAILED")
        result = await ops.actions.resolve(dead.id, "call", {"body": "by hand"}, actor="cli")
        assert result.status == "SUCCEEDED"
        run = await wait_for_run(runtime, parent_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["join"]["counts"]["succeeded"] == 4
    assert run.output["join"]["outputs"][2] == {"call": {"body": "by hand"}}
    assert downstream.stats.total == 4  # nothing called again
    child = await runtime.store.get_run(dead.id)
    assert child is not None and (child.status, child.dlq_at) == ("SUCCEEDED", None)
    # The parent had FAILED at its join: nothing it had finished runs again.
    assert (result.warnings, result.reopened_run, result.reopened_join) == ([], None, None)
    (line,) = await action_lines(runtime, parent_id)
    assert line["message"] == "resolve by cli of 1 FAILED child of 'each': the join 'join' reopens"


async def test_resolving_the_dead_letter_of_a_succeeded_run_reopens_it_and_says_so(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: the FAILED child of a run that had SUCCEEDED (its MERGE tolerated it),
    resolved, brings the child back into the parent's join, which reopens, and the parent's
    `report` is sent again: the answer says so as a single retry of that child does
    (`warnings`, `reopenedRun`, `reopenedJoin`), naming the step that runs again, and the
    parent's log says who reopened it."""
    destination = destination_key(downstream.url, None)
    async with running_worker(runtime):
        parent_id = await succeeded_with_a_report(runtime, downstream, 3, failing={1})
        (dead,) = await runtime.store.children(parent_id, status="FAILED")
        result = await ops.actions.resolve(dead.id, "call", {"body": "by hand"}, actor="cli")
        parent = await wait_for_run(runtime, parent_id)
    assert (result.changed, result.status) == (True, "SUCCEEDED")
    assert (result.reopened_run, result.reopened_join) == (parent_id, "join")
    assert result.warnings == [
        f"run {parent_id} above it had SUCCEEDED and runs again from its join 'join': the "
        f"steps after that join run a second time: report (calls {destination})"
    ]
    assert parent.status == "SUCCEEDED", parent.error
    join = next(s for s in await runtime.store.get_steps(parent_id) if s.vertex_id == "join")
    assert join.output["counts"]["succeeded"] == 3
    assert requests_by_path(downstream)["/report"] == 2
    (line,) = await action_lines(runtime, parent_id)
    assert line["data"] == {"action": "resolve", "actor": "cli"}
    assert line["message"] == "resolve by cli of 1 FAILED child of 'each': the join 'join' reopens"
    (own,) = await action_lines(runtime, dead.id)
    assert own["message"] == (
        f"step call resolved by cli with an operator-supplied output; run {parent_id}, which "
        "had SUCCEEDED, runs again from its join 'join'"
    )


async def test_resolving_a_nested_dead_letter_says_the_finished_run_above_reopens(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A leaf FAILED under a mid that FAILED, under a top whose MERGE tolerated the mid and
    SUCCEEDED: resolving the leaf reopens the mid's join and the top's. The answer names the
    top, as the leaf's retry preview does (what the monitor's Resolve dialog reads), and
    both logs say the resolve reopened their join."""
    async with running_worker(runtime):
        top, mid = await succeeded_over_a_failed_mid(runtime, downstream)
        (leaf,) = await runtime.store.children(mid.id, status="FAILED")
        preview = await ops.actions.retry_preview(leaf.id)
        result = await ops.actions.resolve(leaf.id, "call", {"ok": True}, actor="cli")
        assert (await wait_for_run(runtime, top)).status == "SUCCEEDED"
    assert (preview.reopened_run, preview.reopened_join) == (top, "join")
    assert (result.reopened_run, result.reopened_join) == (top, "join")
    assert result.warnings == [reopened_words(top, "join")]
    (mid_line,) = await action_lines(runtime, mid.id)
    assert mid_line["message"] == (
        "resolve by cli of 1 FAILED child of 'leaves': the join 'join' reopens"
    )
    (top_line,) = await action_lines(runtime, top)
    assert top_line["message"] == f"resolve by cli of run {leaf.id} below: the join 'join' reopens"
    assert top_line["data"] == {"action": "resolve", "actor": "cli"}


# ── start over ──────────────────────────────────────────────────────────────────────────────


async def test_start_over_links_the_old_and_new_runs(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    old_id = await failed_chain(runtime, downstream, tenant_id="acme")
    result = await ops.actions.start_over(old_id, actor="demo")
    assert (result.changed, result.run_id, result.status) == (True, old_id, "FAILED")
    new = await runtime.store.get_run(result.new_run_id)
    old = await runtime.store.get_run(old_id)
    assert new is not None and old is not None
    assert new.id != old_id and new.restarted_from == old_id and new.root_run_id == new.id
    assert (new.workflow_name, new.workflow_version, new.input, new.tenant_id) == (
        old.workflow_name,
        old.workflow_version,
        old.input,
        old.tenant_id,
    )
    assert old.status == "FAILED"  # the old run is left as it was
    again = await ops.actions.start_over(old_id, actor="demo")
    assert (again.changed, again.new_run_id) == (False, result.new_run_id)
    ((old_line,), (new_line,)) = [await action_lines(runtime, r) for r in (old_id, new.id)]
    assert old_line["data"] == new_line["data"] == {"action": "start_over", "actor": "demo"}
    async with running_worker(runtime):
        rerun = await wait_for_run(runtime, new.id)
    assert rerun.status == "SUCCEEDED", rerun.error  # the 400 was scripted once
    assert requests_by_path(downstream) == {"/a/1": 2, "/b/1": 2, "/c": 1}


async def test_concurrent_start_overs_create_one_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    old_id = await failed_chain(runtime, downstream)
    results = await asyncio.gather(*(ops.actions.start_over(old_id, actor="cli") for _ in range(6)))
    assert len({r.new_run_id for r in results}) == 1
    assert sum(r.changed for r in results) == 1
    assert await runtime.store.count_runs() == 2


async def test_a_start_over_preview_says_its_refusals_and_changes_nothing(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """What the Start over dialog reads first: a running run, a child run and another
    tenant's run are said as the start over would refuse them, and nothing is created."""
    running = await submit(runtime, [single(downstream.url)], {}, tenant_id="acme")
    refused = await ops.actions.start_over_preview(running, tenant="acme")
    assert (refused.startable, refused.status) == (False, "RUNNING"), refused
    assert refused.message == f"run {running} is RUNNING; only an ended run can be started over"
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(runtime, downstream)
    child = await ops.actions.start_over_preview(child_id)
    assert not child.startable and f"start over its parent {parent_id}" in child.message
    with pytest.raises(NotFound) as unknown:
        await ops.actions.start_over_preview(running, tenant="globex")
    assert unknown.value.code == "run_not_found"
    ready = await ops.actions.start_over_preview(parent_id)
    assert (ready.startable, ready.status, ready.warnings) == (True, "SUCCEEDED", [])
    assert await runtime.store.count_runs() == 1 + 1 + 3, "a preview creates no run"


RUN_ROW_READ = re.compile(r"FROM run\b.*\bWHERE run\.id (=|IN)", re.DOTALL)
"""A statement that reads a run's row by its id (not the start over's key lookup)."""


async def test_a_start_over_preview_reads_the_run_once(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The Start over dialog's preview read the run's row three times (its checks, the
    version's facts, the version again): one read serves all three."""
    old_id = await failed_chain(runtime, downstream)
    with statements(runtime) as sent:
        preview = await ops.actions.start_over_preview(old_id)
    assert (preview.startable, preview.status) == (True, "FAILED"), preview
    assert preview.message == "would start a new run of v1 with the same input"
    reads = [s for s in sent if RUN_ROW_READ.search(s)]
    assert len(reads) == 1, reads
    await ops.actions.start_over(old_id, actor="cli")
    with statements(runtime) as sent_again:
        again = await ops.actions.start_over_preview(old_id)
    assert (again.startable, again.status) == (False, "FAILED") and again.new_run_id, again
    assert len([s for s in sent_again if RUN_ROW_READ.search(s)]) <= 2, sent_again


async def test_start_over_refusals(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    running = await submit(runtime, [single(downstream.url)], {})
    with pytest.raises(WrongState) as refused:
        await ops.actions.start_over(running, actor="cli")
    assert (refused.value.code, refused.value.state) == ("run_not_ended", "RUNNING")
    with pytest.raises(NotFound):
        await ops.actions.start_over("no-such-run", actor="cli")
    with pytest.raises(NotFound):
        await ops.actions.start_over(running, actor="cli", tenant="globex")
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 2, failing={0})
    (child,) = await runtime.store.children(parent_id, status="FAILED")
    with pytest.raises(WrongState) as child_run:
        await ops.actions.start_over(child.id, actor="cli")
    assert (child_run.value.code, child_run.value.state) == ("start_over_child_run", "FAILED")
    assert child_run.value.message == (
        f"run {child.id} is a child run, which cannot be started over alone; retry it, or "
        f"start over its parent {parent_id}"
    )
    (succeeded,) = await runtime.store.children(parent_id, status="SUCCEEDED")
    with pytest.raises(WrongState) as ended_child:
        await ops.actions.start_over(succeeded.id, actor="cli")
    assert (ended_child.value.code, ended_child.value.state) == (
        "start_over_child_run",
        "SUCCEEDED",
    )
    assert ended_child.value.message.endswith(f"; start over its parent {parent_id} instead")
    await runtime.store.set_quota("default", 0)
    with pytest.raises(LimitReached) as quota:
        await ops.actions.start_over(parent_id, actor="cli")
    assert quota.value.code == "quota_exceeded"
    assert await runtime.store.count_runs() == 4  # running, parent, two children


# ── batch retry ─────────────────────────────────────────────────────────────────────────────


async def test_batch_retry_of_a_thousand_failed_runs_in_one_call(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    failed = await failed_runs(runtime, ["http_error"] * 1000, name="bulk")
    running = [await submit(runtime, [single(downstream.url)], {}) for _ in range(2)]
    asked = [*failed[:500], "missing-1", *running, failed[0], *failed[500:], "missing-2"]
    with statements(runtime) as sent:
        started = time.monotonic()
        result = await ops.actions.batch_retry(asked, limit=len(asked), actor="cli")
        elapsed = time.monotonic() - started
    print(f"batch retry: {elapsed:.2f} s, {len(sent)} statements")
    assert result.retried == failed
    assert [(s.run_id, s.reason, s.state) for s in result.skipped] == [
        ("missing-1", "run_not_found", None),
        (running[0], "run_not_failed", "RUNNING"),
        (running[1], "run_not_failed", "RUNNING"),
        ("missing-2", "run_not_found", None),
    ]
    assert not result.truncated
    # Set-based: a fixed number of statements per 1,000 ids, not several per run (one of
    # them reads whether a purge is deleting their trees: `engine.store.past_retention`).
    assert len(sent) <= 21, sent
    assert elapsed < 10, elapsed
    assert await runtime.store.count_runs("FAILED") == 0
    assert await runtime.store.ready_depth() == 1000 + 2
    for run_id in (failed[0], failed[777]):
        (line,) = await action_lines(runtime, run_id)
        assert line["data"] == {"action": "batch_retry", "actor": "cli"}


async def test_batch_retry_respects_the_tenant_and_its_arguments(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    acme = await failed_chain(runtime, downstream, tenant_id="acme")
    result = await ops.actions.batch_retry([acme], actor="key:g", tenant="globex")
    assert result.retried == [] and result.skipped[0].reason == "run_not_found"
    for kwargs, code in [
        ({"ids": [acme], "limit": 0}, "invalid_limit"),
        ({"ids": [acme], "limit": 10_001}, "invalid_limit"),
        ({}, "invalid_batch"),
        ({"ids": [acme], "filter": RunFilter()}, "invalid_batch"),
        ({"ids": [acme, "x", "y"], "limit": 2}, "too_many_runs"),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            await ops.actions.batch_retry(actor="cli", **kwargs)
        assert refused.value.code == code, kwargs
    with pytest.raises(InvalidRequest) as unwired:
        await OperatorActions(runtime).batch_retry(filter=RunFilter(), actor="cli")
    assert unwired.value.code == "filter_unsupported"
    assert (await ops.actions.batch_retry([acme], actor="key:a", tenant="acme")).retried == [acme]


async def test_batch_retry_by_filter(ops: Operations, runtime: Runtime) -> None:
    failed = await failed_runs(runtime, ["http_error"] * 7, name="bulk")
    result = await ops.actions.batch_retry(filter=RunFilter(workflow="bulk"), limit=5, actor="cli")
    assert len(result.retried) == 5 and result.truncated
    assert set(result.retried) <= set(failed)
    rest = await ops.actions.batch_retry(filter=RunFilter(workflow="bulk"), actor="cli")
    assert sorted(rest.retried) == sorted(set(failed) - set(result.retried))
    assert not rest.truncated and rest.skipped == []


async def test_a_batch_filter_on_a_workflow_or_version_never_published_is_refused(
    ops: Operations, runtime: Runtime
) -> None:
    """A typo in the filter's workflow or version matches no run ever: the batch and its
    preview refuse it naming what exists, rather than answer 0 runs."""
    failed = await failed_runs(runtime, ["http_error"], name="bulk")
    await runtime.store.publish(single("http://127.0.0.1:2", name="bulk"))  # version 2
    for selection, message, details in [
        (
            RunFilter(workflow="bulk", version=99),
            "workflow 'bulk' has no version 99; its versions are 1 to 2",
            {"versions": [1, 2]},
        ),
        (
            RunFilter(workflow="blk"),
            "no published workflow 'blk'; did you mean 'bulk'?",
            {"meant": ["bulk"]},
        ),
    ]:
        with pytest.raises(NotFound) as previewed:
            await ops.actions.batch_retry_preview(selection)
        with pytest.raises(NotFound) as retried:
            await ops.actions.batch_retry(filter=selection, actor="cli")
        for refused in (previewed, retried):
            assert (refused.value.code, str(refused.value)) == ("workflow_not_found", message)
            assert refused.value.details == details
    assert await runtime.store.count_runs("FAILED") == 1
    pinned = RunFilter(workflow="bulk", version=1)
    assert (await ops.actions.batch_retry_preview(pinned)).matching == 1
    assert (await ops.actions.batch_retry(filter=pinned, actor="cli")).retried == failed


async def test_batch_retry_by_filter_stays_within_the_tenant(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    acme = await failed_chain(runtime, downstream, tenant_id="acme")
    # Naming another tenant in the filter matches nothing: not even its run ids are answered.
    other = RunFilter(tenant="acme")
    result = await ops.actions.batch_retry(filter=other, actor="key:g", tenant="globex")
    assert (result.retried, result.skipped, result.truncated) == ([], [], False)
    unscoped = await ops.actions.batch_retry(filter=RunFilter(), actor="key:g", tenant="globex")
    assert (unscoped.retried, unscoped.skipped) == ([], [])
    own = await ops.actions.batch_retry(filter=RunFilter(), actor="key:a", tenant="acme")
    assert own.retried == [acme]


async def test_batch_retry_by_filter_covers_root_runs_as_the_list_shows_them(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    root = await failed_chain(runtime, downstream)
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(runtime, downstream)
    listed = await ops.runs.list(RunFilter(status="FAILED", roots_only=True))
    assert [run.id for run in listed.items] == [root]
    # The default: the list's own set, the dead letter under a finished run not even looked at.
    result = await ops.actions.batch_retry(filter=RunFilter(), actor="cli")
    assert (result.retried, result.skipped) == ([root], [])
    # Children asked for (roots_only=False, or their parent named): the child is matched,
    # and skipped for its parent's sake.
    for selection in (RunFilter(roots_only=False), RunFilter(parent=parent_id)):
        again = await ops.actions.batch_retry(filter=selection, actor="cli")
        assert again.retried == [], selection
        assert [(s.run_id, s.reason) for s in again.skipped] == [(child_id, "parent_succeeded")]


async def test_a_batch_preview_counts_only_the_runs_the_batch_takes(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: `--dry-run` said "would retry 3 runs" of FAILED children the batch then
    skipped, all 3 under a SUCCEEDED run. The preview counts what the batch takes, and the
    runs it would skip by reason."""
    root = await failed_chain(runtime, downstream)
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(runtime, downstream)
    wide = await ops.actions.batch_retry_preview(RunFilter(roots_only=False))
    assert wide.matching == 1 and not wide.truncated
    assert [(s.reason, s.state, s.count) for s in wide.skipped] == [
        ("parent_succeeded", "FAILED", 1)
    ]
    assert "a run above them has SUCCEEDED" in wide.skipped[0].message
    under = await ops.actions.batch_retry_preview(RunFilter(parent=parent_id))
    assert (under.matching, [s.count for s in under.skipped]) == (0, [1])
    assert under.warnings == [] and under.breakers == []
    # A limit counts the runs the batch considers, skipped ones too, newest first: the
    # child (newer) is the one considered.
    newest = await ops.actions.batch_retry_preview(RunFilter(roots_only=False), limit=1)
    assert (newest.matching, [s.count for s in newest.skipped], newest.truncated) == (0, [1], True)
    ended = await ops.actions.batch_retry_preview(RunFilter(status="SUCCEEDED"))
    assert ended.matching == 0
    assert [(s.reason, s.state, s.count) for s in ended.skipped] == [
        ("run_not_failed", "SUCCEEDED", 1)
    ]
    # What the batch then does, as the preview said it.
    done = await ops.actions.batch_retry(filter=RunFilter(roots_only=False), actor="cli")
    assert done.retried == [root]
    assert [(s.run_id, s.reason) for s in done.skipped] == [(child_id, "parent_succeeded")]


async def test_a_batch_preview_by_ids_counts_what_the_batch_of_those_ids_does(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The monitor's "Retry selected" sends ids, not a filter: its preview of them counts
    the runs the batch of the same ids retries and skips, by reason, within the tenant."""
    mine = await failed_chain(runtime, downstream, tenant_id="acme")
    theirs = await failed_chain(runtime, downstream, tenant_id="globex")
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(
            runtime, downstream, tenant_id="acme"
        )
    asked = [mine, parent_id, child_id, theirs, "missing", mine]
    preview = await ops.actions.batch_retry_preview(ids=asked, tenant="acme")
    assert (preview.matching, preview.truncated, preview.limit) == (1, False, 1000)
    assert sorted((s.reason, s.state, s.count) for s in preview.skipped) == [
        ("parent_succeeded", "FAILED", 1),
        ("run_not_failed", "SUCCEEDED", 1),
        ("run_not_found", None, 2),
    ]
    for kwargs, code in [
        ({}, "invalid_batch"),
        ({"ids": [mine], "filter": RunFilter()}, "invalid_batch"),
        ({"ids": [mine, "x"], "limit": 1}, "too_many_runs"),
        ({"ids": [mine], "limit": 0}, "invalid_limit"),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            await ops.actions.batch_retry_preview(**kwargs)  # type: ignore[arg-type]
        assert refused.value.code == code, kwargs
    done = await ops.actions.batch_retry(asked, actor="key:a", tenant="acme")
    assert done.retried == [mine]
    assert sorted(s.reason for s in done.skipped) == [
        "parent_succeeded",
        "run_not_failed",
        "run_not_found",
        "run_not_found",
    ]


async def test_batch_retry_spares_a_dead_letter_of_a_succeeded_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(runtime, downstream)
    before = await runtime.store.get_run(parent_id)
    sent = downstream.stats.total
    result = await ops.actions.batch_retry([child_id], actor="cli")
    assert result.retried == []
    (skipped,) = result.skipped
    assert (skipped.run_id, skipped.reason, skipped.state) == (
        child_id,
        "parent_succeeded",
        "FAILED",
    )
    assert f"run {parent_id} above it has SUCCEEDED" in skipped.message
    assert "reopen its join 'join'" in skipped.message
    assert f"start over run {parent_id}" in skipped.message
    after = await runtime.store.get_run(parent_id)
    assert after is not None and before is not None
    assert (after.status, after.ended_at) == ("SUCCEEDED", before.ended_at)
    child = await runtime.store.get_run(child_id)
    assert child is not None and child.status == "FAILED"
    assert downstream.stats.total == sent
    assert await action_lines(runtime, child_id) == []


async def test_a_single_retry_of_that_dead_letter_reopens_its_parent_and_says_so(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id, child_id = await succeeded_over_a_dead_letter(runtime, downstream)
        result = await ops.actions.retry(child_id, actor="cli")
        parent = await wait_for_run(runtime, parent_id)
    assert result.reopened_run == parent_id
    (warning,) = result.warnings
    assert f"run {parent_id} above it had SUCCEEDED and runs again from its join 'join'" in (
        warning
    )
    assert parent.status == "SUCCEEDED" and parent.output["join"]["counts"]["succeeded"] == 3
    (line,) = await action_lines(runtime, child_id)
    assert f"run {parent_id}, which had SUCCEEDED, runs again" in line["message"]


async def test_retries_say_which_joins_fail_again_at_once(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        first = await failed_fan_out(runtime, downstream, 4, failing={0, 2})
    second = await failed_chain(runtime, downstream)
    batch = await ops.actions.batch_retry([first, second], actor="cli")
    assert batch.retried == [first, second]
    (stuck,) = batch.stuck
    assert (stuck.run_id, stuck.joins, stuck.children_failed) == (first, ["join"], 2)
    assert stuck.message == (
        f"run {first}: its join 'join' fails again at once: 2 children are still FAILED; "
        f"reprocess run {first} (`schemabridge runs reprocess {first}`) to run them again and "
        "reopen the join"
    )
    async with running_worker(runtime):
        await wait_for_run(runtime, first)
        single_result = await ops.actions.retry(first, actor="cli")
    assert (single_result.stuck_joins, single_result.children_failed) == (["join"], 2)
    assert single_result.warnings == [stuck.message]


async def test_a_batch_preview_says_which_runs_fail_the_same_way_again(
    ops: Operations, runtime: Runtime
) -> None:
    """The tour: a batch took a run that failed with invalid_config and said nothing, and it
    failed again at once. The preview names the runs whose failure a retry cannot fix (the
    workflow or the input caused it), grouped by kind, and leads its warnings with them; a run
    that failed on its destination is not among them. The batch still retries them all."""
    config, http, expression, second = await failed_runs(
        runtime, ["invalid_config", "http_error", "expression_error", "invalid_config"]
    )
    kinds = RunFilter(workflow="kinds")
    preview = await ops.actions.batch_retry_preview(kinds)
    newest = await ops.actions.batch_retry_preview(kinds, limit=1)
    assert preview.matching == 4
    assert [(g.kind, g.count, sorted(g.run_ids)) for g in preview.fix_first] == [
        ("invalid_config", 2, sorted([config, second])),
        ("expression_error", 1, [expression]),
    ]
    (warning,) = preview.warnings
    named = warning.rsplit("runs: ", 1)[1].split(", ")
    assert sorted(named) == sorted([config, expression, second]) and http not in warning
    counted = "3 of the 4 runs failed with invalid_config (2) / expression_error (1)"
    assert warning == fix_first_warning(counted, named)
    # The newest run only: the batch with that limit takes it alone.
    assert (newest.matching, newest.truncated) == (1, True)
    assert [(g.kind, g.run_ids) for g in newest.fix_first] == [("invalid_config", [second])]
    assert newest.warnings == [
        fix_first_warning(
            "The newest run, the one the batch takes, failed with invalid_config", [second]
        )
    ]
    batch = await ops.actions.batch_retry(filter=kinds, actor="cli")
    assert sorted(batch.retried) == sorted([config, http, expression, second])


def stuck_warning(counted: str, run_ids: list[str], repeated: str | None = None) -> str:
    """The batch retry preview's sentence about the runs whose joins would fail again at once
    (its `stuck` in words): `counted` says how many ("2 of the 3 runs have joins that fail"),
    `repeated` whose children failed from the workflow, `run_ids` the runs it names."""
    one = len(run_ids) == 1
    said = (
        f"{counted} again at once: the children {'it' if one else 'they'} failed on are still "
        f'FAILED, and a retry does not run them. "Reprocess dead letters" on '
        f"{'it' if one else 'each'} (`schemabridge runs reprocess RUN`) runs those children "
        "again and reopens the join instead"
    )
    if repeated is not None:
        said += (
            f"; but {repeated} failed from the workflow or the input, which a reprocess "
            "repeats too: fix the workflow first"
        )
    return f"{said}; {'run' if one else 'runs'}: {', '.join(run_ids)}"


async def test_a_batch_preview_says_which_runs_joins_fail_again_at_once(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: "Retry all matching" and "Retry selected" said nothing of the runs whose
    joins fail again at once (their children still FAILED), which the batch then listed in
    `stuck`. The preview, by filter and by ids, counts them and names them as the batch
    does, and says that reprocessing their dead letters is what runs the children again (not
    for a join whose children failed from the workflow: a reprocess repeats that)."""
    chain = await failed_chain(runtime, downstream)
    async with running_worker(runtime):
        dead = await failed_fan_out(runtime, downstream, 4, failing={0, 2})
        broken = await failed_unaddressed_fan_out(runtime, downstream, 2)
    roots = RunFilter()
    preview = await ops.actions.batch_retry_preview(roots)
    assert preview.matching == 3
    assert (preview.stuck.count, preview.stuck.run_ids) == (2, [broken, dead])
    # The runs that fail the same way lead; the stuck joins come next.
    assert [(g.kind, g.run_ids) for g in preview.fix_first] == [("invalid_config", [broken])]
    assert preview.warnings[1:] == [preview.stuck.message]
    assert preview.stuck.message == stuck_warning(
        "2 of the 3 runs have joins that fail",
        [broken, dead],
        repeated="the children of 1 of them",
    )
    newest = await ops.actions.batch_retry_preview(roots, limit=1)
    assert newest.stuck.run_ids == [broken] and newest.truncated
    assert newest.stuck.message == stuck_warning(
        "The newest run, the one the batch takes, has a join that fails",
        [broken],
        repeated="its children",
    )
    # "Retry selected": the ids named, the chain's run not stuck.
    selected = await ops.actions.batch_retry_preview(ids=[dead, chain])
    assert (selected.stuck.count, selected.stuck.run_ids) == (1, [dead])
    assert selected.warnings == [stuck_warning("1 of the 2 runs has a join that fails", [dead])]
    assert selected.fix_first == []
    batch = await ops.actions.batch_retry(filter=roots, actor="cli")
    assert sorted(batch.retried) == sorted([chain, dead, broken])
    assert [stuck.run_id for stuck in batch.stuck] == preview.stuck.run_ids


# ── reprocess ───────────────────────────────────────────────────────────────────────────────


async def test_reprocess_reruns_the_dead_letters_of_a_fan_out(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with running_worker(runtime):
        parent_id = await failed_fan_out(runtime, downstream, 10, failing={3, 7})
        assert downstream.stats.total == 10
        result = await ops.actions.reprocess(parent_id, actor="key:ops")
        assert (result.changed, result.revived, result.status) == (True, 2, "RUNNING")
        run = await wait_for_run(runtime, parent_id)
    assert run.status == "SUCCEEDED", run.error
    assert downstream.stats.total == 12  # only the two dead letters ran again
    (line,) = await action_lines(runtime, parent_id)
    assert line["data"] == {"action": "reprocess", "actor": "key:ops"}
    again = await ops.actions.reprocess(parent_id, actor="key:ops")
    assert (again.changed, again.revived, again.status) == (False, 0, "SUCCEEDED")
    assert len(await action_lines(runtime, parent_id)) == 1


async def test_reprocess_refusals(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    with pytest.raises(NotFound):
        await ops.actions.reprocess("no-such-run", actor="cli")
    run_id = await submit(runtime, [single(downstream.url)], {})
    with pytest.raises(NotFound):
        await ops.actions.reprocess(run_id, actor="cli", tenant="globex")
    await ops.actions.cancel(run_id, actor="cli")
    with pytest.raises(WrongState) as cancelled:
        await ops.actions.reprocess(run_id, actor="cli")
    assert (cancelled.value.code, cancelled.value.state) == ("run_cancelled", "CANCELLED")
