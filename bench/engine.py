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
  heartbeats), then runs are submitted at R runs a second on average: every 50 ms the runs
  due by then, whatever the engine does meanwhile (as wrk2 does, so a slow engine cannot slow
  the arrivals down and hide its latency; a slow insert makes the next batch larger, and the
  JSON line says how the schedule was kept). At R = 200 and 5 steps the offered load is 1,000
  transitions a second: the scheduling delay is then the engine's latency at that load.
  Wall time is from the first submission to the last run's success seen (polled every 50 ms),
  so transitions/s can only approach the offered rate, not exceed it.

    python -m bench.engine --backend postgres --workers 2 --runs 1000 --concurrency 256 \
        --arrival-rate 200 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from typing import Any

from bench import as_user
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
from engine.coordination.heartbeat import read_services
from engine.operations import Operations
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


async def scheduling_delays(ops: Operations, run_ids: list[str], sample: int = 200) -> list[float]:
    delays: list[float] = []
    # Spread evenly over the submission order: the first runs submitted at once are claimed
    # first and wait least.
    count = min(sample, len(run_ids))
    for run_id in (run_ids[i * len(run_ids) // count] for i in range(count)):
        steps = {s.vertex_id: s for s in (await ops.runs.get(run_id)).steps}
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
    stop = asyncio.Event()
    procs: list[subprocess.Popen[bytes]] = []
    tasks: list[asyncio.Task[Any]] = []
    try:
        ops = Operations(runtime)
        workflow = chain(downstream.url, args.steps)
        await as_user.publish(ops, [workflow])
        # Runs are created in bulk on the store (one insert per batch of up to 500): the load
        # generator's schedule, not a user's submissions one by one, is what is measured.
        version = await runtime.store.get_version(workflow.name)
        run_ids: list[str] = []
        if not args.arrival_rate:
            for start in range(0, args.runs, 500):
                batch = [{"n": i} for i in range(start, min(args.runs, start + 500))]
                run_ids += await runtime.store.create_runs(version, batch)
        env = worker_env(backend, worker_concurrency=str(args.concurrency))
        tag = f"engine-{args.backend}"
        procs = start_workers(env, args.workers, tag)
        sampler = RssSampler([p.pid for p in procs])
        tasks.append(asyncio.create_task(sampler.run(stop)))
        if args.workers == 0:
            tasks.append(asyncio.create_task(runtime.worker().run(stop)))
        submitting = None
        if args.arrival_rate:
            names = {f"{tag}-w{i}" for i in range(args.workers)}
            await workers_up(runtime, names, timeout_s=60)
            submitting = asyncio.create_task(submit_open_loop(runtime, version, args, run_ids))
            tasks.append(submitting)
        with Timer() as timer:
            async with asyncio.timeout(args.timeout):
                # A count no operation gives (a list would page through every run each 50 ms).
                while await runtime.store.count_runs("SUCCEEDED") < args.runs:
                    if submitting is not None and submitting.done():
                        submitting.result()  # raises what made it stop early
                    await asyncio.sleep(0.05)
        submission = await submitting if submitting is not None else {}
        stop.set()
        await asyncio.gather(*tasks)
        delays = await scheduling_delays(ops, run_ids)
        transitions = args.runs * args.steps
        return {
            "arrival_rate": args.arrival_rate or None,
            "concurrency": args.concurrency,
            "wall_s": round(timer.elapsed, 2),
            "transitions_per_s": round(transitions / timer.elapsed, 1),
            "sched_p50_ms": round(percentile(delays, 50), 1),
            "sched_p99_ms": round(percentile(delays, 99), 1),
            "worker_peak_rss_mb": sampler.peaks_mb(),
            "requests": downstream.stats.total,
            **submission,
        }
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stop_workers(procs)
        await runtime.close()
        await downstream.stop()
        await backend.drop()


async def workers_up(runtime: Runtime, names: set[str], *, timeout_s: float) -> None:
    """Wait until every worker service beats (its heartbeat starts beside its worker loop).
    By service name, not pid: with SB_BENCH_PYSPY the process started is py-spy."""
    async with asyncio.timeout(timeout_s):
        while True:
            services = await read_services(runtime.redis, runtime.clock)
            if names <= {s.name for s in services if s.up}:
                return
            await asyncio.sleep(0.1)


async def submit_open_loop(
    runtime: Runtime, version: Any, args: argparse.Namespace, run_ids: list[str]
) -> dict[str, Any]:
    """Create `args.runs` runs at `args.arrival_rate` a second on average: every 50 ms, the
    runs due by then (so a slow insert makes the next batch larger; arrivals never wait for
    the engine to finish anything). Returns how the schedule was kept."""
    started = time.perf_counter()
    passes = int(args.runs / (args.arrival_rate * 0.05)) + 100  # the schedule, plus margin
    batches, largest = 0, 0
    for _ in range(passes):
        if len(run_ids) >= args.runs:
            break
        due = min(args.runs, int((time.perf_counter() - started) * args.arrival_rate) + 1)
        if due > len(run_ids):
            batch = [{"n": i} for i in range(len(run_ids), due)]
            # In bulk on the store (see `once`): one insert per batch keeps the schedule.
            run_ids += await runtime.store.create_runs(version, batch)
            await runtime.wakeup.notify()
            batches, largest = batches + 1, max(largest, len(batch))
        await asyncio.sleep(0.05)
    if len(run_ids) < args.runs:
        raise RuntimeError(f"submitted {len(run_ids)} of {args.runs} runs in {passes} passes")
    return {
        "submission_batches": batches,
        "largest_batch": largest,
        "last_submitted_s": round(time.perf_counter() - started, 3),
        "scheduled_last_s": round((args.runs - 1) / args.arrival_rate, 3),
    }


def positive_or_zero(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (all at once) or a positive rate")
    return value


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
        "--arrival-rate",
        type=positive_or_zero,
        default=0.0,
        help="runs/s, open loop (0: all at once)",
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
