"""The fan-out of bench/fanout.py on arq, the peer issue 17 compares SchemaBridge with.

    python -m bench.arq_fanout --children 10000 --workers 2 --max-jobs 64 --repeat 3
    python -m bench.arq_fanout --children 1000 --repeat 1                  # a quick try
    SB_BENCH_REDIS_URL=redis://127.0.0.1:6379/13 python -m bench.arq_fanout --children 1000

arq is in pyproject.toml's `peers` extra, not `dev`: it pins redis-py below 6 and the project
runs redis-py 8. Install it without its pins, `pip install --no-deps 'arq>=0.26'`; arq's calls
(WATCH/MULTI pipelines, GET, ZADD, ZRANGEBYSCORE) work on redis-py 8.

The same shape as bench/fanout.py: one parent, N children, each child one POST of its item
(`{"id": i}`, with bench.fanout's small-answer headers) to the demo downstream, which runs in its
own process (`bench.fanout.downstream_process`) and answers `POST /process` after
`--latency-ms` (20 ms); then a join. Here:

* the parent (this process) enqueues N arq jobs, one per item, with `_job_id = "item-<i>"` (a
  stable per-item idempotency key: arq refuses a second job with the same id while the first or
  its result exists), 16 enqueues in flight;
* `--workers` (2) arq worker processes (`python -m bench.arq_worker …`: arq's Worker on uvloop,
  the loop `schemabridge worker` runs on) with `max_jobs` = `--max-jobs` (64) each: 128 in
  flight, what SchemaBridge's 2 workers x 64 hold. Each worker opens one aiohttp session
  (connection limit `max_jobs`) in `on_startup` and closes it in `on_shutdown`; a job returns
  the HTTP status;
* the join: every 50 ms (bench.fanout's status poll) the parent reads the results of the
  pending jobs in enqueue order, pipelined 500 GETs at a time, and stops reading at the first
  500 with one still pending (results arrive about in queue order: reading all 10,000 every
  50 ms would load the Redis being measured). The run ends when every job has a result.

arq's configuration, chosen for throughput and said here because an unfair peer would make the
comparison dishonest: `poll_delay` is `--poll-delay` (0.02 s; arq's default 0.5 s). An arq
worker has no wake-up: it reads the queue (up to `queue_read_limit` = 5 x max_jobs ids, arq's
default) and starts those jobs, then sleeps what remains of `poll_delay`. When it runs dry its
last jobs finish in ~20 ms and it idles until the next read, so a delay above the child's
latency leaves slots empty; at 0.02 s an idle worker makes 50 cheap reads a second. Results are
kept for arq's default `keep_result` (3600 s; the join reads them) and `max_tries` is arq's 5;
nothing fails here, so no job is retried. The Redis database (`SB_BENCH_REDIS_URL`, db 12
unless set) is FLUSHDB'd before each run (never FLUSHALL): the job ids repeat between runs.

Reported per run (one JSON line each, then a `summary` line):

* `wall_s` — the first enqueue → the last result seen; `children_per_s` — N / wall_s;
  `enqueue_s` — the first → the last enqueue (the workers start meanwhile);
* `ok` — jobs whose result is HTTP 200; `errors` — the others (failed, non-200, or no result
  by `--timeout`); `requests` — requests the downstream counted;
* `cpu_s` — CPU seconds during the run by the arq workers, this driver (the enqueues and the
  join), the downstream, every `redis-server` (and `postgres`) process and `everything_else`
  on the machine (shared: other users count); `cpu_ms_per_child` — workers + downstream +
  Redis per child (bench.fanout's sum without PostgreSQL, which arq does not use: what it
  shows is other users' work);
  `cpu_ms_per_child_with_driver` adds the driver, which enqueues here while SchemaBridge's
  spawner runs in its workers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import redis
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import result_key_prefix
from arq.jobs import deserialize_result

from bench.arq_worker import JOB, READY_KEY
from bench.common import RssSampler, median
from bench.fanout import (
    SMALL_ANSWER,
    CpuMeter,
    code_version,
    downstream_process,
    downstream_requests,
)

ENQUEUERS = 16
"""Enqueues in flight: arq's enqueue is three round trips (WATCH, EXISTS, MULTI…EXEC)."""
JOIN_POLL_S = 0.05
JOIN_BATCH = 500
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
STARTED_UTC = "%Y-%m-%d %H:%M"
CHILD_CPU_ROLES = ("workers", "downstream", "redis-server")
"""What a child costs: bench.fanout.CHILD_CPU_ROLES without `postgres`, unused by arq."""
REDIS_URL = os.environ.get("SB_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
"""FLUSHDB'd before every run: db 12 unless SB_BENCH_REDIS_URL says otherwise, not the db 14 of
bench.common, so that this benchmark never wipes a SchemaBridge benchmark's state."""


# ── the driver ─────────────────────────────────────────────────────────────────────────────


def flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def start_workers(args: argparse.Namespace, downstream: str) -> list[subprocess.Popen[bytes]]:
    command = [
        sys.executable, "-m", "bench.arq_worker", "--redis-url", args.redis_url,
        "--downstream", downstream, "--max-jobs", str(args.max_jobs),
        "--poll-delay", str(args.poll_delay), "--headers", json.dumps(SMALL_ANSWER),
    ]  # fmt: skip
    return [subprocess.Popen(command) for _ in range(args.workers)]


def stop_workers(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()  # arq cancels its jobs and runs on_shutdown
    for proc in procs:
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_ready(pool: ArqRedis, procs: Sequence[subprocess.Popen[bytes]]) -> None:
    deadline = time.perf_counter() + READY_TIMEOUT_S
    keys = [f"{READY_KEY}{p.pid}" for p in procs]
    while time.perf_counter() < deadline:
        if await pool.exists(*keys) == len(keys):
            return
        dead = [p.pid for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"arq worker(s) {dead} exited before they were ready")
        await asyncio.sleep(0.1)
    raise RuntimeError(f"arq workers not ready after {READY_TIMEOUT_S:.0f} s")


def job_id(item: int) -> str:
    return f"item-{item}"


async def enqueue_all(pool: ArqRedis, children: int) -> int:
    """Enqueue one job per item, `ENQUEUERS` at a time; how many arq accepted."""
    counter = itertools.count()
    accepted = 0

    async def enqueuer() -> None:
        nonlocal accepted
        while (item := next(counter)) < children:  # bounded: the shared counter reaches N
            if await pool.enqueue_job(JOB, item, _job_id=job_id(item)) is not None:
                accepted += 1

    async with asyncio.TaskGroup() as group:
        for _ in range(min(ENQUEUERS, children)):
            group.create_task(enqueuer())
    return accepted


async def join(pool: ArqRedis, children: int, deadline: float) -> tuple[int, int, int]:
    """Wait for every job's result until `deadline` (perf_counter); (ok, failed, pending)."""
    pending = [job_id(i) for i in range(children)]
    ok = failed = 0
    while pending and time.perf_counter() < deadline:
        done: set[str] = set()
        for start in range(0, len(pending), JOIN_BATCH):
            batch = pending[start : start + JOIN_BATCH]
            async with pool.pipeline(transaction=False) as pipe:
                for jid in batch:
                    pipe.get(result_key_prefix + jid)
                values = await pipe.execute()
            for jid, value in zip(batch, values, strict=True):
                if value is None:
                    continue
                done.add(jid)
                result = deserialize_result(value)
                if result.success and result.result == 200:
                    ok += 1
                else:
                    failed += 1
            if len(done) < start + len(batch):
                break  # one of this batch is still running: later ones mostly are too
        pending = [jid for jid in pending if jid not in done]
        if pending:
            await asyncio.sleep(JOIN_POLL_S)
    return ok, failed, len(pending)


async def once(args: argparse.Namespace) -> dict[str, Any]:
    """One measured run: fresh Redis db, fresh downstream, fresh workers."""
    flush(args.redis_url)
    async with downstream_process(args.latency_ms) as downstream:
        procs = start_workers(args, downstream.url)
        pool = await create_pool(RedisSettings.from_dsn(args.redis_url))
        stop = asyncio.Event()
        sampling: asyncio.Task[None] | None = None
        try:
            await wait_ready(pool, procs)
            pids = [p.pid for p in procs]
            sampler = RssSampler(pids)
            sampling = asyncio.create_task(sampler.run(stop))
            load_before = os.getloadavg()
            cpu = CpuMeter.begin(pids, downstream.pid)
            started = time.perf_counter()
            accepted = await enqueue_all(pool, args.children)
            enqueued = time.perf_counter()
            ok, failed, pending = await join(pool, args.children, started + args.timeout)
            wall = time.perf_counter() - started
            cpu_used = cpu.used()
            load_after = os.getloadavg()
            requests = await downstream_requests(downstream.url)
        finally:
            stop.set()
            if sampling is not None:
                await sampling
            await pool.aclose()
            stop_workers(procs)
    per_child = {
        "cpu_ms_per_child": _cpu_ms(cpu_used, CHILD_CPU_ROLES, args.children),
        "cpu_ms_per_child_with_driver": _cpu_ms(
            cpu_used, (*CHILD_CPU_ROLES, "driver"), args.children
        ),
    }
    return {
        "commit": code_version(),
        "peer": "arq",
        "workers": args.workers,
        "max_jobs": args.max_jobs,
        "poll_delay_s": args.poll_delay,
        "children": args.children,
        "succeeded": ok == args.children,
        "wall_s": round(wall, 2),
        "children_per_s": round(args.children / wall, 1),
        "enqueue_s": round(enqueued - started, 2),
        "accepted": accepted,
        "ok": ok,
        "errors": failed + pending,
        "pending_at_timeout": pending,
        "requests": requests,
        "worker_peak_rss_mb": sampler.peaks_mb(),
        "cpu_s": cpu_used,
        **per_child,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def _cpu_ms(used: dict[str, float], roles: Sequence[str], children: int) -> float:
    return round(1000 * sum(used.get(role, 0.0) for role in roles) / children, 3)


def summary_of(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [r for r in results if r["succeeded"]]
    return {
        "peer": "arq",
        "workers": args.workers,
        "max_jobs": args.max_jobs,
        "children": args.children,
        "latency_ms": args.latency_ms,
        "poll_delay_s": args.poll_delay,
        "runs": len(results),
        "finished": len(finished),
        "median_wall_s": median([r["wall_s"] for r in finished]) if finished else None,
        "median_children_per_s": (
            median([r["children_per_s"] for r in finished]) if finished else None
        ),
        "median_cpu_ms_per_child": median([r["cpu_ms_per_child"] for r in results]),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="arq worker processes")
    parser.add_argument("--max-jobs", type=int, default=64, help="jobs in flight per worker")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument(
        "--poll-delay", type=float, default=0.02, help="arq's poll_delay, seconds (arq: 0.5)"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900, help="per run, seconds")
    parser.add_argument(
        "--redis-url", default=REDIS_URL, help="FLUSHDB'd before each run (SB_BENCH_REDIS_URL)"
    )
    args = parser.parse_args(argv)
    if args.children < 1 or args.workers < 1 or args.max_jobs < 1:
        parser.error("--children, --workers and --max-jobs must be at least 1")
    return args


async def main(args: argparse.Namespace) -> None:
    print(
        json.dumps(
            {
                "started_utc": time.strftime(STARTED_UTC, time.gmtime()),
                "cpus": os.cpu_count(),
                "redis": args.redis_url,
                "arq": _version("arq"),
                "redis_py": _version("redis"),
            }
        ),
        flush=True,
    )
    results = []
    for _ in range(args.repeat):
        result = await once(args)
        print(json.dumps(result), flush=True)
        results.append(result)
    print("summary", json.dumps(summary_of(args, results)), flush=True)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version(package)
    return "unknown"


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
