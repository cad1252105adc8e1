"""What a deployment's check costs as its window grows, and what routing adds to a submission.

    python -m bench.deploy_counts --backend postgresql --window 100000 1000000 --noise 500000
    python -m bench.deploy_counts --backend sqlite --window 100000

For each window size N, a fresh database (PostgreSQL: created and dropped here; SQLite: a
file in a temporary directory) is migrated and filled by one INSERT … SELECT: N root runs of
workflow `orders` created over the last hour — one in ten routed to the candidate (v2), the
rest to the serving version (v1); statuses by a hash of the row: 93 % SUCCEEDED, 5 % FAILED,
2 % RUNNING — plus `--noise` runs of other workflows in the same hour. Then:

* `counts` — `Store.deployment_counts` of a RUNNING deployment whose window holds all N runs,
  `--repeat` times, wall ms p50/p99, two ways: `judged` (each version's latest
  `JUDGED_RUNS`, what every stage check and `/metrics` scrape reads: bounded) and `exact`
  (every run of the window, what a deployment's view reads: two whole range reads of the
  partial index `ix_run_roots_workflow_version_created`);
* `plan` (PostgreSQL) — EXPLAIN (ANALYZE, BUFFERS) of the candidate's count, to show the index
  range it reads;
* `routing` — the submission's routing read (`Store.serving`, one primary-key row) against the
  read it replaced (`Store.get_version(name)`: the latest version, by an ORDER BY … LIMIT 1),
  `--lookups` of each, interleaved: µs of wall and of this process's CPU per read.

Coordination is the embedded fakeredis (nothing here uses Redis). Prints one JSON line per
measurement and the machine's load average beside each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import text

from bench.common import PG_ADMIN, percentile
from engine.runtime import Runtime
from engine.settings import Settings
from engine.store.records import DeploymentRecord
from vertices.deploy import JUDGED_RUNS

WINDOW_S = 3600.0

FILL_PG = """
INSERT INTO run (id, workflow_name, workflow_version, definition_hash, tenant_id, status,
    timeout_tier, steps_remaining, created_at, started_at, root_run_id, route)
SELECT md5('run' || i)::uuid::text,
    CASE WHEN i < $1 THEN 'orders' ELSE 'other-' || i % 7 END,
    CASE WHEN i < $1 AND i % 10 = 0 THEN 2 ELSE 1 END,
    'bench', 'tenant-' || i % 20,
    CASE WHEN (i::bigint * 7919) % 100 < 93 THEN 'SUCCEEDED'
         WHEN (i::bigint * 7919) % 100 < 98 THEN 'FAILED' ELSE 'RUNNING' END,
    'process', 0, $3::float8 + i * $4::float8, $3::float8 + i * $4::float8,
    md5('run' || i)::uuid::text,
    CASE WHEN i < $1 AND i % 10 = 0 THEN 'candidate' ELSE 'serving' END
FROM generate_series(0, $1::int + $2::int - 1) AS i
"""
"""Parameters: the window's runs, the noise runs, the first created_at, seconds between."""

FILL_SQLITE = """
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < :total)
INSERT INTO run (id, workflow_name, workflow_version, definition_hash, tenant_id, status,
    timeout_tier, steps_remaining, created_at, started_at, root_run_id, route)
SELECT printf('%036d', i),
    CASE WHEN i < :window THEN 'orders' ELSE 'other-' || (i % 7) END,
    CASE WHEN i < :window AND i % 10 = 0 THEN 2 ELSE 1 END,
    'bench', 'tenant-' || (i % 20),
    CASE WHEN (i * 7919) % 100 < 93 THEN 'SUCCEEDED'
         WHEN (i * 7919) % 100 < 98 THEN 'FAILED' ELSE 'RUNNING' END,
    'process', 0, :start + i * :step, :start + i * :step, printf('%036d', i),
    CASE WHEN i < :window AND i % 10 = 0 THEN 'candidate' ELSE 'serving' END
FROM seq
"""

EXPLAIN = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT status, count(*) FROM run
WHERE workflow_name = 'orders' AND workflow_version = 2 AND parent_run_id IS NULL
  AND created_at >= $1 AND route = 'candidate'
GROUP BY status
"""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@contextlib.asynccontextmanager
async def database(backend: str) -> AsyncIterator[str]:
    """A fresh database's SQLAlchemy URL, removed on exit."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite+aiosqlite:///{Path(directory) / 'bench.db'}"
        return
    name = f"sb_deploycounts_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        conn = await asyncpg.connect(PG_ADMIN)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def fill(runtime: Runtime, url: str, window: int, noise: int, start: float) -> float:
    """The window's and the noise's runs in one statement; seconds taken (ANALYZE included)."""
    step = WINDOW_S / (window + noise)
    begin = time.perf_counter()
    if url.startswith("postgresql"):
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await conn.execute(FILL_PG, window, noise, start, step)
            await conn.execute("ANALYZE run")
        finally:
            await conn.close()
    else:
        engine = runtime.store._engines.write  # the bench fills the table it measures
        async with engine.begin() as conn:
            values = {"total": window + noise, "window": window, "start": start, "step": step}
            await conn.execute(text(FILL_SQLITE), values)
        async with engine.connect() as conn:
            await conn.execute(text("ANALYZE"))
    return time.perf_counter() - begin


