"""A result the database refuses for what it holds (not an outage) is not kept forever.

Results are kept through an outage for as long as their leases hold (`Worker._record`); the
lease renewer extends them while the database answers. A write that fails for its own data
(PostgreSQL refuses a NUL character in text) fails the same way every try while renewals
succeed: the flusher must give it up after its bounded tries, not hold every later result of
the worker behind it."""

from __future__ import annotations

import asyncio
import contextlib

from engine.execution.worker import Worker, WorkerConfig
from engine.runtime import Runtime
from engine.store import Store
from engine.store.records import LogLine, StepSucceeded
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for

ONE = Workflow.model_validate(
    {
        "name": "one",
        "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}}},
    }
)
LEASE_S = 3.0


async def test_a_refused_write_is_given_up_while_leases_renew(pg_database_url: str) -> None:
    backend = Backend("postgres", pg_database_url, None)
    runtime = await Runtime.open(settings_for(backend, lease_s=LEASE_S))
    try:
        store: Store = runtime.store
        version = await store.publish(ONE)
        run, _ = await store.create_run(version, {})
        config = WorkerConfig(lease_s=LEASE_S, idle_poll_s=0.05)
        worker = Worker(store, runtime.executor_deps(), runtime.wakeup, config)
        [step] = await worker._claim(1)
        worker._in_flight[step.claim_token] = step
        refused = LogLine(run.id, "error", "an answer with a NUL: a\x00b", "a")

        async def renewing() -> None:
            for _ in range(100):  # what the renewer task does, every third of a lease
                await asyncio.sleep(LEASE_S / 3)
                await worker._renew()

        renewer = asyncio.create_task(renewing())
        try:
            # Bounded: with results kept while their leases are renewed, this never returns.
            report, recorded = await asyncio.wait_for(
                worker._record([StepSucceeded(step, {"ok": 1})], [refused]), timeout=30
            )
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        assert report is None
        assert recorded == []
    finally:
        await runtime.close()
