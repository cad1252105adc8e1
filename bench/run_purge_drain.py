"""How fast run retention drains a backlog of small root runs on PostgreSQL.

    SB_BENCH_REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python -m bench.run_purge_drain \
        --runs 60000 [--workers 1]

A fresh database gets `--runs` root runs that ended a year ago, each with two steps and a log
line (a small workflow's rows), filled by INSERT … SELECT; then `--workers` concurrent
retention passes (`run_retention.purge_pass`, what each worker runs once a minute) are made
until one deletes nothing. Each pass prints what it deleted and how long it took. A worker
makes a pass a minute, so the drain rate per worker is a pass's runs when it ends before the
minute does, else what the database deletes in a minute (runs/s x 60).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from sqlalchemy import text

from bench.common import REDIS_URL, make_backend
from engine.execution import run_retention
from engine.runtime import Runtime
from engine.settings import Settings

RETENTION_S = 30 * 86400.0
YEAR_S = 365 * 86400.0

_RUNS = """
INSERT INTO run (id, workflow_name, workflow_version, definition_hash, tenant_id, status,
                 timeout_tier, steps_remaining, created_at, started_at, ended_at, root_run_id)
SELECT u.id, 'bench-purge', 1, repeat('0', 64), 'default', 'SUCCEEDED', 'standard', 0,
       :at + u.g * 0.001, :at + u.g * 0.001, :at + u.g * 0.001 + 1, u.id
FROM (SELECT g, md5(g::text || :salt)::uuid::text AS id FROM generate_series(1, :n) g) u
"""
_STEPS = """
INSERT INTO step (run_id, vertex_id, tenant_id, status, deps_pending, attempts, auto_retries,
                  not_before, created_at)
SELECT r.id, v.v, 'default', 'SUCCEEDED', 0, 1, 0, r.created_at, r.created_at
FROM run r CROSS JOIN (VALUES ('a'), ('b')) AS v(v) WHERE r.workflow_name = 'bench-purge'
"""
_LOGS = """
INSERT INTO run_log (run_id, at, level, message)
SELECT id, ended_at, 'info', 'done' FROM run WHERE workflow_name = 'bench-purge'
"""


async def plant(runtime: Runtime, n: int, at: float) -> None:
    """`n` ended root runs with two steps and a log line each, then ANALYZE."""
    async with runtime.store._engines.write.begin() as conn:
        await conn.execute(text(_RUNS), {"at": at, "n": n, "salt": str(time.time())})
        await conn.execute(text(_STEPS))
        await conn.execute(text(_LOGS))
    async with runtime.store._engines.write.connect() as plain:
        vacuuming = await plain.execution_options(isolation_level="AUTOCOMMIT")
        await vacuuming.execute(text("VACUUM ANALYZE run, step, run_log"))


async def one_pass(runtime: Runtime, worker: int) -> tuple[int, float]:
    start = time.perf_counter()
    purged = await run_retention.purge_pass(runtime.store, RETENTION_S)
    elapsed = time.perf_counter() - start
    print(
        f"  worker {worker}: {purged.runs:,} runs, {purged.steps:,} steps, "
        f"{purged.log_lines:,} log lines in {elapsed:.2f} s"
        f" ({purged.runs / elapsed:,.0f} runs/s)"
    )
    return purged.runs, elapsed


async def main(runs: int, workers: int) -> None:
    backend = await make_backend("postgres")
    settings = Settings.model_validate(
        {"database_url": backend.database_url, "redis_url": REDIS_URL}
    )
    runtime = await Runtime.open(settings)
    try:
        await plant(runtime, runs, runtime.store._clock.now() - YEAR_S)
        print(f"{runs:,} ended root runs planted; passes of {workers} worker(s) at once:")
        total, start, number = 0, time.perf_counter(), 0
        while True:
            number += 1
            print(f"pass {number}")
            done = await asyncio.gather(*(one_pass(runtime, w) for w in range(workers)))
            deleted = sum(d for d, _ in done)
            total += deleted
            if not deleted:
                break
        elapsed = time.perf_counter() - start
        print(
            f"drained {total:,} runs in {number - 1} pass(es) of {workers} worker(s), "
            f"{elapsed:.1f} s of passes: {total / elapsed:,.0f} runs/s"
        )
    finally:
        await runtime.close()
        await backend.drop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60_000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.workers))
