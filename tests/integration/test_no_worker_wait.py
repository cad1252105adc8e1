"""A run whose READY steps nobody claims because no worker is alive says so when it is read
(`WaitReason.NO_WORKER`), on both backends: its detail and its progress stream name the wait
on the step, a wait that times out answers it (the 504's reason), and the word is gone once
a worker beats again. A tour stopped every worker: the run sat READY and nothing said why."""

from __future__ import annotations

import asyncio
import time

import pytest

from demo.downstream import RunningDownstream
from engine.coordination.heartbeat import Heartbeat, ServiceRole, ServiceStatus
from engine.operations import Operations, worker_liveness
from engine.operations.worker_liveness import KEPT_S
from engine.runtime import Runtime
from schemas.clock import FakeClock
from schemas.waiting import NO_WORKER_MESSAGE, WaitReason
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single


async def test_a_ready_step_says_no_worker_is_alive(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    ops = Operations(runtime)

    async def beat(name: str) -> None:
        await Heartbeat(name, runtime.redis, clock, interval_s=1, ttl_s=30).beat()

    try:
        await ops.workflows.publish(single("ok", f"{downstream.url}/ok"))
        run_id = (await ops.runs.submit("ok", {})).run.id
        await beat("worker-a")
        (step,) = (await ops.runs.get(run_id)).steps
        assert (step.status, step.waiting) == ("READY", None), "a worker is alive"

        # Its beat stale, past the wall clock too (the clock starts in 2023: a worker of
        # another test beating into the same Redis now would read as alive, from the future);
        # only an API process beats.
        clock.advance(max(60.0, time.time() + 3_600 - clock.now()))
        await beat("api-host-8000")
        (step,) = (await ops.runs.get(run_id)).steps
        assert step.waiting is not None
        assert (step.waiting.reason, step.waiting.text) == (WaitReason.NO_WORKER, NO_WORKER_MESSAGE)
        (shown,) = (await ops.runs.progress(run_id)).steps
        assert shown.waiting is not None and shown.waiting.reason == WaitReason.NO_WORKER
        still = await ops.runs.wait_for_end(run_id, 0.1)
        assert still.status == "RUNNING"
        assert [s.waiting.reason for s in still.steps if s.waiting] == [WaitReason.NO_WORKER]

        # A worker may be named like an API process: its beat's role says it is a worker.
        named_like_an_api = Heartbeat(
            "api-vm-44117", runtime.redis, clock, interval_s=1, ttl_s=30, role=ServiceRole.WORKER
        )
        await named_like_an_api.beat()
        clock.advance(KEPT_S)  # the process's answer may be that old
        (step,) = (await ops.runs.get(run_id)).steps
        assert step.waiting is None

        clock.advance(60.0)  # its beat stale too
        await beat("worker-b")
        clock.advance(KEPT_S)
        (step,) = (await ops.runs.get(run_id)).steps
        assert step.waiting is None
    finally:
        await runtime.close()


async def test_the_answer_is_read_once_for_concurrent_askers_and_kept_2_s(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A just-submitted run polled many times a second costs no Redis read each time."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    reads: list[float] = []

    async def counted(*_: object, **__: object) -> list[ServiceStatus]:
        reads.append(clock.now())
        await asyncio.sleep(0.01)  # in flight while the others ask
        return [ServiceStatus("worker-a", up=False, pid=7, uptime_s=1.0, last_seen=1.0)]

    monkeypatch.setattr(worker_liveness, "read_services", counted)
    try:
        alive = worker_liveness.WorkersAlive(runtime)
        assert await asyncio.gather(*(alive() for _ in range(5))) == [False] * 5
        assert await alive() is False
        assert len(reads) == 1, "one shared read, then its answer"
        clock.advance(KEPT_S)
        await alive()
        assert len(reads) == 2, "read again once the answer is 2 s old"
    finally:
        await runtime.close()
