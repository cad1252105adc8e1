"""PostgreSQL creates a submitted run, its steps, its first log line and its quota use in one
statement (`catalogue.CREATE_RUN_AT_ONCE`); SQLite in a transaction of four. Both paths must
leave exactly the same rows and refuse alike: each test runs the same creations on both paths
of PostgreSQL (the one-statement path switched off for the second) and compares every column;
the store contract covers SQLite."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import text

from engine.store import Store
from engine.store.catalogue import QuotaExhausted
from engine.store.dialect import Dialect
from schemas.clock import FakeClock
from schemas.definitions import Workflow

DIAMOND = Workflow.model_validate(
    {
        "name": "diamond",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
            "b": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/b"}, "dependsOn": ["a"]},
            "c": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/c"}, "dependsOn": ["a"]},
            "d": {
                "type": "GATEWAY",
                "config": {"url": "http://127.0.0.1:1/d"},
                "dependsOn": ["b", "c"],
            },
        },
    }
)
RUN_COLUMNS = (
    "id, workflow_name, workflow_version, definition_hash, tenant_id, status, timeout_tier, "
    "input IS NULL, input::text, output IS NULL, output::text, error IS NULL, error::text, "
    "steps_remaining, created_at, started_at, ended_at, idempotency_key, parent_run_id, "
    "parent_vertex_id, item_index, root_run_id, restarted_from, dlq_at, item IS NULL, "
    "pinned_versions IS NULL, pinned_versions::text, request_hash, route, created_by"
)
STEP_COLUMNS = (
    "run_id, vertex_id, tenant_id, status, deps_pending, attempts, auto_retries, "
    "tenant_item_taken, output IS NULL, error IS NULL, not_before, claim_token, "
    "lease_expires_at, created_at, started_at, ended_at, children_total, children_succeeded, "
    "children_failed, children_cancelled, wait_reason"
)
LOG_COLUMNS = "run_id, vertex_id, at, level, message, data IS NULL, data::text"
INPUTS: list[Any] = [{"n": 1, "nested": {"list": [1, "two", None]}}, None, [], "text", 0, 2.5]


async def _rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    async with store._engines.read.connect() as conn:
        return [tuple(row) for row in (await conn.execute(text(sql))).all()]


def _constant(value: bool) -> property:
    def get(_dialect: Dialect) -> bool:
        return value

    return property(get)


async def _on_both_paths(url: str, create: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    outcomes = []
    for at_once in (True, False):
        monkeypatch.setattr(Dialect, "writes_several_tables_at_once", _constant(at_once))
        store = await Store.open(url, FakeClock())
        try:
            async with store._engines.write.begin() as conn:
                await conn.execute(
                    text("TRUNCATE run_log, step, run, tenant_quota RESTART IDENTITY CASCADE")
                )
            outcomes.append(await create(store))
        finally:
            await store.close()
    return outcomes


async def _every_kind_of_run(store: Store) -> Any:
    version = await store.publish(DIAMOND)
    await store.set_quota("tenant-0", 1)  # its runs are not counted in it (count_in_quota)
    for n, run_input in enumerate(INPUTS):
        await store.create_run(
            version,
            run_input,
            tenant_id=f"tenant-{n % 2}",
            timeout_tier="gateway" if n % 2 else "process",
            run_id=f"00000000-0000-0000-0000-00000000000{n}",
            idempotency_key=f"key-{n}" if n % 3 else None,
            request_hash=f"{n:064d}" if n % 3 else None,
            route="serving" if n else None,
            count_in_quota=bool(n % 2),
            restarted_from="00000000-0000-0000-0000-000000000000" if n == 4 else None,
            created_by=f"key:{n:012d}" if n % 2 else None,
        )
    return (
        await _rows(store, f"SELECT {RUN_COLUMNS} FROM run ORDER BY id"),
        await _rows(store, f"SELECT {STEP_COLUMNS} FROM step ORDER BY run_id, vertex_id"),
        await _rows(store, f"SELECT {LOG_COLUMNS} FROM run_log ORDER BY run_id, id"),
        await store.list_quotas(),
    )


async def test_every_kind_of_run_is_created_alike(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_once, in_a_transaction = await _on_both_paths(
        pg_database_url, _every_kind_of_run, monkeypatch
    )
    assert at_once == in_a_transaction
    created, steps, logs, quotas = at_once
    assert (len(created), len(steps), len(logs)) == (len(INPUTS), 4 * len(INPUTS), len(INPUTS))
    assert quotas == [("tenant-0", 1, 0)]
    # Who submitted: one more value of the run's INSERT, and in its first log line's data.
    creators = [f"key:{n:012d}" if n % 2 else None for n in range(len(INPUTS))]
    assert [row[-1] for row in created] == creators
    assert [json.loads(row[-1]) for row in logs] == [
        None if c is None else {"actor": c} for c in creators
    ]


async def _quota_and_keys(store: Store) -> Any:
    version = await store.publish(DIAMOND)
    await store.set_quota("acme", 3)
    created = await asyncio.gather(
        *(
            store.create_run(version, {"n": n}, tenant_id="acme", count_in_quota=True)
            for n in range(8)
        ),
        return_exceptions=True,
    )
    refused = sum(isinstance(outcome, QuotaExhausted) for outcome in created)
    # A quota lowered below what was used refuses too, and a refusal uses nothing.
    await store.set_quota("acme", 1)
    with pytest.raises(QuotaExhausted):
        await store.create_run(version, {}, tenant_id="acme", count_in_quota=True)
    quota = await store.get_quota("acme")
    # A taken idempotency key answers the run holding it and writes nothing, quota included.
    await store.set_quota("keyed", 5)
    first, made = await store.create_run(
        version, {"k": 1}, tenant_id="keyed", idempotency_key="k", count_in_quota=True
    )
    again, made_again = await store.create_run(
        version, {"k": 2}, tenant_id="keyed", idempotency_key="k", count_in_quota=True
    )
    counts = await _rows(
        store, "SELECT tenant_id, count(*) FROM run GROUP BY tenant_id ORDER BY tenant_id"
    )
    logs = await _rows(store, "SELECT count(*) FROM run_log")
    return (
        refused,
        quota,
        (made, made_again, again.id == first.id, again.input),
        await store.get_quota("keyed"),
        counts,
        logs,
    )


async def test_quotas_and_idempotency_keys_refuse_alike(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_once, in_a_transaction = await _on_both_paths(pg_database_url, _quota_and_keys, monkeypatch)
    assert at_once == in_a_transaction
    assert at_once == (
        5,
        (1, 3),
        (True, False, True, {"k": 1}),
        (5, 1),
        [("acme", 3), ("keyed", 1)],
        [(4,)],
    )


async def test_a_quota_deleted_while_a_submission_waits_for_it_leaves_it_unlimited(
    pg_database_url: str,
) -> None:
    """The submission's statement waits for the quota row an operator is deleting; once the
    delete commits, the tenant is unlimited and the run is created, as in a transaction."""
    store = await Store.open(pg_database_url, FakeClock())
    try:
        version = await store.publish(DIAMOND)
        await store.set_quota("acme", 5)
        async with store._engines.write.connect() as deleting:
            await deleting.execute(text("DELETE FROM tenant_quota WHERE tenant_id = 'acme'"))
            creating = asyncio.create_task(
                store.create_run(version, {}, tenant_id="acme", count_in_quota=True)
            )
            for _ in range(500):  # until the submission waits for the row lock (at most 5 s)
                waiting = await _rows(
                    store,
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                if waiting[0][0] or creating.done():
                    break
                await asyncio.sleep(0.01)
            assert waiting[0][0] == 1
            await deleting.commit()
        run, created = await asyncio.wait_for(creating, 10)
        assert created and run.tenant_id == "acme"
        assert await store.get_quota("acme") is None
    finally:
        await store.close()
