"""Engine throughput: R runs of an S-step GATEWAY chain against the demo downstream.

    python -m bench.engine --backend postgres --workers 2 --runs 1000 --steps 5 --repeat 3

Reports step transitions per second (steps completed / wall time), the p50/p99 scheduling
delay (a dependency's end → its dependant's start, from the store's timestamps, over 200 runs
spread evenly over the submission order) and the peak RSS of each worker process.
`--workers 0` runs one worker in this process (for profiling:
`pyinstrument -m bench.engine --workers 0 ...`).

Two ways to submit:

* all at once (default): every run is created before the workers start, so the wall time is
  the engine's throughput with a deep queue — and the scheduling delay is mostly the time a
  ready step waits behind the other runs' steps for a free slot (Little's law: ~1,000 ready
  steps against 2 x `--concurrency` slots), not the engine's own latency;
* open loop (`--arrival-rate R`): the workers start first (the driver waits for their
  heartbeats), then runs are submitted at R runs a second, in a batch every 50 ms, whatever
  the engine does meanwhile (as wrk2 does, so a slow engine cannot slow the arrivals down and
  hide its latency). At R = 200 and 5 steps the offered load is 1,000 transitions a second:
  the scheduling delay is then the engine's latency at that throughput. Wall time is from the
  first submission to the last run's success.

    python -m bench.engine --backend postgres --workers 2 --runs 1000 --arrival-rate 200 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from bench.common import (
    RssSampler,
    Timer,
    make_backend,
    median,
    percentile,
    start_workers,
    stop_workers,
    worker_env,
)
from demo.downstream import start_downstream
from demo.downstream_state import DownstreamConfig
from engine.heartbeat import read_services
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.definitions import Workflow


def chain(base: str, steps: int) -> Workflow:
    return Workflow.model_validate(
        {
            "name": "bench-chain",
            "vertices": {
                f"s{i}": {
                    "type": "GATEWAY",
                    "dependsOn": [f"s{i - 1}"] if i else [],
                    "config": {"url": f"{base}/s{i}", "method": "POST", "body": {"i": i}},
                }
                for i in range(steps)
            },
        }
    )


async def scheduling_delays(runtime: Runtime, run_ids: list[str], sample: int = 200) -> list[float]:
    delays: list[float] = []
    # Spread over the submission order: the first runs submitted at once are claimed first
    # and wait least.
    for run_id in run_ids[:: max(1, len(run_ids) // sample)][:sample]:
        steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
        for vid, step in steps.items():
            index = int(vid[1:])
            if index == 0:
                continue
            dep = steps[f"s{index - 1}"]
            if step.started_at is not None and dep.ended_at is not None:
                delays.append((step.started_at - dep.ended_at) * 1000)
    return delays


async def once(args: argparse.Namespace) -> dict[str, Any]:
    backend = await make_backend(args.backend)
    downstream = await start_downstream(config=DownstreamConfig(latency_ms=args.latency_ms))
    settings = Settings(
        database_url=backend.database_url,
        redis_url=backend.redis_url,
        worker_concurrency=args.concurrency,
    )
    runtime = await Runtime.open(settings)
    try:
        version = await runtime.store.publish(chain(downstream.url, args.steps))
        run_ids: list[str] = []
        if not args.arrival_rate:
            for start in range(0, args.runs, 500):
                batch = [{"n": i} for i in range(start, min(args.runs, start + 500))]
                run_ids += await runtime.store.create_runs(version, batch)
        env = worker_env(backend, worker_concurrency=str(args.concurrency))
        stop = asyncio.Event()
        procs = start_workers(env, args.workers, f"engine-{args.backend}")
        sampler = RssSampler([p.pid for p in procs])
        sampling = asyncio.create_task(sampler.run(stop))
        local = None
        if args.workers == 0:
            local = asyncio.create_task(runtime.worker().run(stop))
        submitting = None
        if args.arrival_rate:
            await workers_up(runtime, {p.pid for p in procs}, timeout_s=60)
            submitting = asyncio.create_task(submit_open_loop(runtime, version, args, run_ids))
        with Timer() as timer:
            async with asyncio.timeout(args.timeout):
                while await runtime.store.count_runs("SUCCEEDED") < args.runs:
                    await asyncio.sleep(0.05)
        if submitting is not None:
            await submitting
        stop.set()
        await sampling
        if local is not None:
            await local
        stop_workers(procs)
        delays = await scheduling_delays(runtime, run_ids)
        transitions = args.runs * args.steps
        return {
            "arrival_rate": args.arrival_rate or None,
            "wall_s": round(timer.elapsed, 2),
            "transitions_per_s": round(transitions / timer.elapsed, 1),
            "sched_p50_ms": round(percentile(delays, 50), 1),
            "sched_p99_ms": round(percentile(delays, 99), 1),
            "worker_peak_rss_mb": sampler.peaks_mb(),
            "requests": downstream.stats.total,
        }
    finally:
        await runtime.close()
        await downstream.stop()
        await backend.drop()


async def workers_up(runtime: Runtime, pids: set[int], *, timeout_s: float) -> None:
    """Wait until every worker process beats (it has started its claim loop)."""
    async with asyncio.timeout(timeout_s):
        while True:
            services = await read_services(runtime.redis, runtime.clock)
            if pids <= {s.pid for s in services if s.up}:
                return
            await asyncio.sleep(0.1)


async def submit_open_loop(
    runtime: Runtime, version: Any, args: argparse.Namespace, run_ids: list[str]
) -> None:
    """Create `args.runs` runs at `args.arrival_rate` a second, a batch every 50 ms, on the
    schedule (a late batch catches up; arrivals never wait for the engine)."""
    started = time.perf_counter()
    passes = int(args.runs / (args.arrival_rate * 0.05)) + 100  # the schedule, plus margin
    for _ in range(passes):
        if len(run_ids) >= args.runs:
            return
        due = min(args.runs, int((time.perf_counter() - started) * args.arrival_rate) + 1)
        if due > len(run_ids):
            batch = [{"n": i} for i in range(len(run_ids), due)]
            run_ids += await runtime.store.create_runs(version, batch)
            await runtime.wakeup.notify()
        await asyncio.sleep(0.05)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--arrival-rate", type=float, default=0.0, help="runs/s, open loop (0: all at once)"
    )
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    results = [await once(args) for _ in range(args.repeat)]
    for result in results:
        print(json.dumps(result))
    summary = {
        "backend": args.backend,
        "workers": args.workers,
        "runs": args.runs,
        "steps": args.steps,
        "arrival_rate": args.arrival_rate or None,
        "median_transitions_per_s": median([r["transitions_per_s"] for r in results]),
        "median_sched_p50_ms": median([r["sched_p50_ms"] for r in results]),
        "median_sched_p99_ms": median([r["sched_p99_ms"] for r in results]),
        "max_worker_rss_mb": max(max(r["worker_peak_rss_mb"] or [0]) for r in results),
    }
    print("summary", json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
