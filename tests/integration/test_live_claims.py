"""Live claims are found by primary key: a worker's renewals, give-backs and flushes read its
own claims, not every RUNNING step of the cluster (with 4,000 RUNNING steps a flush's lookup
went from 1.0 to 0.3 ms, at 16,000 from 2.8 to 0.3 ms: bench/RESULTS.md, 'Live claims by
primary key'). What they find is the store contract's (tests/integration/test_store_contract.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, text

from engine.settings import MAX_WORKER_CONCURRENCY
from engine.store import Store, claims, db, results
from engine.store.core import steps
from schemas.clock import FakeClock
from tests.conftest import Backend


def test_a_token_names_its_step() -> None:
    batch = claims.new_batch()
    assert claims.claimed_step_ids([f"{batch}17", f"{batch}4"]) == [17, 4]
    assert claims.claimed_step_ids(["", "no-separator", f"{batch}", f"{batch}x1", "1:2:3"]) == [3]
    assert claims.claimed_step_ids([f"{batch}²", f"{batch}{'9' * 19}", f"{batch}-1"]) == []


async def _explain(url: str, statement: Any, params: dict[str, Any]) -> str:
    engines = db.create_engines(url)
    try:
        async with engines.read.connect() as conn:
            compiled = statement.compile(dialect=conn.dialect)
            bound = compiled.construct_params(params)
            args = tuple(bound[name] for name in compiled.positiontup)
            rows = (await conn.exec_driver_sql(f"EXPLAIN {compiled}", args)).all()
    finally:
        await engines.dispose()
    return "\n".join(row[0] for row in rows)


async def test_postgresql_reads_live_claims_by_primary_key(pg_database_url: str) -> None:
    engines = db.create_engines(pg_database_url)
    try:
        await db.upgrade(engines)
        async with engines.write.begin() as conn:
            # A busy cluster: 20,000 steps, 4,000 of them RUNNING under other workers' claims.
            await conn.execute(
                text(
                    "INSERT INTO step (run_id, vertex_id, tenant_id, status, deps_pending,"
                    " attempts, auto_retries, created_at, not_before, claim_token,"
                    " lease_expires_at) SELECT 'r' || g, 'a', 't',"
                    " CASE WHEN g % 5 = 0 THEN 'RUNNING' ELSE 'SUCCEEDED' END, 0, 1, 0, g, g,"
                    " CASE WHEN g % 5 = 0 THEN 'other:' || g END, 1e12"
                    " FROM generate_series(1, 20000) AS g"
                )
            )
            await conn.execute(text("ANALYZE step"))
        statement = engines.dialect.statement(results._live_claims)
    finally:
        await engines.dispose()
    plan = await _explain(
        pg_database_url, statement, {"b_ids": [5, 10, 15], "b_tokens": ["x:5", "x:10", "x:15"]}
    )
    assert "step_pkey" in plan, plan
    assert "ix_step_running_lease" not in plan, plan


def running_step(batch: str, step_id: int, lease_expires_at: float) -> dict[str, Any]:
    """A step row RUNNING under the claim `batch` + its id (no run row: none is read here)."""
    return {
        "id": step_id,
        "run_id": f"r{step_id}",
        "vertex_id": "a",
        "tenant_id": "t",
        "status": "RUNNING",
        "deps_pending": 0,
        "attempts": 1,
        "auto_retries": 0,
        "created_at": 0.0,
        "not_before": 0.0,
        "claim_token": f"{batch}{step_id}",
        "lease_expires_at": lease_expires_at,
    }


async def test_a_worker_at_its_most_claims_renews_and_gives_them_back(backend: Backend) -> None:
    """A worker holds up to twice its concurrency in claims; at the highest concurrency
    allowed, every one of them is renewed, marked waiting and given back in one statement
    each, on both databases (two bound values per claim: the step's id and its token)."""
    most = 2 * MAX_WORKER_CONCURRENCY
    clock = FakeClock()
    store = await Store.open(backend.database_url, clock)
    try:
        batch = claims.new_batch()
        rows = [running_step(batch, i, clock.now() + 5) for i in range(1, most + 1)]
        async with store._engines.write.begin() as conn:
            await conn.execute(insert(steps), rows)
        tokens = [row["claim_token"] for row in rows]
        assert await store.renew(tokens, lease_s=60) == most
        await store.mark_admission_waits(dict.fromkeys(tokens, "api.example"), ())
        async with store._engines.read.connect() as conn:
            waiting = (
                await conn.execute(select(steps.c.id).where(steps.c.wait_reason.is_not(None)))
            ).all()
            leases = set((await conn.execute(select(steps.c.lease_expires_at))).scalars())
        assert (len(waiting), leases) == (most, {clock.now() + 60})
        assert await store.give_back(tokens) == most
    finally:
        await store.close()


async def test_the_admission_wait_marker_leaves_a_retry_wait_alone(backend: Backend) -> None:
    """The lease renewer marks the steps it saw waiting for a slot; one that got its slot,
    failed and started a retry wait since then keeps that wait."""
    clock = FakeClock()
    store = await Store.open(backend.database_url, clock)
    try:
        batch = claims.new_batch()
        rows = [
            running_step(batch, i, clock.now() + 30) | {"wait_reason": reason}
            for i, reason in ((1, None), (2, "retry_backoff"), (3, "admission_wait"))
        ]
        async with store._engines.write.begin() as conn:
            await conn.execute(insert(steps), rows)
        await store.mark_admission_waits({f"{batch}{i}": "api.example" for i in (1, 2, 3)}, ())
        async with store._engines.read.connect() as conn:
            query = select(steps.c.id, steps.c.wait_reason)
            reasons = {row.id: row.wait_reason for row in (await conn.execute(query)).all()}
    finally:
        await store.close()
    assert reasons == {1: "admission_wait", 2: "retry_backoff", 3: "admission_wait"}