def deployment(start: float) -> DeploymentRecord:
    """A RUNNING deployment of `orders` v2 over v1 whose window starts at `start`."""
    return DeploymentRecord(
        id=str(uuid.uuid4()),
        workflow_name="orders",
        serving_version=1,
        candidate_version=2,
        status="RUNNING",
        stages=[{"weight": 10, "minRuns": 0, "minDurationSeconds": 0}],
        rollback={"maxFailureRatio": 0.05, "marginOverServing": None, "minFinishedRuns": 0},
        check_interval_s=5.0,
        stage_index=0,
        stage_started_at=start + WINDOW_S / 2,
        run_id=str(uuid.uuid4()),
        created_at=start,
        created_by="bench",
        ended_at=None,
        outcome=None,
        timeline=[],
    )


async def measure_counts(
    runtime: Runtime, record: DeploymentRecord, repeat: int, recent: int | None
) -> dict[str, Any]:
    times = []
    counts = None
    for _ in range(repeat):
        begin = time.perf_counter()
        counts = await runtime.store.deployment_counts(record, recent=recent)
        times.append((time.perf_counter() - begin) * 1000)
    assert counts is not None
    return {
        "p50_ms": round(percentile(times, 50), 2),
        "p99_ms": round(percentile(times, 99), 2),
        "candidate_runs": counts.candidate.runs,
        "serving_runs": counts.serving.runs,
        "serving_failure_ratio": counts.serving.failure_ratio,
    }


async def plan(url: str, start: float) -> dict[str, Any]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        explained = json.loads(await conn.fetchval(EXPLAIN, start))[0]
    finally:
        await conn.close()
    nodes = []
    stack = [explained["Plan"]]
    while stack:
        node = stack.pop()
        nodes.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
        stack.extend(node.get("Plans", []))
    return {"nodes": nodes, "execution_ms": explained["Execution Time"]}


async def measure_routing(runtime: Runtime, lookups: int) -> dict[str, Any]:
    from engine.operations import Operations

    ops = Operations(runtime)
    for note in ("v1", "v2"):
        await ops.workflows.publish(
            {
                "name": "routed",
                "description": note,
                "vertices": {
                    "call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/x"}}
                },
            }
        )
    store = runtime.store
    walls: dict[str, list[float]] = {"serving": [], "latest": []}
    cpus: dict[str, float] = {"serving": 0.0, "latest": 0.0}
    for _ in range(lookups):
        for name in ("serving", "latest"):
            wall, cpu = time.perf_counter(), time.process_time()
            if name == "serving":
                await store.serving("routed")
            else:
                await store.get_version("routed")
            cpus[name] += time.process_time() - cpu
            walls[name].append((time.perf_counter() - wall) * 1e6)
    return {
        name: {
            "wall_p50_us": round(percentile(walls[name], 50), 1),
            "cpu_us_per_read": round(cpus[name] / lookups * 1e6, 1),
        }
        for name in walls
    }


async def one_size(args: argparse.Namespace, window: int) -> None:
    async with database(args.backend) as url:
        settings = Settings(database_url=url, redis_url=None)
        runtime = await Runtime.open(settings)
        try:
            start = time.time() - WINDOW_S
            filled = await fill(runtime, url, window, args.noise, start)
            print(json.dumps({"window": window, "noise": args.noise, "fill_s": round(filled, 1)}))
            record = deployment(start)
            for kind, recent in (("judged", JUDGED_RUNS), ("exact", None)):
                counted = await measure_counts(runtime, record, args.repeat, recent)
                row = {"series": f"counts_{kind}", "backend": args.backend, "window": window}
                print(json.dumps({**row, **counted, "load": load()}), flush=True)
            if args.backend == "postgresql":
                print(
                    json.dumps({"series": "plan", "window": window, **await plan(url, start)}),
                    flush=True,
                )
            routed = await measure_routing(runtime, args.lookups)
            print(
                json.dumps(
                    {
                        "series": "routing",
                        "backend": args.backend,
                        "window": window,
                        **routed,
                        "load": load(),
                    }
                ),
                flush=True,
            )
        finally:
            await runtime.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--window", type=int, nargs="+", default=[100_000])
    parser.add_argument("--noise", type=int, default=100_000, help="runs of other workflows")
    parser.add_argument("--repeat", type=int, default=30, help="counts measured per size")
    parser.add_argument("--lookups", type=int, default=2_000, help="routing reads of each kind")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": load()}), flush=True)
    for window in args.window:
        await one_size(args, window)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
