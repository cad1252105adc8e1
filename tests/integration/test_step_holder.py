"""A RUNNING step's holder as `ops.runs.get` reads it when Redis does not answer: the run still
reads, its holder named and its liveness `unknown`, on both databases."""

from __future__ import annotations

from engine.operations import Operations
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL

ONE = Workflow.model_validate(
    {"name": "one", "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://x.test/"}}}}
)


async def test_redis_down_leaves_the_holder_unknown_and_the_run_readable(
    backend: Backend,
) -> None:
    runtime = await Runtime.open(settings_for(backend, redis_url=UNREACHABLE_REDIS_URL))
    try:
        run, _ = await runtime.store.create_run(await runtime.store.publish(ONE), {})
        await runtime.store.claim(1, 30.0, "w-1")
        detail = await Operations(runtime).runs.get(run.id)
        (row,) = await runtime.store.get_steps(run.id)
    finally:
        await runtime.close()
    (step,) = detail.steps
    assert step.status == "RUNNING" and step.holder is not None
    assert (step.holder.worker, step.holder.state, step.holder.last_seen) == (
        "w-1",
        "unknown",
        None,
    )
    assert row.claimed_by == "w-1"
    assert step.lease_expires_at is not None and step.lease_expires_at == row.lease_expires_at
