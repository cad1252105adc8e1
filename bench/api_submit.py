"""Submissions through `schemabridge api` on PostgreSQL, against the stack's floor.

    python -m bench.api_submit --repeat 3 --count 5000 --concurrency 64
    python -m bench.api_submit --target health --repeat 1 --count 2000   # the driver alone

One fresh database (migrated with `schemabridge db upgrade`, an admin key from `schemabridge
keys create --admin`), Redis `SB_BENCH_REDIS_URL` (default db 11), the demo downstream (its
own subprocess, answering after `--latency-ms`, 1 ms), a one-GATEWAY workflow `bench-submit`
calling it, two `schemabridge api` processes, two `schemabridge worker` processes executing
the submitted runs meanwhile, and two processes of the bare endpoint (bench/bare_insert.py:
FastAPI + asyncpg, one INSERT per request, uvicorn served the same way) on the same database.

A closed-loop aiohttp driver (this process; `--concurrency` loops, each sending its next
request when the previous one is answered) spreads requests round-robin over the two
processes of the series' target, `--count` measured requests (after `--warmup`) or `--max-s`
seconds, whichever comes first. The series are interleaved: each repetition measures
SchemaBridge (`POST /workflows/bench-submit/runs` with `{input, tenantId}`, 201 expected)
then the bare endpoint (`POST /rows`, 201), so both see the same machine. Every submission
has a distinct input (and, with `--idempotency`, an `Idempotency-Key`) over 8 tenants; with
`--quota N` each tenant has a run quota of N, which every submission takes a unit of. With
`--wait` each submission asks `?wait=true` (200 once the run has ended): its latency is then the
whole run's, submission to output, the workers' pick-up included.

`--baseline REF` adds two api processes running the code of commit REF (exported with `git
archive`; same database, same workers) and a third series per repetition against them
(`submit@baseline`): before and after measured in the same run. Mind PostgreSQL's
`max_connections` (100 here): each api or worker process may hold 20 connections and each
bare one 10, so the full stack with a baseline can take 140 and starve whoever else uses the
server; a lower `--concurrency` keeps the api processes' share down. `--profile-s S` records
py-spy samples of the first process of each target during repetition `--profile-rep`
(collapsed stacks in bench/out/profile-TARGET.txt; bench/api_phases.py splits a submission's
CPU by phase instead).

`--target health` measures `GET /health` (200) instead of submissions: the harness's own
check while the run routes do not exist yet.

Prints one JSON line per series (requests/s, p50/p99/max latency in ms, statuses, CPU
seconds by process role and per request sent, warm-up included, load average) and a `summary`
line: the medians over repetitions of each target, the ratio of each to bare, and the goals
(≥ 500 submissions/s, p99 < 100 ms, ≥ 50 % of the bare endpoint's throughput), met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
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
    exported_tree,
    fresh_database,
    load_average,
    migrate_and_key,
    service_env,
    services,
    tree_env,
    worker_command,
)
from bench.common import OUT, median

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


async def publish(env: dict[str, str], document: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Publish a document (or a list of them, together) through the operations layer in this
    process (the same database)."""
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
        if args.wait:
            url += "?wait=true"
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


async def give_quotas(url: str, key: str, max_runs: int) -> None:
    """Every tenant of the benchmark gets a run quota of `max_runs` (`--quota`)."""
    auth = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as session:
        for tenant in range(TENANTS):
            limits = f"{url}/tenants/tenant-{tenant}/limits"
            async with session.put(limits, json={"maxRuns": max_runs}, headers=auth) as answer:
                if answer.status != 200:
                    raise SystemExit(f"PUT {limits}: {answer.status} {await answer.text()}")


BASELINE = "submit@baseline"
"""The target of `--baseline`: the same submissions to api processes running older code."""


