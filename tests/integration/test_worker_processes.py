"""Worker processes racing, dying and restarting, on both backends (issue 3).

Each test drives real `schemabridge worker` subprocesses over the test database, with the demo
downstream (started in this process) recording every request it receives.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.records import ClaimedStep, StepSucceeded
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.processes import start_worker, stop_worker, worker_env
from vertices.gateway_request import destination_key

pytestmark = pytest.mark.slow

SURVIVOR_LEASE_S = "12"
"""The lease of a worker started after another was killed: renewed every 4 s, it outlasts an
event loop stalled 8 s on a loaded host; its reaper takes a dead worker's step back within
4 s of that step's lease ending (a 30 s lease waited 10 s for the first look)."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def single_call(base: str, name: str = "one", sleep_ms: int = 0) -> Workflow:
    return Workflow.model_validate(
        {
            "name": name,
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/hit",
                        "method": "POST",
                        "headers": {"X-Demo-Sleep-Ms": str(sleep_ms)},
                        "retry": {"maxAttempts": 1},
                    },
                }
            },
        }
    )


async def create_runs(runtime: Runtime, workflow: Workflow, count: int) -> list[str]:
    version = await runtime.store.publish(workflow)
    ids = []
    for _ in range(count):
        run, _ = await runtime.store.create_run(version, {})
        ids.append(run.id)
    return ids


async def wait_all_succeeded(runtime: Runtime, expected: int, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while await runtime.store.count_runs("SUCCEEDED") < expected:
            await asyncio.sleep(0.25)


async def test_two_workers_execute_2000_steps_exactly_once(
    runtime: Runtime, downstream: RunningDownstream, backend: Backend, tmp_path: Path
) -> None:
    await create_runs(runtime, single_call(downstream.url), 2000)
    env = worker_env(backend, tmp_path, worker_concurrency="32", idle_poll_s="0.2")
    workers = [start_worker(env, f"w{i}", tmp_path / f"w{i}.log") for i in range(2)]
    try:
        await wait_all_succeeded(runtime, 2000, timeout_s=180)
    finally:
        codes = [await asyncio.to_thread(stop_worker, w) for w in workers]
    assert codes == [0, 0], (tmp_path / "w0.log").read_text()[-2000:]
    assert downstream.stats.total == 2000  # no step was executed twice
    assert await runtime.store.count_runs() == 2000


async def _wait_in_flight(downstream: RunningDownstream, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while downstream.stats.total < 1:
            await asyncio.sleep(0.05)


async def test_a_killed_workers_admission_slot_frees_with_its_steps_lease(
    runtime: Runtime, downstream: RunningDownstream, backend: Backend, tmp_path: Path
) -> None:
    """A destination that takes one call at a time, its one slot held by a worker killed in
    the middle of a call: the slot was leased for the step's lease (renewed while the call
    ran), so the survivor's call starts soon after the step is requeued, not after the 90 s a
    slot was leased for before. On the embedded backend each process has its own Redis, so
    there the slot dies with its process and only the step's way back is tested."""
    await Operations(runtime).settings.set_caps(destination_key(downstream.url, None), 1)
    (run_id,) = await create_runs(runtime, single_call(downstream.url, sleep_ms=5000), 1)
    env = worker_env(backend, tmp_path, lease_s="3", idle_poll_s="0.2")
    doomed = start_worker(env, "doomed", tmp_path / "doomed.log")
    await _wait_in_flight(downstream, timeout_s=30)
    assert await asyncio.to_thread(stop_worker, doomed, signal.SIGKILL) == -signal.SIGKILL
    killed_at = time.monotonic()
    # The survivor's reaper looks every 3 s (a third of its lease): the step is back in
    # about 3-6 s, then its call waits for the slot the dead worker held. Its lease, renewed
    # every 3 s, outlasts a stalled event loop on a loaded host during its 5 s call.
    survivor = start_worker(
        {**env, "SCHEMABRIDGE_LEASE_S": "9"}, "survivor", tmp_path / "survivor.log"
    )
    try:
        async with asyncio.timeout(60):
            while downstream.stats.total < 2:
                await asyncio.sleep(0.05)
        second_call_after_s = time.monotonic() - killed_at
        await wait_all_succeeded(runtime, 1, timeout_s=60)
    finally:
        assert await asyncio.to_thread(stop_worker, survivor) == 0
    # Well under the 90 s a slot was leased for before (the step waited 30 s for it, was
    # redispatched, waited again): room for a loaded host's slow process starts.
    assert second_call_after_s < 50, second_call_after_s
    (step,) = await runtime.store.get_steps(run_id)
    assert step.status == "SUCCEEDED" and step.attempts == 2


async def test_killed_worker_step_runs_again_after_its_lease(
    runtime: Runtime, downstream: RunningDownstream, backend: Backend, tmp_path: Path
) -> None:
    (run_id,) = await create_runs(runtime, single_call(downstream.url, sleep_ms=2000), 1)
    # The doomed worker's short lease lets the survivor take the step over soon after the kill;
    # the survivor's longer one keeps a stalled event loop on a loaded host from losing its
    # lease during the 2 s call (renewed every 4 s, it outlasts an 8 s stall), so the one
    # redelivery counted below is the kill's. Its reaper looks every 4 s (a third of it).
    env = worker_env(backend, tmp_path, lease_s="3", idle_poll_s="0.2")
    doomed = start_worker(env, "doomed", tmp_path / "doomed.log")
    await _wait_in_flight(downstream, timeout_s=30)
    (held,) = await runtime.store.get_steps(run_id)
    assert held.status == "RUNNING" and held.claim_token is not None
    assert await asyncio.to_thread(stop_worker, doomed, signal.SIGKILL) == -signal.SIGKILL
    survivor = start_worker(
        {**env, "SCHEMABRIDGE_LEASE_S": SURVIVOR_LEASE_S}, "survivor", tmp_path / "survivor.log"
    )
    try:
        await wait_all_succeeded(runtime, 1, timeout_s=60)
    finally:
        assert await asyncio.to_thread(stop_worker, survivor) == 0
    (step,) = await runtime.store.get_steps(run_id)
    assert step.status == "SUCCEEDED" and step.attempts == 2
    keys = {r.idempotency_key for r in downstream.stats.recent}
    assert len(keys) == 1  # the retry carried the same Idempotency-Key
    # The dead worker's result, arriving late, is dropped and changes nothing.
    version = await runtime.store.get_version("one")
    late = ClaimedStep(
        step_id=step.id,
        claim_token=held.claim_token,
        run_id=run_id,
        vertex_id="call",
        tenant_id="default",
        attempts=1,
        auto_retries=0,
        workflow_name="one",
        workflow_version=version.version,
        timeout_tier="process",
        run_input={},
        outputs={},
    )
    report = await runtime.store.complete([StepSucceeded(late, {"late": True})])
    assert report.dropped == [step.id]
    (after,) = await runtime.store.get_steps(run_id)
    assert after.output == step.output


async def test_restart_resumes_runs_without_rerunning_finished_steps(
    runtime: Runtime, downstream: RunningDownstream, backend: Backend, tmp_path: Path
) -> None:
    chain = Workflow.model_validate(
        {
            "name": "chain3",
            "vertices": {
                f"s{i}": {
                    "type": "GATEWAY",
                    "dependsOn": [f"s{i - 1}"] if i else [],
                    "config": {
                        "url": f"{downstream.url}/s{i}",
                        "headers": {"X-Demo-Sleep-Ms": "100"},
                        "retry": {"maxAttempts": 1},
                    },
                }
                for i in range(3)
            },
        }
    )
    await create_runs(runtime, chain, 60)
    env = worker_env(backend, tmp_path, worker_concurrency="16", idle_poll_s="0.2")
    first = start_worker(env, "first", tmp_path / "first.log")
    async with asyncio.timeout(60):
        while downstream.stats.total < 40:
            await asyncio.sleep(0.05)
    # Stopping blocks, so it runs in a thread: this loop serves the downstream the worker's
    # in-flight calls wait for.
    assert (
        await asyncio.to_thread(stop_worker, first) == 0
    )  # graceful: in-flight steps finish, queued work stays
    stopped_at = await runtime.store.count_runs("SUCCEEDED")
    assert stopped_at < 60
    second = start_worker(env, "second", tmp_path / "second.log")
    try:
        await wait_all_succeeded(runtime, 60, timeout_s=120)
    finally:
        assert await asyncio.to_thread(stop_worker, second) == 0
    assert downstream.stats.total == 180  # every step ran exactly once across the restart


def fan_out(base: str) -> list[Workflow]:
    parent = Workflow.model_validate(
        {
            "name": "fan",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "leaf"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"]},
            },
        }
    )
    leaf = Workflow.model_validate(
        {
            "name": "leaf",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {"url": f"{base}/leaf/{{{{ index }}}}", "method": "POST"},
                }
            },
        }
    )
    return [parent, leaf]


