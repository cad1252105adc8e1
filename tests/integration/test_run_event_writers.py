"""Every writer that changes a run's status, steps or fan-out progress publishes a run event
(`engine.coordination.run_events`), on both backends: the operator actions and a deployment's
abort wake a watch of the runs they change; a worker names a child's parent with the child
whenever it claims, records, gives back or requeues the child's step (the parent's running and
waiting children moved), batched per claim or flush, never one message per child.

Watches are the runtime's own (`RunEvents.changed` wakes them before it publishes to Redis);
the worker's events are read through its `run_events` port with a recorder."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

import pytest

from demo.downstream import RunningDownstream
from engine.execution.worker import Worker, WorkerConfig
from engine.operations import Operations
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.runtime import Runtime
from engine.store.records import StepParked, Waiting
from schemas.clock import FakeClock
from schemas.waiting import WaitReason
from tests.conftest import Backend
from tests.integration.actions_harness import (
    TOLERANT,
    failed_runs,
    fan_out,
    submit,
    wait_until,
)
from tests.integration.deploy_harness import version_doc
from tests.integration.engine_harness import settings_for

WOKEN_S = 5.0
"""How long a watch may take to wake (a change wakes it at once; the bound fails the test)."""


class Recorder:
    """A worker's run events port that keeps every batch of run ids it was given."""

    def __init__(self) -> None:
        self.batches: list[set[str]] = []
        self.ended: list[set[str]] = []

    async def changed(self, run_ids: Iterable[str], ended: Iterable[str] = ()) -> None:
        self.batches.append(set(run_ids))
        self.ended.append(set(ended))

    def named(self, run_id: str) -> list[set[str]]:
        return [batch for batch in self.batches if run_id in batch]


@contextlib.asynccontextmanager
async def woken(runtime: Runtime, *run_ids: str) -> AsyncIterator[None]:
    """The block must wake a watch of each of `run_ids`."""
    with contextlib.ExitStack() as stack:
        watches = [stack.enter_context(runtime.run_events.watch(r)) for r in run_ids]
        yield
        for watch in watches:
            assert await watch.wait(WOKEN_S), f"no run event for {watch.run_id}"


