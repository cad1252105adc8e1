"""Run lists through `schemabridge api` with 1,000,000 runs in the table.

    python -m bench.api_list --runs 1000000 --requests 500 --depth 200
    python -m bench.api_list --via operations ...   # the operations layer in-process, no HTTP

A fresh database migrated with `schemabridge db upgrade` is filled by one `INSERT … SELECT
FROM generate_series(0, N-1)` into `run` (see `FILL`), then `ANALYZE run` (this machine's
PostgreSQL has autovacuum off). The mix, by row number i: blocks of 1,000 rows; the first 200
of a block are root runs, the block's first root is the parent of the other 800 (children
with item_index 0…799, a parent_vertex_id, root_run_id the parent) — 200,000 roots and
800,000 children in 1,000 fan-outs. Statuses by a hash of i: 90 % SUCCEEDED, 3 % FAILED (a
FAILED child also has dlq_at), 5 % RUNNING, 2 % CANCELLED; 20 tenants, 10 workflows; created_at
spread evenly over the 30 days before now, children a few ms after their parent.

Two `schemabridge api` processes (Redis `SB_BENCH_REDIS_URL`, default db 11; an admin key
from `schemabridge keys create --admin`) serve `GET /runs?status=FAILED&roots=false&limit=50`.
Measured, `--requests` each, by a closed-loop aiohttp driver with `--concurrency` loops over
both processes:

* `first_page` — `GET /runs?status=FAILED&roots=false&limit=50` (every run: children too);
* `deep_page` — the same list `--depth` pages in (the `cursor` reached by following `next`
  that many times: 50 times depth rows deep);
* `walk` — the time of each of the `--depth` pages followed to get there (one client, in
  order).

`--baseline REF` measures the same series again on api processes running the code of commit
REF (exported with `git archive`), on the same rows. `--keep-db` keeps the filled database
(its name is printed) and `--reuse NAME` measures on it again without filling (the
1,000,000-row fill takes minutes). `--via operations` calls `Operations.runs.list` in this
process instead (the same store query and cursor, without HTTP, auth or JSON) — for
comparison, or while the route does not exist.

Prints one JSON line per series (p50/p99/max ms, requests/s, statuses, load average), and a
`summary` line with the goal (p99 < 100 ms) and the fill's time and row counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import asyncpg

from bench.api_stack import (
    Database,
    Series,
    api_command,
    closed_loop,
    code_version,
    exported_tree,
    fresh_database,
    load_average,
    migrate_and_key,
    service_env,
    services,
    tree_env,
)
from bench.common import percentile

GOAL_P99_MS = 100.0
LIST_PATH = "/runs"
STATUS = "FAILED"
PAGE = 50
LIST_PARAMS = {"status": STATUS, "roots": "false", "limit": str(PAGE)}
"""Every run, children too (`roots=false`, a no-op on commits before roots became the list's
default): the list the results measured, `ix_run_status_created`, and the one `--baseline`
measures on older code."""

FILL = """
INSERT INTO run (
    id, workflow_name, workflow_version, definition_hash, tenant_id, status, timeout_tier,
    input, output, error, steps_remaining, created_at, started_at, ended_at,
    parent_run_id, parent_vertex_id, item_index, root_run_id, dlq_at
)
SELECT
    md5('run' || i)::uuid::text,
    'workflow-' || (i / 1000) % 10,
    1,
    md5('definition' || (i / 1000) % 10),
    'tenant-' || (i / 1000 + i) % 20,
    s.status,
    'process',
    json_build_object('n', i),
    CASE WHEN s.status = 'SUCCEEDED' THEN json_build_object('ok', true) END,
    CASE WHEN s.status = 'FAILED'
        THEN json_build_object('code', 'http_error', 'message', 'HTTP 500') END,
    CASE WHEN s.status = 'RUNNING' THEN 1 ELSE 0 END,
    t.created,
    t.created + 0.01,
    CASE WHEN s.status <> 'RUNNING' THEN t.created + 0.5 END,
    CASE WHEN c.child THEN md5('run' || (i / 1000) * 1000)::uuid::text END,
    CASE WHEN c.child THEN 'fanout' END,
    CASE WHEN c.child THEN i % 1000 - 200 END,
    CASE WHEN c.child THEN md5('run' || (i / 1000) * 1000)::uuid::text
        ELSE md5('run' || i)::uuid::text END,
    CASE WHEN c.child AND s.status = 'FAILED' THEN t.created + 0.5 END
