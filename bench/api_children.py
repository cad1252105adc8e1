"""A run's children through `schemabridge api` at 100,000 children (`GET /runs/{id}/children`).

    python -m bench.api_children --children 100000 --requests 300 --depth 500

A fresh database migrated with `schemabridge db upgrade`; a parent workflow (a SPAWNER over
`input.items` and its MERGE) and its child workflow published, and one parent run submitted,
through the operations layer (no worker: the parent stays RUNNING). Its children are then
made by one `INSERT … SELECT FROM generate_series(0, N-1)` into `run` (`FILL`: what the
spawner's batches would have written, without running 100,000 HTTP calls), then `ANALYZE
run`. Child i: item index i of spawner vertex `each`, root and parent the parent run, status
by `(i * 7919) mod 100`: 90 % SUCCEEDED, 3 % FAILED (with `dlq_at`), 5 % RUNNING, 2 % CANCELLED.

Two `schemabridge api` processes (an admin key) serve these, measured by a closed-loop
aiohttp driver (`--concurrency` loops, `--requests` each after `--warmup`), pages of
`--limit` (100):

* `first_page` — `GET /runs/{id}/children?limit=100`;
* `deep_page` — the page reached by following `next` `--depth` times (`--depth` * 100 rows
  in; `walk` is the time of each page on the way, one client);
* `failed_first_page`, `failed_deep_page` — the same with `status=FAILED` (the deep one
  `--depth / 50` pages in: 3,000 of 100,000 children failed);
* `run_detail` — `GET /runs/{id}` of the parent (its fan-out progress: the running count and
  the waiting children grouped by reason), measured first; `--detail-only` measures only it.

Each child also gets its one step (`FILL_STEPS`, then `ANALYZE step`), in its run's status; of
the 5 % RUNNING children, half hold a claim and half are parked READY with a wait reason.

Prints one JSON line per series (p50/p99/max ms, requests/s, statuses, load) and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import asyncpg

from bench import api_stack
from bench.api_list import Fetch, page_fetch, series, walk, walk_row

FILL = """
INSERT INTO run (
    id, workflow_name, workflow_version, definition_hash, tenant_id, status, timeout_tier,
    input, output, error, steps_remaining, created_at, started_at, ended_at,
    parent_run_id, parent_vertex_id, item_index, root_run_id, dlq_at, pinned_versions
)
SELECT
    md5($1 || i)::uuid::text, 'child', 1, $2, 'default', s.status, 'process',
    json_build_object('n', i),
    CASE WHEN s.status = 'SUCCEEDED' THEN json_build_object('ok', true) END,
    CASE WHEN s.status = 'FAILED'
        THEN json_build_object('kind', 'http_error', 'message', 'HTTP 500') END,
    CASE WHEN s.status = 'RUNNING' THEN 1 ELSE 0 END,
    $3::float8 + i * 0.0001, $3::float8 + i * 0.0001,
    CASE WHEN s.status <> 'RUNNING' THEN $3::float8 + i * 0.0001 + 0.5 END,
    $1, 'each', i, $1,
    CASE WHEN s.status = 'FAILED' THEN $3::float8 + i * 0.0001 + 0.5 END,
    '{}'::json
FROM generate_series(0, $4::int - 1) AS i,
    LATERAL (SELECT CASE
        WHEN (i::bigint * 7919) % 100 < 90 THEN 'SUCCEEDED'
        WHEN (i::bigint * 7919) % 100 < 93 THEN 'FAILED'
        WHEN (i::bigint * 7919) % 100 < 98 THEN 'RUNNING'
        ELSE 'CANCELLED' END AS status) AS s
"""
"""Parameters: the parent run's id, the child version's definition hash, the parent's
created_at, the number of children."""

FILL_STEPS = """
INSERT INTO step (
    run_id, vertex_id, tenant_id, status, deps_pending, attempts, auto_retries,
    tenant_item_taken, not_before, created_at, started_at, ended_at, claim_token,
    lease_expires_at, wait_reason, wait_message, claimed_by
)
SELECT
    r.id, 'call', r.tenant_id, w.status, 0, 1, 0, false, r.created_at + 5, r.created_at,
    r.started_at, r.ended_at,
    CASE WHEN w.status = 'RUNNING' THEN md5(r.id) END,
    CASE WHEN w.status = 'RUNNING' THEN r.created_at + 3600 END,
    CASE WHEN w.status = 'READY' THEN 'tenant_rate_limit' END,
    CASE WHEN w.status = 'READY' THEN 'the tenant rate window is full' END,
    CASE WHEN w.status = 'RUNNING' THEN 'worker-' || (r.item_index % 8) END
FROM run AS r,
    LATERAL (SELECT CASE
        WHEN r.status <> 'RUNNING' THEN r.status
        WHEN r.item_index % 2 = 0 THEN 'READY'
        ELSE 'RUNNING' END AS status) AS w
WHERE r.parent_run_id = $1
"""
"""Each child's one step (`call`), in its run's status; of the RUNNING children, half hold a
claim (held by one of 8 workers, `worker-0` … `worker-7`, that never beat here) and half are
parked READY by the tenant rate limit (a wait reason): what `GET /runs/{id}` counts and groups
for the fan-out's progress."""

