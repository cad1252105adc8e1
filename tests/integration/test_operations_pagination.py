"""Keyset pagination of the run lists: no row skipped or repeated while runs are inserted,
ties on the creation time, cursors that were altered or belong to another list, and limits.
Both backends, through the operations layer."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine.operations import Operations
from engine.operations.pagination import check_limit, decode_cursor, encode_cursor, scope_digest
from engine.operations.views import RunFilter, RunSummary
from engine.runtime import Runtime
from schemas.errors import InvalidRequest
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

URL = "http://127.0.0.1:9/never"


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


@pytest.fixture
async def ops(runtime: Runtime) -> Operations:
    ops = Operations(runtime)
    await ops.workflows.publish([single("a", URL), single("b", URL)])
    return ops


async def walk(
    ops: Operations, selection: RunFilter, limit: int, between: Any = None
) -> list[RunSummary]:
    """Every page of a list, calling `between()` before each page after the first."""
    seen: list[RunSummary] = []
    cursor: str | None = None
    for number in range(10_000):
        if number and between is not None:
            await between()
        page = await ops.runs.list(selection, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        seen += page.items
        if page.next is None:
            return seen
        cursor = page.next
    raise AssertionError("the list did not end")


def assert_newest_first(runs: list[RunSummary]) -> None:
    keys = [(r.created_at, r.id) for r in runs]
    assert keys == sorted(keys, reverse=True)
    assert len(set(keys)) == len(keys)


async def test_pages_neither_skip_nor_repeat_while_runs_are_inserted(
    ops: Operations, runtime: Runtime
) -> None:
    for i in range(40):
        await ops.runs.submit("a" if i % 3 else "b", {"i": i})
    # Runs created in one transaction share their creation time: `id` breaks the tie.
    version = await runtime.store.get_version("a")
    await runtime.store.create_runs(version, [{"bulk": i} for i in range(30)])
    before = {r.id for r in await walk(ops, RunFilter(), 500)}
    before_a = {r.id for r in await walk(ops, RunFilter(workflow="a"), 500)}
    assert (len(before), len(before_a)) == (70, 56)

    stop = asyncio.Event()

    async def keep_inserting() -> None:
        for i in range(10_000):
            if stop.is_set():
                return
            await ops.runs.submit("a", {"background": i})
            await asyncio.sleep(0.01)

    async def insert_newer() -> None:
        for i in range(3):
            await ops.runs.submit("b", {"between": i})

    background = asyncio.create_task(keep_inserting())
    try:
        walked = await walk(ops, RunFilter(), 7, between=insert_newer)
        walked_a = await walk(ops, RunFilter(workflow="a"), 4, between=insert_newer)
    finally:
        stop.set()
        await background
    assert_newest_first(walked)
    ids = [r.id for r in walked]
    assert len(ids) == len(set(ids))  # nothing repeated
    assert before <= set(ids)  # nothing that existed at the start skipped
    assert_newest_first(walked_a)
    ids_a = [r.id for r in walked_a]
    assert len(ids_a) == len(set(ids_a)) and before_a <= set(ids_a)
    assert {r.workflow for r in walked_a} == {"a"}


async def test_ties_on_the_creation_time_page_by_id(ops: Operations, runtime: Runtime) -> None:
    version = await runtime.store.get_version("a")
    ids = await runtime.store.create_runs(version, [{"i": i} for i in range(23)])
    walked = await walk(ops, RunFilter(), 5)
    assert_newest_first(walked)
    assert [r.id for r in walked] == sorted(ids, reverse=True)
    assert len({r.created_at for r in walked}) == 1


async def test_a_tenant_scoped_walk(ops: Operations) -> None:
    for i in range(9):
        await ops.runs.submit("a", {"i": i}, tenant_id="acme" if i % 2 else "globex")
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        page = await ops.runs.list(RunFilter(), limit=2, cursor=cursor, tenant="acme")
        seen += [r.tenant_id for r in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert seen == ["acme"] * 4
    first = await ops.runs.list(RunFilter(), limit=1, tenant="acme")
    assert first.next is not None
    with pytest.raises(InvalidRequest) as refused:  # the scope is part of the list
        await ops.runs.list(RunFilter(), limit=1, cursor=first.next)
    assert refused.value.code == "invalid_cursor"


def altered(cursor: str, change: Any) -> str:
    padded = cursor + "=" * (-len(cursor) % 4)
    body = json.loads(base64.urlsafe_b64decode(padded))
    change(body)
    text = json.dumps(body, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def test_altered_and_foreign_cursors_are_refused(ops: Operations) -> None:
    for i in range(5):
        await ops.runs.submit("a", {"i": i})
    parent = (await ops.runs.submit("b", {})).run
    page = await ops.runs.list(RunFilter(workflow="a"), limit=2)
    cursor = page.next
    assert cursor is not None
    assert (await ops.runs.list(RunFilter(workflow="a"), limit=2, cursor=cursor)).items

    def older(body: dict[str, Any]) -> None:
        body["p"][0] -= 1000

    def check_too(body: dict[str, Any]) -> None:
        body["p"][0] -= 1000
        body["c"] = "0" * 16

    tampered = [
        altered(cursor, older),
        altered(cursor, check_too),
        altered(cursor, lambda body: body.update(v=2)),
        cursor[:-3],
        cursor[:10],
        cursor[::-1],
        "",
        "!!!",
        "bm90IGpzb24",  # base64 of "not json"
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        # Deeper than the JSON parser recurses: refused as any other, not a RecursionError.
        base64.urlsafe_b64encode(b"[" * 1_500).decode(),
        base64.urlsafe_b64encode(b"[" * 1_500 + b"]" * 1_500).decode(),
    ]
    for bad in tampered:
        with pytest.raises(InvalidRequest) as refused:
            await ops.runs.list(RunFilter(workflow="a"), limit=2, cursor=bad)
        assert refused.value.code == "invalid_cursor", bad
    foreign = [
        ops.runs.list(RunFilter(workflow="b"), limit=2, cursor=cursor),
        ops.runs.list(RunFilter(workflow="a", status="RUNNING"), limit=2, cursor=cursor),
        ops.runs.list(RunFilter(workflow="a"), limit=2, cursor=cursor, tenant="acme"),
        ops.runs.children(parent.id, cursor=cursor),
    ]
    for call in foreign:
        with pytest.raises(InvalidRequest) as refused:
            await call
        assert refused.value.code == "invalid_cursor"
    # A limit is not part of the list: the same cursor reads on with another page size.
    assert len((await ops.runs.list(RunFilter(workflow="a"), limit=3, cursor=cursor)).items) == 3


@pytest.mark.parametrize("limit", [-1, 0, 501, 10**9, True, 2.5])
async def test_a_limit_outside_1_to_500_is_refused(ops: Operations, limit: Any) -> None:
    run = (await ops.runs.submit("a", {})).run
    calls = [
        ops.runs.list(RunFilter(), limit=limit),
        ops.runs.children(run.id, limit=limit),
        ops.runs.logs(run.id, limit=limit),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as refused:
            await call
        assert refused.value.code == "invalid_limit"
    assert len((await ops.runs.list(RunFilter(), limit=500)).items) == 1
    assert len((await ops.runs.list(RunFilter(), limit=1)).items) == 1


# ── the cursor codec (no database) ──────────────────────────────────────────────────────────


def test_a_cursor_carries_its_keys_exactly() -> None:
    scope = scope_digest("runs", {"workflow": "a"})
    keys = [1_764_633_600.123456789, "f" * 36]
    assert decode_cursor(encode_cursor("runs", keys, scope), "runs", scope) == keys
    assert "=" not in encode_cursor("runs", keys, scope)  # URL-safe, unpadded


def test_scopes_differ_by_list_and_filter() -> None:
    a = scope_digest("runs", {"workflow": "a", "status": None})
    assert a == scope_digest("runs", {"status": None, "workflow": "a"})
    assert a != scope_digest("runs", {"workflow": "b", "status": None})
    assert a != scope_digest("children", {"workflow": "a", "status": None})


@pytest.mark.parametrize("limit", [1, 500])
def test_limits_at_the_bounds_pass(limit: int) -> None:
    assert check_limit(limit) == limit
    with pytest.raises(InvalidRequest):
        check_limit(limit, maximum=limit - 1)
