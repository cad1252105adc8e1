"""bench/durable_floor.py, the durable floor of issue 17, keeps the guarantees it claims to: its
figures are a ceiling only if it does the work SchemaBridge's fan-out must do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import asyncpg
import pytest

from bench import durable_floor, durable_floor_worker, fanout
from bench.durable_floor_sql import Statements, ddl, drop

SCHEMA = "durable_floor_test"


def test_the_floor_asks_the_mock_for_the_answer_the_fan_out_gets() -> None:
    assert durable_floor_worker.SMALL_ANSWER == fanout.SMALL_ANSWER


@pytest.fixture
async def conn(pg_database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg_database_url.replace("+asyncpg", ""))
    await connection.execute(ddl(SCHEMA))
    yield connection
    await connection.execute(drop(SCHEMA))
    await connection.close()


async def _spawn(conn: asyncpg.Connection, sql: Statements, count: int, token: int) -> str:
    bodies = [f'{{"id": {i}}}' for i in range(count)]
    return str(await conn.execute(sql.spawn_batch, 1, list(range(count)), bodies, token))


async def test_claims_results_and_the_merge_hold_their_guarantees(
    conn: asyncpg.Connection,
) -> None:
    sql = Statements(SCHEMA)
    await conn.execute(sql.submit, 1, 4, '{"items": [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3}]}')
    spawn = await conn.fetchrow(sql.claim_spawn, 10, 30.0)
    assert spawn is not None and spawn["id"] == 1
    assert await conn.fetchrow(sql.claim_spawn, 11, 30.0) is None  # its lease holds
    assert await _spawn(conn, sql, 4, 99) == "INSERT 0 0"  # a stale spawner inserts nothing
    assert await _spawn(conn, sql, 3, 10) == "INSERT 0 3"
    assert await _spawn(conn, sql, 4, 10) == "INSERT 0 1"  # a spawn repeated: the missing one

    first = await conn.fetchrow(sql.exchange, [], [], [], [], 20, -1.0, 2)  # lease already over
    assert first["keys"] == ["fl-1-0", "fl-1-1"]
    assert await conn.execute(sql.requeue_expired) == "UPDATE 2"
    again = await conn.fetchrow(sql.exchange, [], [], [], [], 21, 30.0, 10)
    assert len(again["ids"]) == 4 and set(first["ids"]) < set(again["ids"])

    ids = again["ids"]
    ok = ['{"ok": true}'] * 4
    # The expired claim's results come late: they match no row and count for nothing.
    late = await conn.fetchrow(
        sql.exchange, ids[:2], [20, 20], ["SUCCEEDED"] * 2, ok[:2], 22, 30.0, 0
    )
    assert late["recorded"] == 0 and late["closed"] is None
    part = await conn.fetchrow(
        sql.exchange, ids[:3], [21] * 3, ["SUCCEEDED"] * 3, ok[:3], 23, 30.0, 0
    )
    assert part["recorded"] == 3 and part["closed"] is None
    twice = await conn.fetchrow(sql.exchange, ids, [21] * 4, ["SUCCEEDED"] * 4, ok, 24, 30.0, 0)
    assert twice["recorded"] == 1 and twice["closed"] == [1]  # the first three are recorded

    assert await conn.fetchval(sql.merge, 1) == 1
    assert await conn.fetchval(sql.merge, 1) is None
    parent = await conn.fetchrow(sql.check_parent, 1)
    assert (parent["succeeded"], parent["merges"], parent["outputs"]) == (4, 1, 4)
    children = await conn.fetchrow(sql.check_children, 1)
    assert (children["rows"], children["keys"], children["max_attempts"]) == (4, 4, 2)


@pytest.mark.slow
async def test_a_small_fan_out_records_every_child_once(
    pg_database_url: str, redis_url: str
) -> None:
    opts, _ = durable_floor.parse_args(
        ["--children", "300", "--in-flight", "16", "--prefetch", "16", "--timeout", "60"]
    )
    dsn = pg_database_url.replace("+asyncpg", "")
    opts = replace(opts, dsn=dsn, redis_url=redis_url)
    result = await durable_floor.floor_run(opts, with_redis=True)
    assert result["problems"] == [] and result["correct"]
    assert result["requests"] == 300 and result["evals_per_child"] > 0
    assert sum(w["recorded"] for w in result["worker_counts"]) == 300
    assert sum(w.get("merges", 0) for w in result["worker_counts"]) == 1
