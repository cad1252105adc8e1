"""A step waiting out an outage is claimed again every few seconds, each claim one more
execution: what the worker remembers between them (`engine.execution.step_memory`) keeps such
a step from failing on the next store error, and its run's log from one line per execution."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from demo.downstream import RunningDownstream
from engine.execution import executor
from engine.execution.executor import COORDINATION_RETRY_S, STORE_RETRY_LIMIT, STORE_RETRY_S
from engine.runtime import Runtime
from engine.store.records import StepFailed, StepParked
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from schemas.errors import FailureKind
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL

OUTAGE_EXECUTIONS = 12
"""More than `STORE_RETRY_LIMIT`: what a step reaches in a Redis outage of about 25 s."""


def one_call(url: str) -> Workflow:
    return Workflow.model_validate(
        {"name": "one-call", "vertices": {"call": {"type": "GATEWAY", "config": {"url": url}}}}
    )


class CapsThatFail:
    """A caps source whose reads fail as a lost database connection does, `failures` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def get_caps(self, destination: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OperationalError("SELECT", {}, Exception("connection lost"))


async def test_an_outage_is_one_park_line_however_many_executions_it_takes(
    backend: Backend, downstream: RunningDownstream
) -> None:
    clock = FakeClock()
    runtime = await Runtime.open(
        settings_for(backend, redis_url=UNREACHABLE_REDIS_URL), clock=clock
    )
    try:
        version = await runtime.store.publish(one_call(f"{downstream.url}/ok"))
        await runtime.store.create_run(version, {})
        deps = runtime.executor_deps()
        parks: list[str] = []
        for _ in range(OUTAGE_EXECUTIONS):
            (claimed,) = await runtime.store.claim(10, lease_s=30)
            result, lines = await executor.execute(claimed, version.workflow, deps)
            assert isinstance(result, StepParked), result
            await runtime.store.complete([result], lines)
            parks += [line.message for line in lines if line.message.startswith("parked: ")]
            clock.advance(COORDINATION_RETRY_S)
    finally:
        await runtime.close()
    assert claimed.attempts == OUTAGE_EXECUTIONS  # every claim is still an execution
    assert len(parks) == 1, parks
    assert parks[0].startswith("parked: admission unavailable")
    assert downstream.stats.total == 0


async def set_attempts(runtime: Runtime, attempts: int) -> None:
    engines: Any = runtime.store._engines
    async with engines.write.begin() as conn:
        await conn.execute(text("UPDATE step SET attempts = :a"), {"a": attempts})


async def test_store_errors_are_counted_in_a_row_not_by_executions(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A step with many executions behind it (an outage waited out) parks on a transient
    store error as a fresh one does; the `STORE_RETRY_LIMIT`-th error in a row fails it."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    try:
        runtime.admission._caps_source = CapsThatFail(failures=10**6)
        runtime.admission._loaded.refresh_s = 0.0  # the caps are read for every admission
        version = await runtime.store.publish(one_call(f"{downstream.url}/ok"))
        await runtime.store.create_run(version, {})
        await set_attempts(runtime, 2 * STORE_RETRY_LIMIT)
        deps = runtime.executor_deps()
        results: list[Any] = []
        for _ in range(STORE_RETRY_LIMIT):
            claims = await runtime.store.claim(10, lease_s=30)
            assert claims, f"the step ended after {len(results)} store errors: {results[-1]}"
            result, lines = await executor.execute(claims[0], version.workflow, deps)
            await runtime.store.complete([result], lines)
            results.append(result)
            clock.advance(STORE_RETRY_S)
    finally:
        await runtime.close()
    *parked, failed = results
    assert all(isinstance(r, StepParked) and "store unavailable" in r.reason for r in parked)
    assert isinstance(failed, StepFailed)
    assert failed.error["kind"] == FailureKind.INTERNAL_ERROR.value
    assert downstream.stats.total == 0