FROM generate_series(0, $1::int - 1) AS i,
    LATERAL (SELECT i % 1000 >= 200 AS child) AS c,
    LATERAL (SELECT CASE
        WHEN (i::bigint * 7919) % 100 < 90 THEN 'SUCCEEDED'
        WHEN (i::bigint * 7919) % 100 < 93 THEN 'FAILED'
        WHEN (i::bigint * 7919) % 100 < 98 THEN 'RUNNING'
        ELSE 'CANCELLED' END AS status) AS s,
    LATERAL (SELECT $2::float8 + CASE
        WHEN c.child THEN ((i / 1000) * 1000) * $3::float8 + (i % 1000) * 0.003
        ELSE i * $3::float8 END AS created) AS t
"""
"""Parameters: the row count, the first created_at, the seconds between rows."""
SPAN_S = 30 * 86400.0


async def fill(db: Database, rows: int) -> dict[str, Any]:
    """`rows` runs by one INSERT … SELECT, then ANALYZE; the time taken and the counts."""
    conn = await asyncpg.connect(db.dsn)
    try:
        begin = time.perf_counter()
        await conn.execute(FILL, rows, time.time() - SPAN_S, SPAN_S / rows)
        inserted = time.perf_counter()
        await conn.execute("ANALYZE run")
        counts = await conn.fetch("SELECT status, count(*) AS n FROM run GROUP BY status")
        children = await conn.fetchval("SELECT count(*) FROM run WHERE parent_run_id IS NOT NULL")
        size = await conn.fetchval("SELECT pg_size_pretty(pg_total_relation_size('run'))")
    finally:
        await conn.close()
    return {
        "rows": rows,
        "insert_s": round(inserted - begin, 1),
        "analyze_s": round(time.perf_counter() - inserted, 1),
        "by_status": {r["status"]: r["n"] for r in counts},
        "children": children,
        "run_table_size": size,
    }


Fetch = Callable[[int, str | None], Awaitable[tuple[int, str | None, int]]]
"""(request number, cursor) → (status, the page's `next`, items on the page)."""


def page_fetch(
    session: aiohttp.ClientSession, urls: list[str], key: str, path: str, params: dict[str, str]
) -> Fetch:
    """GET `path` with `params` (and the cursor given), round-robin over `urls`."""
    headers = {"Authorization": f"Bearer {key}"}

    async def fetch(i: int, cursor: str | None) -> tuple[int, str | None, int]:
        query = dict(params) if cursor is None else {**params, "cursor": cursor}
        async with session.get(f"{urls[i % len(urls)]}{path}", params=query, headers=headers) as r:
            body = await r.read()
            if r.status != 200:
                return r.status, None, 0
            page = json.loads(body)
            return r.status, page.get("next"), len(page.get("items", []))

    return fetch


def http_fetch(session: aiohttp.ClientSession, urls: list[str], key: str) -> Fetch:
    return page_fetch(session, urls, key, LIST_PATH, LIST_PARAMS)


async def walk(fetch: Fetch, depth: int) -> tuple[str | None, list[float], int]:
    """Follow `next` `depth` times: the cursor reached, each page's time, rows passed."""
    cursor: str | None = None
    times: list[float] = []
    passed = 0
    for i in range(depth):
        begin = time.perf_counter()
        status, cursor, items = await fetch(i, cursor)
        times.append((time.perf_counter() - begin) * 1000)
        passed += items
        if status != 200 or cursor is None:
            raise RuntimeError(f"page {i}: status {status}, next {cursor!r} after {passed} rows")
    return cursor, times, passed


def walk_row(name: str, times: list[float], passed: int) -> dict[str, Any]:
    """The JSON line of a walk: its pages' time percentiles and the rows passed."""
    return {
        "series": name,
        "pages": len(times),
        "rows_passed": passed,
        "p50_ms": round(percentile(times, 50), 2),
        "p99_ms": round(percentile(times, 99), 2),
        "max_ms": round(max(times), 2),
    }


async def series(
    name: str, fetch: Fetch, cursor: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    async def one(i: int) -> int:
        status, _next, _items = await fetch(i, cursor)
        return status

    load_before = load_average()
    measured: Series = await closed_loop(
        one,
        count=args.requests,
        concurrency=args.concurrency,
        max_s=args.max_s,
        ok_status=200,
        warmup=args.warmup,
    )
    row = {"series": name, **measured.summary(), "load_before": load_before}
    return {**row, "load_after": load_average()}


async def measure(fetch: Fetch, args: argparse.Namespace, filled: dict[str, Any]) -> None:
    first = await series("first_page", fetch, None, args)
    print(json.dumps(first), flush=True)
    cursor, times, passed = await walk(fetch, args.depth)
    walked = walk_row("walk", times, passed)
    print(json.dumps(walked), flush=True)
    deep = await series("deep_page", fetch, cursor, args)
    deep["rows_deep"] = passed
    print(json.dumps(deep), flush=True)
    worst = max(first["p99_ms"], deep["p99_ms"])
    summary = {
        "summary": True,
        "via": args.via,
        "fill": filled,
        "first_page": {k: first[k] for k in ("p50_ms", "p99_ms", "rps")},
        "deep_page": {k: deep[k] for k in ("p50_ms", "p99_ms", "rps", "rows_deep")},
        "walk": {k: walked[k] for k in ("p50_ms", "p99_ms")},
        "goals": {f"p99<{GOAL_P99_MS:g}ms": worst < GOAL_P99_MS},
        "commit": code_version(),
    }
    print(json.dumps(summary), flush=True)


async def via_http(
    db: Database, args: argparse.Namespace, filled: dict[str, Any], key: str
) -> None:
    env = service_env(db)
    codes: list[tuple[str, list[str], dict[str, str]]] = [("current", api_command(False), env)]
    if args.baseline:
        tree = exported_tree(args.baseline)
        codes.append(("baseline", api_command(False, tree), tree_env(env, tree)))
    for code, command, code_env in codes:
        specs = [(f"api-{i}", command, code_env, True) for i in range(args.apis)]
        async with services(specs) as apis:
            print(json.dumps({"code": code, "baseline": args.baseline}), flush=True)
            connector = aiohttp.TCPConnector(limit=args.concurrency)
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                await measure(http_fetch(session, [str(a.url) for a in apis], key), args, filled)


async def via_operations(
    db: Database, args: argparse.Namespace, filled: dict[str, Any], _key: str
) -> None:

    from engine.operations import Operations
    from engine.operations.views import RunFilter
    from engine.runtime import Runtime
    from engine.settings import Settings

    env = service_env(db)
    os.environ.update({k: env[k] for k in ("SCHEMABRIDGE_DATABASE_URL", "SCHEMABRIDGE_REDIS_URL")})
    runtime = await Runtime.open(Settings(), migrate=False)
    try:
        ops = Operations(runtime)

        async def fetch(_i: int, cursor: str | None) -> tuple[int, str | None, int]:
            selection = RunFilter(status=STATUS, roots_only=False)  # as LIST_PARAMS
            page = await ops.runs.list(selection, limit=PAGE, cursor=cursor)
            return 200, page.next, len(page.items)

        await measure(fetch, args, filled)
    finally:
        await runtime.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=500, help="measured per series")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--depth", type=int, default=200, help="pages followed to the deep one")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-s", type=float, default=120.0, help="bound on a series' time")
    parser.add_argument("--apis", type=int, default=2)
    parser.add_argument("--via", choices=("http", "operations"), default="http")
    parser.add_argument("--keep-db", action="store_true", help="keep the filled database")
    parser.add_argument("--reuse", metavar="DATABASE", help="a database --keep-db kept: no fill")
    parser.add_argument(
        "--baseline", metavar="REF", help="then the same series on api processes of commit REF"
    )
    return parser.parse_args(argv)


async def counts(db: Database) -> dict[str, Any]:
    """The row counts of a database filled earlier (`--reuse`)."""
    conn = await asyncpg.connect(db.dsn)
    try:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM run GROUP BY status")
        children = await conn.fetchval("SELECT count(*) FROM run WHERE parent_run_id IS NOT NULL")
    finally:
        await conn.close()
    by_status = {r["status"]: r["n"] for r in rows}
    return {"rows": sum(by_status.values()), "by_status": by_status, "children": children}


async def amain(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": load_average()}), flush=True)
    run = via_http if args.via == "http" else via_operations
    if args.reuse:
        db = Database(args.reuse)
        key = await asyncio.to_thread(migrate_and_key, service_env(db))
        await run(db, args, {"reused": args.reuse, **await counts(db)}, key)
        return
    async with fresh_database("sb_apilist", keep=args.keep_db) as db:
        key = await asyncio.to_thread(migrate_and_key, service_env(db))
        filled = await fill(db, args.runs)
        print(json.dumps({"fill": filled, "database": db.name}), flush=True)
        await run(db, args, filled, key)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
