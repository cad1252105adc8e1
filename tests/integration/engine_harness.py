"""Helpers for engine tests: a runtime on a test backend and a worker running in the
background, with bounded waits on run states (no sleeping for state)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from engine.execution.worker import Worker, WorkerConfig
from engine.runtime import Runtime
from engine.settings import Settings
from engine.store.records import RunRecord
from schemas.definitions import Workflow
from tests.conftest import Backend

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def settings_for(backend: Backend, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": backend.database_url,
        "redis_url": backend.redis_url,
        "idle_poll_s": 0.2,
        "lease_s": 5.0,
        "tenant_rate_per_minute": 10_000_000,  # tests of the limiter set their own
        **overrides,
    }
    return Settings.model_validate(values)


@contextlib.asynccontextmanager
async def running_worker(
    runtime: Runtime, config: WorkerConfig | None = None
) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    worker = runtime.worker(config)
    task = asyncio.create_task(worker.run(stop), name="test-worker")
    try:
        yield worker
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task


async def wait_for_run(runtime: Runtime, run_id: str, timeout_s: float = 30) -> RunRecord:
    """Poll the store until the run ends; fail after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while True:
            run = await runtime.store.get_run(run_id)
            if run is not None and run.status in TERMINAL:
                return run
            await asyncio.sleep(0.05)


async def start(runtime: Runtime, workflows: list[Workflow], run_input: Any, **kw: Any) -> str:
    for workflow in workflows:
        await runtime.store.publish(workflow)
    version = await runtime.store.get_version(workflows[0].name)
    run, _ = await runtime.store.create_run(version, run_input, **kw)
    return run.id
