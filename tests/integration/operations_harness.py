"""Workflow documents and waits shared by the operations tests (they act as users: every
read and write goes through `engine.operations`), and the one home of the workflow documents
the other tests build too (the e2e tests publish these through the API and the CLI)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.operations import Operations
from engine.operations.views import RunDetail
from engine.runtime import Runtime

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def gateway(url: str, *depends_on: str, **config: Any) -> dict[str, Any]:
    vertex: dict[str, Any] = {"type": "GATEWAY", "config": {"url": url, **config}}
    if depends_on:
        vertex["dependsOn"] = list(depends_on)
    return vertex


def single(name: str, url: str, **workflow: Any) -> dict[str, Any]:
    """A workflow of one GATEWAY call."""
    return {"name": name, "vertices": {"call": gateway(url)}, **workflow}


def two_versions(name: str, url: str, *, failing: bool = False) -> list[dict[str, Any]]:
    """v1 and v2 of `name` (descriptions "v1" and "v2"), each one GATEWAY call to `url` on
    the demo downstream; v2's answered 404 (a final failure) when `failing`."""
    return [
        single(name, url, description="v1"),
        single(name, url + ("?status=404" if failing else ""), description="v2"),
    ]


def spawner_of(name: str, child: str) -> dict[str, Any]:
    """A workflow of one SPAWNER of `child` (`name` or `name@version`) over `input.items`."""
    each = {"type": "SPAWNER", "config": {"items": "{{ input.items }}", "workflow": child}}
    return {"name": name, "vertices": {"each": each}}


def fanout(base: str, merge: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """parent: a SPAWNER over `input.items` and its MERGE; child: one POST answered with the
    status its item names (the demo downstream's X-Demo-Status header)."""
    parent = spawner_of("parent", "child")
    parent["vertices"]["join"] = {"type": "MERGE", "dependsOn": ["each"], "config": merge or {}}
    child = {
        "name": "child",
        "vertices": {
            "call": gateway(
                f"{base}/charge/{{{{ index }}}}",
                method="POST",
                headers={"X-Demo-Status": "{{ item.status }}"},
                retry={"maxAttempts": 1},
            )
        },
    }
    return [parent, child]


def items(n: int, failing: set[int] = frozenset()) -> list[dict[str, Any]]:
    return [{"status": 400 if i in failing else 200} for i in range(n)]


async def ended(ops: Operations, run_id: str, timeout_s: float = 30) -> RunDetail:
    """The run once it has ended; fails the test after `timeout_s`."""
    run = await ops.runs.wait(run_id, timeout_s)
    assert run.status in TERMINAL, f"run {run_id} still {run.status} after {timeout_s} s"
    return run


async def eventually(condition: Any, timeout_s: float = 10) -> None:
    """Wait until the async `condition()` is true; fails the test after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.05)


def slow_to_redis(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Make `runtime`'s writes of tenant rate limits to Redis take 50 ms longer (a pause, a
    slow link): the event returned is set when one starts, so another change can be made
    while it is on its way."""
    at_redis = asyncio.Event()
    set_limit = runtime.admission.set_tenant_limit

    async def slow_set_limit(tenant_id: str, limit: int | None) -> None:
        at_redis.set()
        await asyncio.sleep(0.05)
        await set_limit(tenant_id, limit)

    monkeypatch.setattr(runtime.admission, "set_tenant_limit", slow_set_limit)
    return at_redis
