"""The durable floor: what a minimal durable fan-out costs on this machine, against the plain loop.

    python -m bench.durable_floor --children 10000 --latency-ms 20 --workers 2 --repeat 3
    python -m bench.durable_floor --children 2000 --repeat 1 --redis off   # a quick try

A ceiling for issue 17, not a product: a fan-out written straight on asyncpg, uvloop, orjson
and aiohttp that keeps the guarantees SchemaBridge's fan-out gives and nothing else
(docs/architecture.md, 'The store as the queue' and 'Fan-out and the join'):

* a parent row (its input holds the items) and one child row per item, spawned by a worker in
  batches of 500 (`INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING`: one child per item
  however often a spawn is repeated), each child with a stable Idempotency-Key;
* `--workers` worker processes (bench/durable_floor_worker.py) that claim children atomically
  in batches (`UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT k) RETURNING`,
  a claim token and a lease), keep `--in-flight` calls in flight each, POST each child's item
  to the mock with its Idempotency-Key, and record results in batches (status, output;
  attempts count claims) under their claim's token before counting them done, in the
  statement that adds them to the parent's join counter and claims the next children (one
  statement, one commit per cycle, at most every `--batch-ms`). `--in-flight` defaults to the
  plain loop's 128 shared among the workers (2 x 64, as bench.compare runs SchemaBridge): more
  in all than the loop keeps would beat it by concurrency, on a mock that answers in a fixed
  time, and not by what a child costs;
* leases renewed every third of `--lease-s`, expired ones requeued (at-least-once);
* the join: the statement that brings the counters to the total names the parent, and that
  worker records the merge (the outputs in item order) with a guarded UPDATE, once;
* with `--redis on`, one EVAL per cycle on a per-destination sorted set of leased slots
  (give back the recorded children's, take the claimed ones'): the cost of an admission
  exchange per batch, never a limit (its cap is 1,000,000).

Left out on purpose: workflow definitions, versions and pins, expressions and rendering, run
and step rows per child (a child is one row), run logs, tenants (fair claims, quotas, rate
windows), AIMD, breakers, retry budgets, redispatch with durable timers (a call is tried 3
times in process, then the child FAILED), cancel, payload chunks for large merges, heartbeats,
wake-ups, metrics, events. What it measures is the cost of durability itself on this stack.

Each round runs the plain loop (A: bench.baseline_asyncio's aiohttp loop, `--plain-in-flight`
128, the loop bench.compare runs) and then the floor (B without Redis, C with it; `--redis`
chooses), each on a fresh mock (bench.fanout's `downstream_process`) and a fresh schema in
`--dsn`'s database (created and dropped per run). Prints one JSON line per run, then per
variant the median ratio of children/s to the round's plain requests/s, and CPU ms per child
split by process, as bench.fanout's CpuMeter counts it: the workers, every `postgres` and
`redis-server` process on the machine (shared: others' work counts too), the downstream;
`postgres_own_backends` is the part of `postgres` spent by the workers' own connections.
`cpu_ms_per_child` sums workers + downstream + postgres + redis-server, the figure bench.compare
reports for SchemaBridge. After each run a check reads every child, the parent, the workers'
counts and the mock's requests (`correct`: every child recorded once and SUCCEEDED, the merge
written once with every output, a request for every child with its own Idempotency-Key;
`repeated_requests` counts calls sent again, which at-least-once allows).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import psutil
import redis

from bench import baseline_asyncio
from bench.common import PG_ADMIN, REDIS_URL, run_like_the_services
from bench.durable_floor_sql import Statements, ddl, drop
from bench.durable_floor_worker import WorkerConfig
from bench.fanout import CpuMeter, code_version, cpu_ms_per_child, downstream_process
from demo.downstream_state import MAX_RECENT

PARENT_ID = 1
POLL_S = 0.05
"""How often the driver looks for the merge (bench.fanout polls the parent run as often)."""
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parent.parent
CPU_ROLES = ("workers", "postgres", "redis-server", "downstream", "driver", "everything_else")


@dataclass(frozen=True)
class Options:
    children: int
    latency_ms: float
    workers: int
    in_flight: int
    prefetch: int
    batch_ms: float
    lease_s: float
    plain_in_flight: int
    dsn: str
    redis_url: str
    timeout_s: float


# ── A: the plain loop ──────────────────────────────────────────────────────────────────────


async def plain_run(opts: Options) -> dict[str, Any]:
    """bench.compare's plain fan-out loop (N POSTs, `plain_in_flight` in flight, aiohttp), with
    the CPU of the loop (`driver`) and of the mock."""
    async with downstream_process(opts.latency_ms) as ds:
        load = os.getloadavg()[0]
        cpu = CpuMeter.begin([], ds.pid)
        async with baseline_asyncio.aiohttp_plain(opts.plain_in_flight) as post:
            result = await baseline_asyncio.one_run(
                post, f"{ds.url}/process", opts.children, opts.plain_in_flight
            )
        used = cpu.used()
        max_concurrent = (await mock_stats(ds.url, 0))["maxConcurrent"]
    per = {role: round(1000 * used[role] / opts.children, 3) for role in ("driver", "downstream")}
    return result | {
        "per_s": result["requests_per_s"],
        "cpu_ms_per_request": per,
        "ds_max_concurrent": max_concurrent,
        "loadavg_1m": round(load, 2),
    }


# ── B: the floor ───────────────────────────────────────────────────────────────────────────


async def mock_stats(base: str, recent: int) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{base}/_stats", params={"recent": str(recent)}, timeout=30)
        result: dict[str, Any] = response.json()
        return result


@dataclass
class WorkerProcess:
    process: asyncio.subprocess.Process
    backend_pids: list[int]


async def start_workers(config: WorkerConfig, count: int) -> list[WorkerProcess]:
    """`count` worker processes, each once it has said it is ready (connected, scripts
    loaded): their start-up is not measured, as bench.fanout waits for its workers' markers."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    started: list[WorkerProcess] = []
    try:
        for i in range(count):
            mine = replace(config, name=f"{config.name}-w{i}")
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.durable_floor_worker", mine.to_json(),
                stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env,
            )  # fmt: skip
            started.append(WorkerProcess(process, []))
        for worker in started:
            assert worker.process.stdout is not None
            line = await asyncio.wait_for(worker.process.stdout.readline(), READY_TIMEOUT_S)
            if not line:
                raise RuntimeError(f"a floor worker exited before it was ready ({config.name})")
            worker.backend_pids = json.loads(line)["backend_pids"]
    except BaseException:
        await stop_workers(started)
        raise
    return started


