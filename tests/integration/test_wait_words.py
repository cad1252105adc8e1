"""What a fan-out's children waiting after a 429 say of all of them (docs/architecture.md,
'Why a step waits'): the destination, what it answered and its Retry-After, and when the next
of them goes, not just the reason's name. Each child calls a URL of its own, so only what
their wait messages share at their start is said of the group. On both backends."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from api.cli.run_display import children_waiting_line
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import WaitingChildren
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start

CHILDREN = 6


def throttled(url: str, destination: str, *, attempts: int, retry_after: int) -> list[Workflow]:
    """A fan-out over `input` whose children each call `url`/<item>, answered 429 with
    `Retry-After: retry_after`."""
    parent = {
        "name": f"words-{destination}",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {"items": "{{ input }}", "workflow": f"words-child-{destination}"},
            },
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    child = {
        "name": f"words-child-{destination}",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "maxAutoRetries": 2,
                "config": {
                    "url": f"{url}/{{{{ input }}}}?status=429&retry_after={retry_after}",
                    "destination": destination,
                    "retry": {"maxAttempts": attempts, "baseDelayMs": 10},
                },
            }
        },
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


async def waiting_group(ops: Operations, run_id: str, reason: str) -> WaitingChildren:
    """The fan-out's group of `reason` once all its children are in it (bounded: 30 s of
    looks 50 ms apart), read by `runs progress`."""
    for _ in range(600):
        groups = (await ops.runs.progress(run_id)).fanout.waiting
        found = [g for g in groups if g.reason == reason and g.children == CHILDREN]
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the children of {run_id} never all waited for {reason}: {groups}")


async def waited_for(
    backend: Backend, downstream: RunningDownstream, reason: str, **throttling: Any
) -> tuple[str, Any, Any]:
    """(destination, group, progress): a fan-out of CHILDREN answered 429 (`throttling`:
    `throttled`'s attempts and retry_after) until they all wait for `reason`, then cancelled.
    Redispatches wait 60 s, so the group is read while they wait."""
    destination = f"words-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=(60.0,)))
    try:
        ops = Operations(runtime)
        workflows = throttled(f"{downstream.url}/busy", destination, **throttling)
        run_id = await start(runtime, workflows, list(range(CHILDREN)))
        async with running_worker(runtime):
            group = await waiting_group(ops, run_id, reason)
            progress = await ops.runs.progress(run_id)
            await ops.actions.cancel(run_id, actor="test")
    finally:
        await runtime.close()
    return destination, group, progress


async def test_children_redispatched_after_a_429_say_what_was_answered(
    backend: Backend, downstream: RunningDownstream
) -> None:
    destination, group, progress = await waited_for(
        backend, downstream, "redispatch", attempts=1, retry_after=7
    )
    words = (
        f"waiting to be sent again (redispatch) after {destination} answered 429 Too Many "
        "Requests, Retry-After 7 s"
    )
    assert group.message == words
    assert group.until is not None and group.until > time.time() + 50
    assert group.text.startswith(f"{words}; next in ")
    line = children_waiting_line(progress.fanout, now=group.until - 42.2)
    assert line == f"{CHILDREN} children {words}; next in 43 s"


async def test_children_waiting_to_retry_a_429_say_what_was_answered(
    backend: Backend, downstream: RunningDownstream
) -> None:
    destination, group, progress = await waited_for(
        backend, downstream, "retry_backoff", attempts=2, retry_after=25
    )
    words = (
        f"waiting to retry a call to {destination}: answered 429 Too Many Requests, "
        "Retry-After 25 s"
    )
    assert group.message == words
    assert group.until is not None
    assert group.text.startswith(f"{words}; next in ")
    line = children_waiting_line(progress.fanout, now=group.until - 19.5)
    assert line == f"{CHILDREN} running children {words}; next in 20 s"
