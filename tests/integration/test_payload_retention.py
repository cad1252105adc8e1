"""Payload retention on both backends: workers delete the payloads of runs that ended more
than `payload_retention_s` ago, so the payload store drains below its high-water mark, and a
step that reads a join's outputs once they are gone fails saying so
(docs/architecture.md, 'Payload retention')."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import select

from demo.downstream import RunningDownstream
from engine.execution import fanout, merge_outputs
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import children
from engine.store.models import Payload
from engine.store.records import ClaimedStep, StepFailed, StepSucceeded
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from schemas.errors import FailureKind, StepFailure
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.test_merge_outputs import READS_OUTPUTS, items
from tests.integration.test_merge_outputs import workflows as merge_workflows

RETENTION_S = 3600.0
payloads = Payload.__table__  # type: ignore[attr-defined]


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    """A runtime on a fake clock, retention an hour, the payload store's high-water mark
    1,000 bytes, leases long enough for the clock's jumps of a few seconds."""
    clock = FakeClock()
    settings = settings_for(
        backend,
        payload_retention_s=RETENTION_S,
        payload_high_water_bytes=1000,
        lease_s=60.0,
    )
    runtime = await Runtime.open(settings, clock=clock)
    yield runtime, clock
    await runtime.close()


@pytest.fixture
def small_inline_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Joins of 20 children go to the payload store."""
    monkeypatch.setattr(fanout, "INLINE_OUTPUT_MAX_BYTES", 2000)


async def expire(runtime: Runtime, *, limit: int = 5, max_bytes: int = 1000) -> tuple[int, int]:
    """One batch of the payloads past RETENTION_S: (chunks, bytes) deleted."""
    return await runtime.store.delete_expired_payloads(
        RETENTION_S, limit=limit, max_bytes=max_bytes
    )


def one_step(base: str) -> list[Workflow]:
    """A workflow of one GATEWAY, whose steps the tests claim and complete themselves."""
    document = {
        "name": "one",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{base}/one"}}},
    }
    return [Workflow.model_validate(document)]


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    """Wait for `condition` (polled), at most `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.05)


def worker_config(runtime: Runtime) -> Any:
    """The runtime's worker config, deleting expired payloads every 0.1 s."""
    return dataclasses.replace(runtime.worker_config(), payload_expiry_every_s=0.1)


async def test_payloads_of_runs_ended_before_the_retention_are_deleted_in_batches(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    names = ["ended_long_ago", "reopened", "ended_lately", "running"]
    run_ids = {name: await start(runtime, one_step(downstream.url), {}) for name in names}
    claimed = {step.run_id: step for step in await runtime.store.claim(10, lease_s=600)}
    steps: dict[str, ClaimedStep] = {name: claimed[run_ids[name]] for name in names}
    refs = {}
    for name in names:  # two chunks of 21 bytes each
        refs[name] = await runtime.store.put_payload(run_ids[name], ["x"] * 5)
        await runtime.store.put_payload(run_ids[name], ["x"] * 5, ref=refs[name], chunk=1)
    await runtime.store.complete(
        [
            StepSucceeded(steps["ended_long_ago"], {}),
            StepFailed(steps["reopened"], {"kind": "http_error", "message": "boom"}),
        ]
    )
    clock.advance(RETENTION_S / 2)
    await runtime.store.complete([StepSucceeded(steps["ended_lately"], {})])
    clock.advance(RETENTION_S / 2 + 1)
    # An operator's Retry reopens the FAILED run long after it ended: it keeps its payloads.
    await Operations(runtime).actions.retry(run_ids["reopened"], actor="ops")

    # A batch at a time, bounded in chunks and, past its first chunk, in bytes.
    assert await expire(runtime, limit=1) == (1, 21)
    assert await expire(runtime, max_bytes=1) == (1, 21)
    assert await expire(runtime) == (0, 0)

    assert await runtime.store.get_payload(refs["ended_long_ago"]) is None
    for name in ("reopened", "ended_lately", "running"):
        assert await runtime.store.get_payload(refs[name]) == ["x"] * 10
    # The run ended lately goes once it too is past the retention.
    clock.advance(RETENTION_S / 2)
    assert await expire(runtime, max_bytes=42) == (2, 42)
    assert await runtime.store.payload_bytes() == 2 * 42


async def test_payload_pressure_drains_by_retention_and_the_parked_fan_out_starts(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream, small_inline_limit: None
) -> None:
    runtime, clock = clocked
    # A's join fills the payload store past its high-water mark.
    run_a = await start(runtime, merge_workflows(downstream.url, {}), {"items": items(20)})
    async with running_worker(runtime, worker_config(runtime)):
        assert (await wait_for_run(runtime, run_a)).status == "SUCCEEDED"
        assert await runtime.store.payload_bytes() > 1000
        run_b = await start(runtime, merge_workflows(downstream.url, {}), {"items": items(3)})

        async def b_parked() -> bool:
            steps = await runtime.store.get_steps(run_b)
            return any(s.vertex_id == "each" and s.wait_reason == "payload_store" for s in steps)

        await until(b_parked)
        (each,) = [s for s in await runtime.store.get_steps(run_b) if s.vertex_id == "each"]
        assert "SCHEMABRIDGE_PAYLOAD_RETENTION_S" in (each.wait_message or "")
        assert await runtime.store.existing_children(run_b, "each") == 0

        # A ended an hour ago: a worker deletes its payloads, and the spawner, due again,
        # starts its children (if it ran before the deletion it parked again: 10 s more).
        clock.advance(RETENTION_S + 1)

        async def drained() -> bool:
            return await runtime.store.payload_bytes() == 0

        await until(drained)
        clock.advance(11)
        run = await wait_for_run(runtime, run_b)
    assert run.status == "SUCCEEDED", run.error
    assert await runtime.store.existing_children(run_b, "each") == 3


def _failing_reader(base: str) -> list[Workflow]:
    """The merge test's workflows, with a reader of the join's outputs whose first call is
    answered 400 (every call is: what matters is the run FAILED after its join)."""
    parent, child = merge_workflows(base, {"size": READS_OUTPUTS})
    document = parent.model_dump(mode="json", by_alias=True, exclude_none=True)
    reader = document["vertices"]["size"]["config"]
    reader["url"] = f"{base}/size?status=400"
    reader["retry"] = {"maxAttempts": 1}
    return [Workflow.model_validate(document), child]


async def test_a_step_reading_a_join_whose_outputs_expired_fails_saying_what_to_do(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream, small_inline_limit: None
) -> None:
    runtime, clock = clocked
    run_id = await start(runtime, _failing_reader(downstream.url), {"items": items(20)})
    async with running_worker(runtime, worker_config(runtime)):
        first = await wait_for_run(runtime, run_id)
        assert first.status == "FAILED" and first.error is not None
        assert first.error.kind == "http_error"  # it did read the outputs, then called
        clock.advance(RETENTION_S + 1)

        async def deleted() -> bool:
            return await runtime.store.payload_bytes() == 0

        await until(deleted)
        # An operator retries the run a day later: its join's outputs are gone.
        await Operations(runtime).actions.retry(run_id, actor="ops")
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED"
    error = run.error
    assert error is not None and error.vertex_id == "size"
    assert error.kind == "expression_error"
    assert "\n" not in error.message
    assert error.message == merge_outputs.expired("join", RETENTION_S)
    assert "expired" in error.message and "1 hour after their run ends" in error.message
    assert "start over the run to merge again" in error.message
    assert "raise SCHEMABRIDGE_PAYLOAD_RETENTION_S" in error.message
    (size,) = [step for step in run.steps if step.vertex_id == "size"]
    assert size.status == "FAILED" and size.auto_retries == 0  # terminal: not redispatched


async def test_a_join_whose_chunks_are_partly_deleted_reads_as_expired(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """Retention deletes a batch of chunks at a time: a payload it has begun to delete is
    never read as a shorter list."""
    runtime, clock = clocked
    parent, _ = merge_workflows(downstream.url, {"size": READS_OUTPUTS})
    run_id = await start(runtime, one_step(downstream.url), {})
    (step,) = await runtime.store.claim(1, lease_s=600)
    ref = await runtime.store.put_payload(run_id, [1, 2])
    await runtime.store.put_payload(run_id, [3, 4], ref=ref, chunk=1)
    await runtime.store.complete([StepSucceeded(step, {})])
    outputs = {"join": {"counts": {}, "outputsRef": {"payloadRef": ref, "count": 4}}}
    vertex = parent.vertices["size"]
    loaded = await merge_outputs.with_outputs(
        runtime.store, outputs, parent, vertex, 10_000, retention_s=RETENTION_S
    )
    assert loaded["join"]["outputs"] == [1, 2, 3, 4]
    clock.advance(RETENTION_S + 1)
    assert await expire(runtime, limit=1) == (1, 5)
    with pytest.raises(StepFailure) as failure:
        await merge_outputs.with_outputs(
            runtime.store, outputs, parent, vertex, 10_000, retention_s=RETENTION_S
        )
    assert failure.value.kind is FailureKind.EXPRESSION_ERROR
    assert "expired" in str(failure.value)


async def test_a_deletion_passes_over_held_chunks_and_spares_a_run_reopened_meanwhile(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream, backend: Backend
) -> None:
    """PostgreSQL, where deletions and other writers run at once (SQLite has one writer at a
    time): a chunk whose row another transaction holds is passed over, not waited for (SKIP
    LOCKED: two workers deleting at once take different chunks); and a run an operator
    reopens after its chunks were chosen keeps them (the DELETE checks the run again)."""
    if backend.name != "server":
        pytest.skip("PostgreSQL only: SQLite lets one writer in at a time")
    runtime, clock = clocked
    run_id = await start(runtime, one_step(downstream.url), {})
    (step,) = await runtime.store.claim(10, lease_s=600)
    ref = await runtime.store.put_payload(run_id, ["x"] * 5)
    await runtime.store.put_payload(run_id, ["x"] * 5, ref=ref, chunk=1)
    await runtime.store.complete([StepFailed(step, {"kind": "http_error", "message": "boom"})])
    clock.advance(RETENTION_S + 1)
    ended_before = clock.now() - RETENTION_S
    engines = runtime.store._engines  # the store's own engine, as a second worker's
    async with engines.write.begin() as holder:
        first = select(payloads.c.id).order_by(payloads.c.id).limit(1).with_for_update()
        held = (await holder.execute(first)).scalar_one()
        async with engines.write.begin() as deleter:
            chosen = await asyncio.wait_for(
                children.choose_expired_payloads(deleter, ended_before, 5, 1000), timeout=10
            )
            assert held not in chosen and len(chosen) == 1
            # Before this DELETE, an operator's Retry reopens the run (its own transaction).
            await Operations(runtime).actions.retry(run_id, actor="ops")
            assert await children.delete_expired(deleter, chosen, ended_before) == (0, 0)
    assert await runtime.store.get_payload(ref) == ["x"] * 10
