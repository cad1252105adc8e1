"""Claims against the number of tenants and against the size of the step table (issue 17).

    python -m bench.claims                # the default sizes below, a few minutes
    python -m bench.claims --quick        # a tiny smoke run (seconds)
    python -m bench.claims --skip-big     # measurement A only
    python -m bench.claims --skip-tenants # measurement B only
    python -m bench.claims --skip-tenants --history insert  # B, finished steps never READY

What is timed is the engine's own claim: `Store.claim(limit, lease_s)` (`engine.store.queue`
→ `engine.store.claims`: the tenant skip scan, the tenants' shares (one UPDATE … FOR UPDATE
SKIP LOCKED on PostgreSQL), the fill, the read of the claimed steps' runs), on a `Store` opened
on a fresh PostgreSQL database (127.0.0.1, created by this script and migrated by `Store.open`,
dropped at the end). Redis is not used. Each claimer is its own `Store` (its own pool and
tenant turn, as each worker process has), all in this process's one event loop: with 2
claimers the Python side of both shares one thread.

Rows are made in SQL, not through `create_run`: one `INSERT … SELECT FROM generate_series`
into `run` and one into `step` (see `FILL_RUNS`, `FILL_STEPS`). A READY step is the only step
(vertex `call`, a root GATEWAY of a one-vertex published workflow, so a claim reads no
outputs) of its own RUNNING run, as a fan-out's children are; step i belongs to tenant
`tenant-<i mod T>` (zero-padded to 4 digits, so id order is number order) and is created
0.1 ms after step i-1, so the tenants' steps are interleaved in age.

A. Tenants (`--tenants 1,10,100,1000`, `--steps 20000`, `--claimers 1,2`): for each tenant
   count and each number of concurrent claimers the tables are emptied (TRUNCATE), `--steps`
   READY steps are inserted, `VACUUM ANALYZE step, run` is run, and the claimers call
   `claim(--claim-limit 64, 300 s)` until a claim returns nothing, `--max-s` passes or
   `--max-claims` claims are made. Reported: claims/s, steps claimed/s, claim latency
   p50/p99/max (empty claims excluded), SQL statements per claim (counted by a SQLAlchemy
   cursor event), and fairness: how many tenants the first claim served and when each tenant
   got its first step (p50/max over tenants, and for the tenants ranked 1, 64, 65 and last by
   id: the skip scan lists at most `MAX_TENANTS_PER_CLAIM` tenants, the lowest ids first).

B. Table size (`--big-rows 1000000`, `--ready 10000`, `--big-tenants 10`): a big table of
   `--big-rows` steps of which `--ready` are READY, against a small one of only the `--ready`
   READY steps. In the big one the finished steps come first, as history would leave them:
   inserted READY (in 1,000-step SUCCEEDED runs), then set SUCCEEDED by one UPDATE (each such
   row leaves a dead version and dead entries in the READY partial indexes, as every claimed
   and finished step does; `--history insert`: inserted SUCCEEDED instead, never in those
   indexes), then the READY steps are inserted. Then three phases on the same
   rows, each timing `--batches` claims of 64 by one claimer:
   `loaded` (no ANALYZE, no VACUUM: this machine runs with autovacuum = off),
   `analyzed` (`Store.analyze()`: the ANALYZE the engine itself runs as its tables grow),
   `vacuumed` (`VACUUM ANALYZE step, run`, what an operator or autovacuum would do).
   After each phase's claims, `EXPLAIN (ANALYZE, BUFFERS)` of the engine's claim statements
   (the fill statement, one tenant's share, the tenant skip scan; compiled from
   `engine.store.claims`, run in a transaction that is rolled back) and the sizes of the
   READY partial indexes. The run table of the big database is not at scale: the finished
   steps share 1,000-step runs (a claim reads runs only by primary key, for its claimed rows).

Prints one JSON line per measurement (`"measurement": "tenants" | "table" | "plan"`), the fill
lines, and a `summary` line; every line carries the load average. The whole plans (not only
their key lines) are appended to bench/out/claims-plans.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import Dialect

from bench.api_stack import code_version, load_average
from bench.common import OUT, PG_ADMIN, percentile
from engine.store import Store
from engine.store import claims as engine_claims
from engine.store.records import VersionRecord
from schemas.clock import SystemClock
from schemas.definitions import Workflow

LEASE_S = 300.0
"""Long enough that no claim of a measurement expires while it runs."""
WORKFLOW = Workflow.model_validate(
    {
        "name": "bench-claims",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/call"}}},
    }
)

FILL_RUNS = """
INSERT INTO run (
    id, workflow_name, workflow_version, definition_hash, tenant_id, status, timeout_tier,
    input, steps_remaining, created_at, started_at, ended_at
)
SELECT
    md5($1::text || r)::uuid::text, $2, $3, $4,
    'tenant-' || lpad((r % $5::int)::text, 4, '0'),
    $6::text, 'process', json_build_object('n', r),
    CASE WHEN $6::text = 'RUNNING' THEN 1 ELSE 0 END,
    $7::float8 + r * $8::int * 0.0001, $7::float8 + r * $8::int * 0.0001,
    CASE WHEN $6::text <> 'RUNNING' THEN $7::float8 + (r + 1) * $8::int * 0.0001 END
