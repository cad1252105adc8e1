"""Engine throughput: R runs of an S-step GATEWAY chain against the demo downstream.

    python -m bench.engine --backend postgres --workers 2 --runs 1000 --steps 5 --repeat 3

Reports step transitions per second (steps completed / wall time), the p50/p99 scheduling
delay (a dependency's end → its dependant's start, from the store's timestamps) and the peak
RSS of each worker process. `--workers 0` runs one worker in this process (for profiling:
`pyinstrument -m bench.engine --workers 0 ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
    for run_id in run_ids[:sample]:
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
        with Timer() as timer:
            async with asyncio.timeout(args.timeout):
                while await runtime.store.count_runs("SUCCEEDED") < args.runs:
                    await asyncio.sleep(0.05)
        stop.set()
        await sampling
        if local is not None:
            await local
        stop_workers(procs)
        delays = await scheduling_delays(runtime, run_ids)
        transitions = args.runs * args.steps
        return {
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
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
        "median_transitions_per_s": median([r["transitions_per_s"] for r in results]),
        "median_sched_p50_ms": median([r["sched_p50_ms"] for r in results]),
        "median_sched_p99_ms": median([r["sched_p99_ms"] for r in results]),
        "max_worker_rss_mb": max(max(r["worker_peak_rss_mb"] or [0]) for r in results),
    }
    print("summary", json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