async def stop_workers(workers: list[WorkerProcess]) -> list[dict[str, Any]]:
    """SIGTERM, then each worker's closing line of counts (SIGKILL after STOP_TIMEOUT_S)."""
    for worker in workers:
        if worker.process.returncode is None:
            worker.process.terminate()
    counts: list[dict[str, Any]] = []
    for worker in workers:
        out = b""
        try:
            out, _ = await asyncio.wait_for(worker.process.communicate(), STOP_TIMEOUT_S)
        except TimeoutError:
            worker.process.kill()
            await worker.process.wait()
        lines = [json.loads(x) for x in out.splitlines() if x.startswith(b"{")]
        counts += [x for x in lines if "stopped" in x]
    return counts


def own_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by these processes (the workers' backends)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


async def floor_run(opts: Options, with_redis: bool) -> dict[str, Any]:
    """One durable fan-out on a fresh schema and a fresh mock; its figures and its check."""
    schema = f"durable_floor_{uuid.uuid4().hex[:8]}"
    sql = Statements(schema)
    admin = await asyncpg.connect(opts.dsn)
    slots_key = f"{schema}:slots:127.0.0.1"
    try:
        await admin.execute(ddl(schema))
        async with downstream_process(opts.latency_ms) as ds:
            config = WorkerConfig(
                dsn=opts.dsn,
                schema=schema,
                url=f"{ds.url}/process",
                in_flight=opts.in_flight,
                prefetch=opts.prefetch,
                batch_ms=opts.batch_ms,
                lease_s=opts.lease_s,
                redis_url=opts.redis_url if with_redis else None,
                slots_key=slots_key,
                deadline_s=opts.timeout_s + READY_TIMEOUT_S,
                name=schema,
            )
            workers = await start_workers(config, opts.workers)
            try:
                result = await measure(opts, sql, admin, workers, ds.pid)
            finally:
                counts = await stop_workers(workers)
            result |= await check(opts, sql, admin, ds.url, counts)
            result["worker_counts"] = counts
    finally:
        try:
            await admin.execute(drop(schema))
        finally:
            await admin.close()
            if with_redis:
                redis.Redis.from_url(opts.redis_url).delete(slots_key)
    return result


async def measure(
    opts: Options,
    sql: Statements,
    admin: asyncpg.Connection,
    workers: list[WorkerProcess],
    downstream_pid: int,
) -> dict[str, Any]:
    """Submit the parent (the clock starts), wait for its merge, count the CPU meanwhile."""
    items = orjson.dumps({"items": [{"id": i} for i in range(opts.children)]}).decode()
    backends = [pid for w in workers for pid in w.backend_pids]
    load = os.getloadavg()[0]
    cpu = CpuMeter.begin([w.process.pid for w in workers], downstream_pid)
    own_start = own_cpu_s(backends)
    started = time.perf_counter()
    await admin.execute(sql.submit, PARENT_ID, opts.children, items)
    merged = False
    while not merged and time.perf_counter() - started < opts.timeout_s:
        if all(w.process.returncode is not None for w in workers):
            break  # no worker left (one that dies is replaced by the others, lease by lease)
        await asyncio.sleep(POLL_S)
        merged = bool(await admin.fetchval(sql.merged, PARENT_ID))
    wall = time.perf_counter() - started
    used = cpu.used()
    used["postgres_own_backends"] = round(own_cpu_s(backends) - own_start, 2)
    per_child = {role: round(1000 * seconds / opts.children, 3) for role, seconds in used.items()}
    return {
        "merged": merged,
        "wall_s": round(wall, 2),
        "per_s": round(opts.children / wall, 1) if merged else 0.0,
        "cpu_s": used,
        "cpu_ms_per_child_by_process": per_child,
        "cpu_ms_per_child": cpu_ms_per_child(used, opts.children),
        "cpu_ms_per_child_without_downstream": round(
            1000 * sum(used[r] for r in ("workers", "postgres", "redis-server")) / opts.children,
            3,
        ),
        "loadavg_1m": round(load, 2),
    }


async def check(
    opts: Options,
    sql: Statements,
    admin: asyncpg.Connection,
    base: str,
    counts: list[dict[str, Any]],
) -> dict[str, Any]:
    """Every child recorded once and SUCCEEDED, the merge once with every output, one request
    per child with a distinct Idempotency-Key (read from the mock's recent requests, which it
    keeps for the last MAX_RECENT only)."""
    n = opts.children
    children = dict(await admin.fetchrow(sql.check_children, PARENT_ID))
    parent = dict(await admin.fetchrow(sql.check_parent, PARENT_ID))
    stats = await mock_stats(base, min(n, MAX_RECENT))
    totals: Counter[str] = Counter()
    for worker in counts:
        totals.update({k: v for k, v in worker.items() if isinstance(v, int)})
    problems = []
    expect = {
        "child rows": (children["rows"], n),
        "distinct items": (children["items"], n),
        "distinct keys": (children["keys"], n),
        "children SUCCEEDED": (children["succeeded"], n),
        "children without output": (children["without_output"], 0),
        "parent succeeded": (parent["succeeded"], n),
        "parent failed": (parent["failed"], 0),
        "merges written": (parent["merges"], 1),
        "merged outputs": (parent["outputs"], n),
        "results recorded by workers": (totals["recorded"], n),
        "late results dropped": (totals["dropped_late"], 0),
        "worker closing lines": (len(counts), opts.workers),
    }
    for what, (got, wanted) in expect.items():
        if got != wanted:
            problems.append(f"{what}: {got}, expected {wanted}")
    # At-least-once: a child's call may be sent again (a retry, a requeue), never not at all.
    if stats["total"] < n:
        problems.append(f"requests to the mock: {stats['total']}, fewer than {n} children")
    if n <= MAX_RECENT and stats["total"] == n:
        sent = [r["idempotencyKey"] for r in stats["recent"]]
        stored = {row["idem_key"] for row in await admin.fetch(sql.keys, PARENT_ID)}
        if len(set(sent)) != n or set(sent) != stored:
            problems.append("the Idempotency-Keys sent are not the children's, one each")
    return {
        "correct": not problems,
        "problems": problems,
        "store_wall_s": round(float(parent["store_wall_s"] or 0.0), 3),
        "max_attempts": children["max_attempts"],
        "requests": stats["total"],
        "repeated_requests": stats["total"] - n,
        "ds_max_concurrent": stats["maxConcurrent"],
        "statements_per_child": round((totals["exchanges"] + totals["spawn_batches"]) / n, 4),
        "evals_per_child": round(totals["evals"] / n, 4),
    }


# ── rounds and summaries ───────────────────────────────────────────────────────────────────


def variants(choice: str) -> list[tuple[str, bool]]:
    both = [("floor", False), ("floor+redis", True)]
    return {"off": both[:1], "on": both[1:], "both": both}[choice]


async def one_round(opts: Options, chosen: list[tuple[str, bool]], no: int) -> list[dict[str, Any]]:
    """A, then each floor variant; returns the floor runs with their round's plain figures."""
    plain = await timed(f"round {no} A plain", plain_run(opts))
    runs = []
    for label, with_redis in chosen:
        floor = await timed(f"round {no} {label}", floor_run(opts, with_redis))
        runs.append({"variant": label, "plain": plain, "floor": floor})
    return runs


async def timed(label: str, run: Any) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = await run
    line = {"run": label, "took_s": round(time.perf_counter() - started, 1)} | result
    print(json.dumps(line), flush=True)
    return result


def ratio(run: dict[str, Any]) -> float:
    plain = run["plain"]["per_s"]
    return round(run["floor"]["per_s"] / plain, 3) if plain else 0.0


def summary(variant: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [r for r in runs if r["variant"] == variant]
    floors = [r["floor"] for r in mine]

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    return {
        "variant": variant,
        "median_ratio": med([ratio(r) for r in mine]),
        "round_ratios": [ratio(r) for r in mine],
        "floor_median_per_s": med([f["per_s"] for f in floors]),
        "plain_median_per_s": med([r["plain"]["per_s"] for r in mine]),
        "floor_median_wall_s": med([f["wall_s"] for f in floors]),
        "median_cpu_ms_per_child": med([f["cpu_ms_per_child"] for f in floors]),
        "median_cpu_ms_per_child_by_process": {
            role: med([f["cpu_ms_per_child_by_process"][role] for f in floors])
            for role in (*CPU_ROLES, "postgres_own_backends")
        },
        "plain_median_cpu_ms_per_request": {
            role: med([r["plain"]["cpu_ms_per_request"][role] for r in mine])
            for role in ("driver", "downstream")
        },
        "every_run_correct": all(f["correct"] for f in floors),
    }


def table(summaries: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | ratio (median) | rounds | floor children/s | plain req/s"
        " | CPU ms/child: workers | postgres (own backends) | redis | downstream | total"
        " | correct |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in summaries:
        by = s["median_cpu_ms_per_child_by_process"]
        rounds = ", ".join(f"{r:.2f}" for r in s["round_ratios"])
        lines.append(
            f"| {s['variant']} | **{s['median_ratio']:.2f}** | {rounds}"
            f" | {s['floor_median_per_s']:,.0f} | {s['plain_median_per_s']:,.0f}"
            f" | {by['workers']:.3f} | {by['postgres']:.3f} ({by['postgres_own_backends']:.3f})"
            f" | {by['redis-server']:.3f} | {by['downstream']:.3f}"
            f" | {s['median_cpu_ms_per_child']:.3f} | {'yes' if s['every_run_correct'] else 'NO'} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (A, then B and/or C)")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="calls in flight per worker (default: --plain-in-flight / --workers, 64 for 2)",
    )
    parser.add_argument(
        "--prefetch", type=int, default=None, help="claimed ahead per worker (default in-flight)"
    )
    parser.add_argument("--batch-ms", type=float, default=5.0, help="least time between cycles")
    parser.add_argument("--lease-s", type=float, default=30.0)
    parser.add_argument(
        "--redis", choices=["off", "on", "both"], default="both", help="the admission EVAL"
    )
    parser.add_argument("--plain-in-flight", type=int, default=128)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("SB_FLOOR_DSN", PG_ADMIN),
        help="a database to create the throwaway schema in (default: SB_FLOOR_DSN or postgres)",
    )
    parser.add_argument(
        "--redis-url", default=REDIS_URL, help="default: SB_BENCH_REDIS_URL, else db 14"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    args = parser.parse_args(argv)
    if args.in_flight is None:
        # As many calls in flight in all as the plain loop keeps (bench.compare runs
        # SchemaBridge's 2 workers x 64 against its 128): more would let the floor beat the
        # loop by concurrency on a mock that answers in a fixed time, not by what it costs.
        args.in_flight = max(1, args.plain_in_flight // args.workers)
    for name in ("children", "workers", "repeat", "in_flight", "plain_in_flight"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    opts = Options(
        children=args.children,
        latency_ms=args.latency_ms,
        workers=args.workers,
        in_flight=args.in_flight,
        prefetch=args.in_flight if args.prefetch is None else args.prefetch,
        batch_ms=args.batch_ms,
        lease_s=args.lease_s,
        plain_in_flight=args.plain_in_flight,
        dsn=args.dsn,
        redis_url=args.redis_url,
        timeout_s=args.timeout,
    )
    return opts, args


async def main(opts: Options, args: argparse.Namespace) -> None:
    # SIGTERM (`timeout`, a CI's stop) cancels like Ctrl-C, so the schema and workers go.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    head = {
        "commit": code_version(),
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "options": {k: v for k, v in vars(opts).items() if k != "dsn"},
    }
    print(json.dumps(head), flush=True)
    chosen = variants(args.redis)
    runs: list[dict[str, Any]] = []
    for no in range(1, args.repeat + 1):
        runs += await one_round(opts, chosen, no)
    summaries = [summary(label, runs) for label, _ in chosen]
    for s in summaries:
        print(json.dumps(s), flush=True)
    print(table(summaries), flush=True)
    if not all(s["every_run_correct"] for s in summaries):
        raise SystemExit("a floor run failed its check: see `problems` in its run line")


if __name__ == "__main__":
    options, arguments = parse_args()
    run_like_the_services(main(options, arguments))