async def profile(pid: int, seconds: float, label: str) -> Path:
    """py-spy samples of `pid` for `seconds` (100 Hz, without pausing it), collapsed stacks in
    bench/out/profile-LABEL.txt (read them with bench/profile_summary.py)."""
    output = OUT / f"profile-{label}.txt"
    spy = str(Path(sys.executable).with_name("py-spy"))
    process = await asyncio.create_subprocess_exec(
        spy, "record", "--pid", str(pid), "--duration", str(round(seconds)), "--rate", "100",
        "--nonblocking", "--format", "raw", "--output", str(output),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.wait_for(process.wait(), seconds + 60)
    return output


async def series(
    target: str,
    procs: list[Service],
    roles: dict[str, list[int]],
    key: str,
    args: argparse.Namespace,
    *,
    profile_label: str | None = None,
) -> dict[str, Any]:
    urls = [p.url for p in procs if p.url]
    kind = "submit" if target == BASELINE else target
    ok = 200 if target == "health" or (kind == "submit" and args.wait) else 201
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    load_before = load_average()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        meter = CpuMeter.begin(roles)
        spy = None
        if profile_label is not None:
            spy = asyncio.create_task(profile(procs[0].pid, args.profile_s, profile_label))
        measured = await closed_loop(
            _request(session, kind, urls, key, args),
            count=args.count,
            concurrency=args.concurrency,
            max_s=args.max_s,
            ok_status=ok,
            warmup=args.warmup,
        )
        cpu = meter.used()
        if spy is not None:
            await spy
    sent = max(1, measured.sent_in_all)
    per_request = {role: round(used * 1000 / sent, 2) for role, used in cpu.items()}
    return {
        "target": target,
        **measured.summary(),
        "cpu_s": cpu,
        "cpu_ms_per_request": per_request,
        "load_before": load_before,
        "load_after": load_average(),
    }


def _summary(rows: list[dict[str, Any]], main: str) -> dict[str, Any]:
    def med(target: str, field: str) -> float:
        return round(median([r[field] for r in rows if r["target"] == target]), 2)

    def cpu(target: str, role: str) -> float:
        values = [r["cpu_ms_per_request"][role] for r in rows if r["target"] == target]
        return round(median(values), 2)

    targets = [t for t in (main, BASELINE, "bare") if any(r["target"] == t for r in rows)]
    medians = {t: {f: med(t, f) for f in ("rps", "p50_ms", "p99_ms")} for t in targets}
    role = {main: "api", BASELINE: "api_baseline", "bare": "bare"}
    for target in targets:
        medians[target]["server_cpu_ms_per_request"] = cpu(target, role[target])
    bare_rps = medians["bare"]["rps"]
    ratios = {
        t: round(medians[t]["rps"] / bare_rps, 3) if bare_rps else float("nan")
        for t in targets
        if t != "bare"
    }
    ours = medians[main]
    return {
        "summary": True,
        "target": main,
        "repeat": len([r for r in rows if r["target"] == main]),
        "medians": medians,
        "ratio_rps_to_bare": ratios,
        "goals": {
            f"rps>={GOAL_RPS:g}": ours["rps"] >= GOAL_RPS,
            f"p99<{GOAL_P99_MS:g}ms": ours["p99_ms"] < GOAL_P99_MS,
            f"ratio>={GOAL_RATIO:g}": ratios[main] >= GOAL_RATIO,
        },
        "commit": code_version(),
        "baseline": args_baseline(rows),
    }


def args_baseline(rows: list[dict[str, Any]]) -> str | None:
    return next((r["baseline"] for r in rows if r.get("baseline")), None)


async def measure(db: Database, args: argparse.Namespace) -> None:
    env = service_env(db)
    key = await asyncio.to_thread(migrate_and_key, env)
    tree = None if args.baseline is None else exported_tree(args.baseline)
    async with services([("downstream", downstream_command(args.latency_ms), env, True)]) as ds:
        await publish(env, workflow(str(ds[0].url)))
        bare = [sys.executable, "-m", "bench.bare_insert", "--dsn", db.dsn]
        starts = [
            *[(f"api-{i}", api_command(args.access_log), env, True) for i in range(args.apis)],
            *[(f"worker-{i}", worker_command(f"w{i}"), env, False) for i in range(args.workers)],
            *[(f"bare-{i}", bare, env, True) for i in range(args.apis)],
        ]  # fmt: skip
        if tree is not None:
            old = tree_env(env, tree)
            starts += [(f"base-{i}", api_command(args.access_log, tree), old, True)
                       for i in range(args.apis)]  # fmt: skip
        async with services(starts) as procs:
            groups = {
                args.target: [p for p in procs if p.name.startswith("api-")],
                BASELINE: [p for p in procs if p.name.startswith("base-")],
                "bare": [p for p in procs if p.name.startswith("bare-")],
            }
            roles = {
                "api": [p.pid for p in groups[args.target]],
                "api_baseline": [p.pid for p in groups[BASELINE]],
                "workers": [p.pid for p in procs if p.name.startswith("worker-")],
                "bare": [p.pid for p in groups["bare"]],
                "downstream": [ds[0].pid],
            }
            print(json.dumps({"pids": {p.name: p.pid for p in [*ds, *procs]}}), flush=True)
            if args.quota is not None:
                await give_quotas(str(groups[args.target][0].url), key, args.quota)
            order = [t for t in (args.target, BASELINE, "bare") if groups[t]]
            rows: list[dict[str, Any]] = []
            for rep in range(args.repeat):
                for target in order:
                    label = None
                    if args.profile_s > 0 and rep == args.profile_rep:
                        label = "baseline" if target == BASELINE else target
                    measured = await series(
                        target, groups[target], roles, key, args, profile_label=label
                    )
                    row = {"rep": rep, **measured}
                    if target == BASELINE:
                        row["baseline"] = args.baseline
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
    parser.add_argument(
        "--wait",
        action="store_true",
        help="submit with ?wait=true (200 with the output): the latency is submission to end",
    )
    parser.add_argument("--access-log", action="store_true", help="the api's JSON access log on")
    parser.add_argument(
        "--quota",
        type=int,
        metavar="N",
        help="give each tenant a run quota of N first (each submission then takes it)",
    )
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run api processes of commit REF (git archive) and measure them interleaved",
    )
    parser.add_argument(
        "--profile-s",
        type=float,
        default=0.0,
        help="py-spy on the first process of each target for this long, in repetition "
        "--profile-rep (collapsed stacks in bench/out/profile-TARGET.txt)",
    )
    parser.add_argument("--profile-rep", type=int, default=0)
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": load_average()}), flush=True)
    async with fresh_database("sb_apisub", keep=args.keep_db) as db:
        await measure(db, args)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
