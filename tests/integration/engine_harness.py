"""Helpers for engine tests: a runtime on a test backend and a worker running in the
background, with bounded waits on run states (no sleeping for state).

Tests act as users through the operations layer: `start` publishes and submits with
`Operations`, and `wait_for_run` reads the run with `ops.runs.wait` (its detail view)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from engine.execution.worker import Worker, WorkerConfig
from engine.operations import Operations
from engine.operations.views import RunDetail
from engine.runtime import Runtime
from engine.settings import Settings
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


async def wait_for_run(runtime: Runtime, run_id: str, timeout_s: float = 30) -> RunDetail:
    """The run once it has ended (`ops.runs.wait`); `TimeoutError` if it has not after
    `timeout_s`."""
    run = await Operations(runtime).runs.wait(run_id, timeout_s)
    if run.status not in TERMINAL:
        raise TimeoutError(f"run {run_id} is still {run.status} after {timeout_s:g} s")
    return run


async def start(runtime: Runtime, workflows: list[Workflow], run_input: Any, **kw: Any) -> str:
    """Publish `workflows` (one transaction) and submit a run of the first; `kw` are
    `ops.runs.submit`'s (`tenant_id`, `idempotency_key`, `version`)."""
    ops = Operations(runtime)
    documents = [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows]
    await ops.workflows.publish(documents)
    submitted = await ops.runs.submit(workflows[0].name, run_input, **kw)
    return submitted.run.id