FROM generate_series(0, $9::int - 1) AS r
"""
"""Parameters: run-id prefix, workflow name, version, hash, tenants, run status, first
created_at, steps per run, run count."""

FILL_STEPS = """
INSERT INTO step (
    run_id, vertex_id, tenant_id, status, deps_pending, attempts, auto_retries,
    not_before, created_at
)
SELECT
    md5($1::text || (i / $2::int))::uuid::text,
    CASE WHEN $2::int = 1 THEN 'call' ELSE 'call-' || i % $2::int END,
    'tenant-' || lpad(((i / $2::int) % $3::int)::text, 4, '0'),
    $6::text, 0, 0, 0,
    $4::float8 + i * 0.0001, $4::float8 + i * 0.0001
FROM generate_series(0, $5::int - 1) AS i
"""
"""Parameters: run-id prefix, steps per run, tenants, first created_at, step count, status. Step i
belongs to run i / steps-per-run, whose tenant is (run number mod tenants)."""

FINISH = """
UPDATE step SET status = 'SUCCEEDED', attempts = 1, started_at = created_at + 0.01,
    ended_at = created_at + 0.05, output = '{"ok": true}'::json
WHERE status = 'READY'
"""

INDEX_SIZES = """
SELECT c.relname, pg_relation_size(c.oid) AS bytes
FROM pg_class c
WHERE c.relname IN ('step', 'ix_step_ready_by_age', 'ix_step_ready_tenant', 'step_pkey')
"""


# ── the database ────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Database:
    name: str

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{self.name}"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:5432/{self.name}"


@asynccontextmanager
async def fresh_database(prefix: str) -> AsyncIterator[Database]:
    """An empty database, dropped on exit. (Not `bench.common.make_backend` or
    `bench.api_stack.fresh_database`: both flush a shared Redis database this benchmark has
    no use for, and other benchmarks may be using it.)"""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield Database(name)
    finally:
        conn = await asyncpg.connect(PG_ADMIN)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def fill_ready(
    conn: asyncpg.Connection, version: VersionRecord, steps: int, tenants: int, start: float
) -> None:
    """`steps` READY steps, each the one step of its own RUNNING run."""
    prefix = f"ready-{start}-"
    await conn.execute(
        FILL_RUNS, prefix, version.name, version.version, version.definition_hash,
        tenants, "RUNNING", start, 1, steps,
    )  # fmt: skip
    await conn.execute(FILL_STEPS, prefix, 1, tenants, start, steps, "READY")


async def fill_finished(
    conn: asyncpg.Connection,
    version: VersionRecord,
    steps: int,
    tenants: int,
    start: float,
    *,
    history: str,
) -> None:
    """`steps` SUCCEEDED steps in SUCCEEDED runs of 1,000 steps: inserted READY, then
    finished by one UPDATE (`history` "update", see the module docstring), or inserted
    SUCCEEDED ("insert": never in the READY indexes, no dead rows)."""
    per_run = 1000
    prefix = f"done-{start}-"
    await conn.execute(
        FILL_RUNS, prefix, version.name, version.version, version.definition_hash,
        tenants, "SUCCEEDED", start, per_run, math.ceil(steps / per_run),
    )  # fmt: skip
    if history == "insert":
        await conn.execute(FILL_STEPS, prefix, per_run, tenants, start, steps, "SUCCEEDED")
        return
    await conn.execute(FILL_STEPS, prefix, per_run, tenants, start, steps, "READY")
    await conn.execute(FINISH)


# ── timing claims ───────────────────────────────────────────────────────────────────────────


@dataclass
class Claims:
    """What the claimers of one measurement saw."""

    start: float = field(default_factory=time.perf_counter)
    latencies_ms: list[float] = field(default_factory=list)
    claimed: int = 0
    empty: int = 0
    first_served_s: dict[str, float] = field(default_factory=dict)
    first_batch_tenants: int | None = None
    end: float = 0.0

    def record(self, began: float, ended: float, tenants: list[str]) -> None:
        if not tenants:
            self.empty += 1
            return
        self.latencies_ms.append((ended - began) * 1000)
        self.claimed += len(tenants)
        if self.first_batch_tenants is None:
            self.first_batch_tenants = len(set(tenants))
        for tenant in tenants:
            self.first_served_s.setdefault(tenant, ended - self.start)

    def summary(self) -> dict[str, Any]:
        elapsed = self.end - self.start
        times = self.latencies_ms
        return {
            "claims": len(times),
            "empty_claims": self.empty,
            "claimed": self.claimed,
            "elapsed_s": round(elapsed, 3),
            "claims_per_s": round(len(times) / elapsed, 1) if elapsed else None,
            "steps_per_s": round(self.claimed / elapsed, 1) if elapsed else None,
            "p50_ms": round(percentile(times, 50), 2),
            "p99_ms": round(percentile(times, 99), 2),
            "max_ms": round(max(times), 2) if times else None,
            "first_ms": round(times[0], 2) if times else None,
        }


class StatementCounter:
    """Counts the SQL statements a store's engine sends (a claim is several)."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        # The bench needs the engine to count on; `Store` does not expose it otherwise.
        event.listen(store._engines.write.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1


async def claim_loop(
    store: Store, seen: Claims, limit: int, max_claims: int, deadline: float
) -> None:
    """One claimer: claim until a claim returns nothing, or the bounds are reached."""
    for _ in range(max_claims):
        if time.perf_counter() > deadline:
            return
        began = time.perf_counter()
        claimed = await store.claim(limit, LEASE_S)
        seen.record(began, time.perf_counter(), [c.tenant_id for c in claimed])
        if not claimed:
            return


def tenant_name(i: int) -> str:
    return f"tenant-{i:04d}"


def fairness(seen: Claims, tenants: int) -> dict[str, Any]:
    served = seen.first_served_s
    waits = list(served.values())
    ranks = sorted({1, 64, 65, tenants} & set(range(1, tenants + 1)))
    return {
        "tenants_in_first_claim": seen.first_batch_tenants,
        "tenants_served": len(served),
        "first_served_s_p50": round(percentile(waits, 50), 3),
        "first_served_s_max": round(max(waits), 3) if waits else None,
        "first_served_s_by_rank": {
            str(rank): round(served[tenant_name(rank - 1)], 3)
            if tenant_name(rank - 1) in served
            else None
            for rank in ranks
        },
    }


# ── A: tenants ──────────────────────────────────────────────────────────────────────────────


async def measure_tenants(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with fresh_database("sb_claims_tenants") as db:
        stores = [await Store.open(db.url, SystemClock(), migrate=i == 0) for i in range(2)]
        conn = await asyncpg.connect(db.dsn)
        try:
            version = await stores[0].publish(WORKFLOW)
            for tenants in args.tenants:
                for claimers in args.claimers:
                    await conn.execute("TRUNCATE step, run")
                    begin = time.perf_counter()
                    await fill_ready(conn, version, args.steps, tenants, time.time() - 3600)
                    await conn.execute("VACUUM ANALYZE step, run")
                    fill_s = time.perf_counter() - begin
                    row = await tenants_case(args, stores[:claimers], tenants, claimers)
                    row["fill_s"] = round(fill_s, 2)
                    row["ready_left"] = await conn.fetchval(
                        "SELECT count(*) FROM step WHERE status = 'READY'"
                    )
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            await conn.close()
            for store in stores:
                await store.close()
    return rows


def forget_tenants(store: Store) -> None:
    """A fresh tenant list for the next claim, as a worker that just started would have."""
    store._tenant_ring = engine_claims.TenantRing()


async def tenants_case(
    args: argparse.Namespace, stores: list[Store], tenants: int, claimers: int
) -> dict[str, Any]:
    for store in stores:
        forget_tenants(store)
    counters = [StatementCounter(store) for store in stores]
    load_before = load_average()
    seen = Claims()
    deadline = seen.start + args.max_s
    await asyncio.gather(
        *(claim_loop(s, seen, args.claim_limit, args.max_claims, deadline) for s in stores)
    )
    seen.end = time.perf_counter()
    for store, counter in zip(stores, counters, strict=True):
        event.remove(store._engines.write.sync_engine, "before_cursor_execute", counter._seen)
    calls = len(seen.latencies_ms) + seen.empty
    return {
        "measurement": "tenants",
        "tenants": tenants,
        "claimers": claimers,
        "steps": args.steps,
        "claim_limit": args.claim_limit,
        **seen.summary(),
        "statements_per_claim": round(sum(c.count for c in counters) / max(1, calls), 1),
        **fairness(seen, tenants),
        "load_before": load_before,
        "load_after": load_average(),
    }


# ── B: table size ───────────────────────────────────────────────────────────────────────────


async def measure_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for table, total in (("small", args.ready), ("big", args.big_rows)):
        async with fresh_database(f"sb_claims_{table}") as db:
            store = await Store.open(db.url, SystemClock())
            conn = await asyncpg.connect(db.dsn)
            try:
                version = await store.publish(WORKFLOW)
                begin = time.perf_counter()
                start = time.time() - 86400
                finished = total - args.ready
                if finished > 0:
                    await fill_finished(
                        conn, version, finished, args.big_tenants, start, history=args.history
                    )
                await fill_ready(conn, version, args.ready, args.big_tenants, start + 43200)
                fill = {
                    "fill": table,
                    "rows": total,
                    "finished": max(0, finished),
                    "ready": args.ready,
                    "tenants": args.big_tenants,
                    "history": args.history,
                    "fill_s": round(time.perf_counter() - begin, 1),
                    "load": load_average(),
                }
                print(json.dumps(fill), flush=True)
                for phase in ("loaded", "analyzed", "vacuumed"):
                    if phase == "analyzed":
                        await store.analyze()
                    elif phase == "vacuumed":
                        await conn.execute("VACUUM ANALYZE step, run")
                    row = await table_phase(
                        args, store, conn, table=table, total=total, phase=phase
                    )
                    rows.append(row)
            finally:
                await conn.close()
                await store.close()
    return rows


async def table_phase(
    args: argparse.Namespace,
    store: Store,
    conn: asyncpg.Connection,
    *,
    table: str,
    total: int,
    phase: str,
) -> dict[str, Any]:
    forget_tenants(store)
    load_before = load_average()
    seen = Claims()
    await claim_loop(store, seen, args.claim_limit, args.batches, seen.start + args.max_s)
    seen.end = time.perf_counter()
    row = {
        "measurement": "table",
        "table": table,
        "rows": total,
        "ready": args.ready,
        "phase": phase,
        **seen.summary(),
        "sizes_kb": {r["relname"]: r["bytes"] // 1024 for r in await conn.fetch(INDEX_SIZES)},
        "load_before": load_before,
        "load_after": load_average(),
    }
    print(json.dumps(row), flush=True)
    plans = await explain(conn, args.claim_limit, store._engines.write.dialect)
    keys = {name: plan["key"] for name, plan in plans.items()}
    print(json.dumps({"measurement": "plan", "table": table, "phase": phase, **keys}), flush=True)
    OUT.mkdir(exist_ok=True)
    with (OUT / "claims-plans.jsonl").open("a") as full:
        full.write(json.dumps({"table": table, "phase": phase, "utc": utc_now(), **plans}) + "\n")
    row["plans"] = keys
    return row


def bound(statement: Any, values: dict[str, Any], dialect: Dialect) -> tuple[str, list[Any]]:
    """The SQL asyncpg receives for `statement` with `values`, and its positional parameters
    (a custom plan, as the engine's own executions get)."""
    state = statement.compile(dialect=dialect).construct_expanded_state(values)
    return state.statement, list(state.positional_parameters)


async def explain(conn: asyncpg.Connection, limit: int, dialect: Dialect) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of the engine's claim statements, rolled back."""
    tenants = [
        row[0]
        for row in await conn.fetch(
            "SELECT DISTINCT tenant_id FROM step WHERE status = 'READY' ORDER BY 1 LIMIT $1",
            engine_claims.MAX_TENANTS_PER_CLAIM,
        )
    ]
    now = time.time()
    values = engine_claims.claim_params(now, LEASE_S, "x:", limit)
    statements = {
        "fill": bound(engine_claims.FILL, values, dialect),
        "tenant_shares": bound(
            engine_claims.SHARES, values | {"b_limit": 1, "b_tenants": tenants}, dialect
        ),
        "tenant_scan": (
            str(engine_claims.TENANTS_WITH_READY_STEPS)
            .replace(":max_tenants", str(engine_claims.MAX_TENANTS_PER_CLAIM))
            .replace(":after", "NULL"),
            [],
        ),
    }
    plans: dict[str, Any] = {}
    for name, (sql, params) in statements.items():
        transaction = conn.transaction()
        await transaction.start()
        try:
            explained = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *params)
            lines = [r[0] for r in explained]
        finally:
            await transaction.rollback()
        plans[name] = {"key": key_lines(lines), "plan": lines}
    return plans


KEY_MARKS = ("Scan", "Sort", "Join", "Nested Loop", "Aggregate", "Heap Fetches", "Removed")


def key_lines(lines: list[str]) -> list[str]:
    """The plan's key lines, costs left out: its scans (which index, rows), sorts, joins, heap
    fetches and rows filtered out, the statement's buffers and its execution time."""
    keep = [
        re.sub(r"\s*\(cost=[^)]*\)", "", line).strip()
        for line in lines
        if any(mark in line for mark in KEY_MARKS)
    ]
    buffers = next((line.strip() for line in lines if "Buffers:" in line), None)
    timing = [line.strip() for line in lines if "Execution Time" in line]
    return [*keep, *([buffers] if buffers else []), *timing]


# ── the command ─────────────────────────────────────────────────────────────────────────────


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def int_list(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int_list, default=[1, 10, 100, 1000])
    parser.add_argument("--claimers", type=int_list, default=[1, 2])
    parser.add_argument("--steps", type=int, default=20_000, help="READY steps per tenant case")
    parser.add_argument("--claim-limit", type=int, default=64)
    parser.add_argument("--max-s", type=float, default=30.0, help="bound on one case's claims")
    parser.add_argument("--max-claims", type=int, default=5_000, help="per claimer and case")
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=10_000)
    parser.add_argument("--big-tenants", type=int, default=10)
    parser.add_argument(
        "--history",
        choices=("update", "insert"),
        default="update",
        help="big table: finished steps set SUCCEEDED by an UPDATE, or inserted SUCCEEDED",
    )
    parser.add_argument("--batches", type=int, default=40, help="claims timed per phase")
    parser.add_argument("--skip-tenants", action="store_true")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.tenants = [1, 10, 100]
        args.steps, args.big_rows, args.ready, args.batches = 1_000, 20_000, 1_000, 5
        args.max_s = 10.0
    if args.batches * 3 * args.claim_limit > args.ready:
        parser.error("--ready must cover 3 phases of --batches claims of --claim-limit")
    return args


async def amain(args: argparse.Namespace) -> None:
    print(
        json.dumps({"args": vars(args), "load": load_average(), "utc": utc_now()}),
        flush=True,
    )
    tenant_rows = [] if args.skip_tenants else await measure_tenants(args)
    table_rows = [] if args.skip_big else await measure_table(args)
    summary = {
        "summary": True,
        "tenants": [
            {
                k: r[k]
                for k in (
                    "tenants",
                    "claimers",
                    "claims_per_s",
                    "steps_per_s",
                    "p50_ms",
                    "p99_ms",
                    "statements_per_claim",
                    "first_served_s_max",
                )
            }
            for r in tenant_rows
        ],
        "table": [
            {k: r[k] for k in ("table", "phase", "p50_ms", "p99_ms", "max_ms", "first_ms")}
            for r in table_rows
        ],
        "commit": code_version(),
        "utc": utc_now(),
        "load": load_average(),
    }
    print(json.dumps(summary), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