async def test_spawner_killed_mid_fan_out_creates_each_child_once(
    runtime: Runtime, downstream: RunningDownstream, backend: Backend, tmp_path: Path
) -> None:
    total = 3000
    parent, leaf = fan_out(downstream.url)
    await runtime.store.publish(leaf)
    version = await runtime.store.publish(parent)
    run, _ = await runtime.store.create_run(version, {"items": list(range(total))})
    # Small child batches make the fan-out take long enough to be killed in the middle. The
    # doomed worker's short lease lets the survivor take the spawner over soon after the kill;
    # the survivor's longer one keeps a stalled event loop on a loaded host from losing its
    # lease, so the one redelivery counted below is the kill's.
    env = worker_env(backend, tmp_path, lease_s="3", idle_poll_s="0.2", spawn_batch="100")
    doomed = start_worker(env, "doomed", tmp_path / "doomed.log")
    async with asyncio.timeout(60):
        while await runtime.store.existing_children(run.id, "each") < 300:
            await asyncio.sleep(0.05)
    assert await asyncio.to_thread(stop_worker, doomed, signal.SIGKILL) == -signal.SIGKILL
    created_before = await runtime.store.existing_children(run.id, "each")
    assert 0 < created_before < total, "the kill must land in the middle of the fan-out"
    survivor = start_worker(
        {**env, "SCHEMABRIDGE_LEASE_S": SURVIVOR_LEASE_S}, "survivor", tmp_path / "survivor.log"
    )
    try:
        async with asyncio.timeout(240):
            while True:
                current = await runtime.store.get_run(run.id)
                if current is not None and current.status in {"SUCCEEDED", "FAILED"}:
                    break
                await asyncio.sleep(0.25)
    finally:
        assert await asyncio.to_thread(stop_worker, survivor) == 0
    assert current.status == "SUCCEEDED", current.error
    children = await runtime.store.children(run.id, limit=total + 10)
    assert [c.item_index for c in children] == list(range(total))  # each item exactly once
    assert current.output["join"]["counts"]["succeeded"] == total
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run.id)}
    assert steps["join"].attempts == 1  # the merge ran once
    assert steps["each"].attempts == 2  # the spawner was redelivered after the kill