PARK_SPAWNER = """
UPDATE step SET status = 'PARKED', deps_pending = 0, attempts = 1, children_total = $2,
    children_succeeded = (SELECT count(*) FROM run WHERE parent_run_id = $1
        AND status = 'SUCCEEDED'),
    children_failed = (SELECT count(*) FROM run WHERE parent_run_id = $1 AND status = 'FAILED'),
    children_cancelled = (SELECT count(*) FROM run WHERE parent_run_id = $1
        AND status = 'CANCELLED')
WHERE run_id = $1 AND vertex_id = 'each'
"""
"""The parent's spawner, PARKED with its counters as the children's ends would have left them
(so the run's fan-out progress is read as a live fan-out's)."""


def documents() -> list[dict[str, Any]]:
    return [
        {
            "name": "parent",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "child"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"], "config": {}},
            },
        },
        {
            "name": "child",
            "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/"}}},
        },
    ]


async def parent_run(env: dict[str, str]) -> tuple[str, str, float]:
    """Publish the workflows and submit the parent: (run id, child hash, created_at)."""
    from engine.operations import Operations
    from engine.runtime import Runtime
    from engine.settings import Settings

    os.environ.update({k: env[k] for k in ("SCHEMABRIDGE_DATABASE_URL", "SCHEMABRIDGE_REDIS_URL")})
    runtime = await Runtime.open(Settings(), migrate=False)
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(documents())
        child = await ops.workflows.get("child")
        submitted = await ops.runs.submit("parent", {"items": []})
        return submitted.run.id, child.definition_hash, submitted.run.created_at
    finally:
        await runtime.close()


async def fill(db: api_stack.Database, env: dict[str, str], children: int) -> dict[str, Any]:
    run_id, child_hash, created_at = await parent_run(env)
    conn = await asyncpg.connect(db.dsn)
    try:
        began = time.perf_counter()
        await conn.execute(FILL, run_id, child_hash, created_at, children)
        await conn.execute(FILL_STEPS, run_id)
        await conn.execute(PARK_SPAWNER, run_id, children)
        inserted = time.perf_counter()
        await conn.execute("ANALYZE run")
        await conn.execute("ANALYZE step")
        by_status = await conn.fetch(
            "SELECT status, count(*) AS n FROM run WHERE parent_run_id = $1 GROUP BY status",
            run_id,
        )
    finally:
        await conn.close()
    return {
        "parent": run_id,
        "children": children,
        "by_status": {r["status"]: r["n"] for r in by_status},
        "insert_s": round(inserted - began, 1),
        "analyze_s": round(time.perf_counter() - inserted, 1),
    }


async def measure_list(
    name: str, fetch: Fetch, depth: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    first = {**await series(f"{name}first_page", fetch, None, args)}
    print(json.dumps(first), flush=True)
    cursor, times, passed = await walk(fetch, depth)
    walked = walk_row(f"{name}walk", times, passed)
    print(json.dumps(walked), flush=True)
    deep = {**await series(f"{name}deep_page", fetch, cursor, args), "rows_deep": passed}
    print(json.dumps(deep), flush=True)
    return [first, walked, deep]


async def measure(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": api_stack.load_average()}), flush=True)
    async with api_stack.fresh_database("sb_apichildren", keep=args.keep_db) as db:
        env = api_stack.service_env(db)
        key = await asyncio.to_thread(api_stack.migrate_and_key, env)
        filled = await fill(db, env, args.children)
        print(json.dumps({"fill": filled, "database": db.name}), flush=True)
        specs = [(f"api-{i}", api_stack.api_command(False), env, True) for i in range(2)]
        async with api_stack.services(specs) as apis:
            urls = [str(a.url) for a in apis]
            connector = aiohttp.TCPConnector(limit=args.concurrency)
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                run_id = filled["parent"]
                limit = str(args.limit)
                path = f"/runs/{run_id}/children"
                every = page_fetch(session, urls, key, path, {"limit": limit})
                failed = page_fetch(session, urls, key, path, {"limit": limit, "status": "FAILED"})
                detail = page_fetch(session, urls, key, f"/runs/{run_id}", {})
                rows = [await series("run_detail", detail, None, args)]
                print(json.dumps(rows[0]), flush=True)
                if not args.detail_only:
                    rows += await measure_list("", every, args.depth, args)
                    rows += await measure_list("failed_", failed, max(1, args.depth // 50), args)
    summary = {
        "summary": True,
        "fill": filled,
        "series": {r["series"]: {k: r[k] for k in ("p50_ms", "p99_ms")} for r in rows},
        "commit": api_stack.code_version(),
    }
    print(json.dumps(summary), flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--children", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=100, help="children per page")
    parser.add_argument("--requests", type=int, default=300, help="measured per series")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--depth", type=int, default=500, help="pages followed to the deep one")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-s", type=float, default=120.0, help="bound on a series' time")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--detail-only", action="store_true", help="measure `GET /runs/{id}` only, no pages"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(measure(parse_args(argv)))


if __name__ == "__main__":
    main()