async def test_operator_actions_and_a_deployment_abort_wake_the_watches(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    try:
        retried, resolved, batch, ended, _ = await failed_runs(runtime, ["http_error"] * 5)
        async with woken(runtime, retried):
            await ops.actions.retry(retried, actor="test")
        async with woken(runtime, resolved):
            await ops.actions.resolve(resolved, "call", {"ok": True}, actor="test")
        async with woken(runtime, batch):
            await ops.actions.batch_retry([batch], actor="test")
        async with woken(runtime, ended):
            started = await ops.actions.start_over(ended, actor="test")
        assert started.changed and started.new_run_id is not None
        async with woken(runtime, started.new_run_id):
            await ops.actions.cancel(started.new_run_id, actor="test")

        for note in ("", "-v2"):
            await ops.workflows.publish(version_doc("orders", downstream.url, note=note))
        deployment = await ops.deployments.start(
            "orders", 2, actor="test", stages=[StageSpec(weight=100)], rollback=RollbackSpec()
        )
        async with woken(runtime, deployment.run_id):
            await ops.deployments.abort(deployment.id, actor="test")
    finally:
        await runtime.close()


async def test_a_worker_names_the_parent_with_each_child(
    backend: Backend, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    """Children that call for 5 s: a worker claims them (the parent's running children move),
    then stops and gives their claims back; a dead worker's claims on them expire and a
    reaper requeues them. Each batch that names a child names its parent too."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    try:
        parent = await submit(runtime, fan_out(downstream.url), {"items": [{"sleep": 5000}] * 3})
        children: list[str] = []

        async def all_running() -> bool:
            children[:] = [c.id for c in await runtime.store.children(parent, limit=10)]
            return len(children) == 3 and all(
                any(child in batch for batch in recorder.batches) for child in children
            )

        recorder = Recorder()
        stopping = WorkerConfig(lease_s=5.0, idle_poll_s=0.05, shutdown_grace_s=0.05)
        stop = asyncio.Event()
        worker = Worker(
            runtime.store, runtime.executor_deps(), runtime.wakeup, stopping, run_events=recorder
        )
        task = asyncio.create_task(worker.run(stop))
        try:
            await wait_until(all_running, timeout_s=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        for child in children:
            assert all(parent in batch for batch in recorder.named(child)), recorder.batches
        # Their calls are sent again by the next claim: a warning, with the grace they missed.
        (stopped,) = [r for r in caplog.records if "given back for another worker" in r.message]
        assert stopped.levelno == logging.WARNING, stopped.message
        assert stopped.__dict__["event"] == "step.given_back" and stopped.__dict__["steps"] == 3
        assert "3 in-flight steps did not end within the 50 ms grace" in stopped.message
        assert "sends their calls again (same Idempotency-Key)" in stopped.message

        # A worker that died holding the children's claims: their leases expire, and a
        # worker that claims nothing (concurrency 0) only reaps.
        recorder.batches.clear()
        held = await runtime.store.claim(10, lease_s=5)
        assert {step.run_id for step in held} == set(children)
        clock.advance(10)
        reaping = WorkerConfig(concurrency=0, lease_s=0.3, idle_poll_s=0.05)
        reaper = Worker(
            runtime.store, runtime.executor_deps(), runtime.wakeup, reaping, run_events=recorder
        )
        stop = asyncio.Event()
        task = asyncio.create_task(reaper.run(stop))
        try:
            await wait_until(lambda: _named_all(recorder, children), timeout_s=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        assert reaper.stats.requeued == 3
        for child in children:
            assert all(parent in batch for batch in recorder.named(child)), recorder.batches
        # A child's step that parks with a reason moves its parent's waiting children: the
        # flush's changed runs name the parent though no child ended.
        claimed = await runtime.store.claim(10, lease_s=5)
        waiting = Waiting(WaitReason.TENANT_RATE_LIMIT, "the tenant's window is full")
        parked = [StepParked(s, clock.now() + 60, "rate", waiting=waiting) for s in claimed]
        report = await runtime.store.complete(parked)
        assert report.finished_runs == []
        assert set(children) | {parent} == report.changed_runs
    finally:
        await runtime.close()


async def test_a_worker_names_the_runs_its_flushes_ended(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A `?wait=true` waiter reads its run on the events that say it ended: every run a
    flush ended (each child, the parent at its join, a child that failed) is named as ended
    once, and a claim's batch names none."""
    runtime = await Runtime.open(settings_for(backend))
    try:
        items = {"items": [{}, {}, {"status": 500}]}
        parent = await submit(runtime, fan_out(downstream.url, TOLERANT), items)
        recorder = Recorder()
        config = WorkerConfig(idle_poll_s=0.05)
        stop = asyncio.Event()
        worker = Worker(
            runtime.store, runtime.executor_deps(), runtime.wakeup, config, run_events=recorder
        )
        task = asyncio.create_task(worker.run(stop))
        try:

            async def parent_ended() -> bool:
                return (await runtime.store.get_run(parent)).status in {"SUCCEEDED", "FAILED"}

            await wait_until(parent_ended, timeout_s=30)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        children = [c.id for c in await runtime.store.children(parent, limit=10)]
        ended = [run_id for batch in recorder.ended for run_id in batch]
        assert sorted(ended) == sorted([*children, parent]), recorder.ended
        for batch, named_ended in zip(recorder.batches, recorder.ended, strict=True):
            assert named_ended <= batch, "an ended run is named changed too"
    finally:
        await runtime.close()


async def _named_all(recorder: Recorder, run_ids: list[str]) -> bool:
    return all(recorder.named(run_id) for run_id in run_ids)
