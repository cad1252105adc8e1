"""Submissions through `schemabridge api` on PostgreSQL, against the stack's floor.

    python -m bench.api_submit --repeat 3 --count 5000 --concurrency 64
    python -m bench.api_submit --target health --repeat 1 --count 2000   # the driver alone

One fresh database (migrated with `schemabridge db upgrade`, an admin key from `schemabridge
keys create --admin`), Redis 127.0.0.1:6379/11, the demo downstream (its own subprocess,
answering after `--latency-ms`, 1 ms), a one-GATEWAY workflow `bench-submit` calling it, two
`schemabridge api` processes, two `schemabridge worker` processes executing the submitted
runs meanwhile, and two processes of the bare endpoint (bench/bare_insert.py: FastAPI +
asyncpg, one INSERT per request, uvicorn served the same way) on the same database.

A closed-loop aiohttp driver (this process; `--concurrency` loops, each sending its next
request when the previous one is answered) spreads requests round-robin over the two
processes of the series' target, `--count` measured requests (after `--warmup`) or `--max-s`
seconds, whichever comes first. The series are interleaved: each repetition measures
SchemaBridge (`POST /workflows/bench-submit/runs` with `{input, tenantId}`, 201 expected)
then the bare endpoint (`POST /rows`, 201), so both see the same machine. Every submission
has a distinct input (and, with `--idempotency`, an `Idempotency-Key`) over 8 tenants.

`--target health` measures `GET /health` (200) instead of submissions: the harness's own
check while the run routes do not exist yet.

Prints one JSON line per series (requests/s, p50/p99/max latency in ms, statuses, CPU
seconds by process role, load average) and a `summary` line: the medians over repetitions of
each target, the ratio SchemaBridge / bare, and the goals (≥ 500 submissions/s, p99 < 100 ms,
≥ 50 % of the bare endpoint's throughput) with whether they were met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from bench.api_stack import (
    CpuMeter,
    Database,
    Service,
    api_command,
    closed_loop,
    code_version,
    downstream_command,
    fresh_database,
    load_average,
    migrate_and_key,
    service_env,
    services,
    worker_command,
)
from bench.common import median

WORKFLOW = "bench-submit"
TENANTS = 8
GOAL_RPS, GOAL_P99_MS, GOAL_RATIO = 500.0, 100.0, 0.5


def workflow(downstream: str) -> dict[str, Any]:
    return {
        "name": WORKFLOW,
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {"url": f"{downstream}/submit", "method": "POST", "body": {"ok": True}},
            }
        },
    }


async def publish(env: dict[str, str], document: dict[str, Any]) -> None:
    """Publish through the operations layer in this process (the same database)."""
    from engine.operations import Operations
    from engine.runtime import Runtime
    from engine.settings import Settings

    os.environ.update({k: env[k] for k in ("SCHEMABRIDGE_DATABASE_URL", "SCHEMABRIDGE_REDIS_URL")})
    runtime = await Runtime.open(Settings(), migrate=False)
    try:
        await Operations(runtime).workflows.publish(document)
    finally:
        await runtime.close()


def _request(
    session: aiohttp.ClientSession, target: str, urls: list[str], key: str, args: argparse.Namespace
) -> Any:
    auth = {"Authorization": f"Bearer {key}"}
    stamp = f"{os.getpid()}-{time.time_ns()}"

    async def submit(i: int) -> int:
        headers = dict(auth)
        if args.idempotency:
            headers["Idempotency-Key"] = f"{stamp}-{i}"
        body = {"input": {"n": i, "stamp": stamp}, "tenantId": f"tenant-{i % TENANTS}"}
        url = f"{urls[i % len(urls)]}/workflows/{WORKFLOW}/runs"
        async with session.post(url, json=body, headers=headers) as response:
            await response.read()
            return response.status

    async def bare(i: int) -> int:
        body = {"input": {"n": i, "stamp": stamp}, "tenantId": f"tenant-{i % TENANTS}"}
        async with session.post(f"{urls[i % len(urls)]}/rows", json=body) as response:
            await response.read()
            return response.status

    async def health(i: int) -> int:
        async with session.get(f"{urls[i % len(urls)]}/health", headers=auth) as response:
            await response.read()
            return response.status

    return {"submit": submit, "bare": bare, "health": health}[target]


async def series(
    target: str,
    procs: list[Service],
    roles: dict[str, list[int]],
    key: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    urls = [p.url for p in procs if p.url]
    ok = 200 if target == "health" else 201
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    load_before = load_average()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        meter = CpuMeter.begin(roles)
        measured = await closed_loop(
            _request(session, target, urls, key, args),
            count=args.count,
            concurrency=args.concurrency,
            max_s=args.max_s,
            ok_status=ok,
            warmup=args.warmup,
        )
        cpu = meter.used()
    return {
        "target": target,
        **measured.summary(),
        "cpu_s": cpu,
        "load_before": load_before,
        "load_after": load_average(),
    }


def _summary(rows: list[dict[str, Any]], main: str) -> dict[str, Any]:
    def med(target: str, field: str) -> float:
        return round(median([r[field] for r in rows if r["target"] == target]), 2)

    ours = {f: med(main, f) for f in ("rps", "p50_ms", "p99_ms")}
    bare = {f: med("bare", f) for f in ("rps", "p50_ms", "p99_ms")}
    ratio = round(ours["rps"] / bare["rps"], 3) if bare["rps"] else float("nan")
    return {
        "summary": True,
        "target": main,
        "repeat": len([r for r in rows if r["target"] == main]),
        "schemabridge": ours,
        "bare": bare,
        "ratio_rps": ratio,
        "goals": {
            f"rps>={GOAL_RPS:g}": ours["rps"] >= GOAL_RPS,
            f"p99<{GOAL_P99_MS:g}ms": ours["p99_ms"] < GOAL_P99_MS,
            f"ratio>={GOAL_RATIO:g}": ratio >= GOAL_RATIO,
        },
        "commit": code_version(),
    }


async def measure(db: Database, args: argparse.Namespace) -> None:
    env = service_env(db)
    key = await asyncio.to_thread(migrate_and_key, env)
    async with services([("downstream", downstream_command(args.latency_ms), env, True)]) as ds:
        await publish(env, workflow(str(ds[0].url)))
        bare = [sys.executable, "-m", "bench.bare_insert", "--dsn", db.dsn]
        starts = [
            *[(f"api-{i}", api_command(args.access_log), env, True) for i in range(args.apis)],
            *[(f"worker-{i}", worker_command(f"w{i}"), env, False) for i in range(args.workers)],
            *[(f"bare-{i}", bare, env, True) for i in range(args.apis)],
        ]  # fmt: skip
        async with services(starts) as procs:
            apis = [p for p in procs if p.name.startswith("api-")]
            bares = [p for p in procs if p.name.startswith("bare-")]
            roles = {
                "api": [p.pid for p in apis],
                "workers": [p.pid for p in procs if p.name.startswith("worker-")],
                "bare": [p.pid for p in bares],
                "downstream": [ds[0].pid],
            }
            print(json.dumps({"pids": {p.name: p.pid for p in [*ds, *procs]}}), flush=True)
            rows: list[dict[str, Any]] = []
            for rep in range(args.repeat):
                for target, group in ((args.target, apis), ("bare", bares)):
                    row = {"rep": rep, **await series(target, group, roles, key, args)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            print(json.dumps(_summary(rows, args.target)), flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("submit", "health"), default="submit")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--count", type=int, default=5000, help="measured requests per series")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--max-s", type=float, default=60.0, help="bound on a series' time")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--apis", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--idempotency", action="store_true", help="send Idempotency-Key")
    parser.add_argument("--access-log", action="store_true", help="the api's JSON access log on")
    parser.add_argument("--keep-db", action="store_true")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": load_average()}), flush=True)
    async with fresh_database("sb_apisub", keep=args.keep_db) as db:
        await measure(db, args)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
