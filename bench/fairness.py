"""Admission benchmark 4 of issue 5: fairness between tenants.

    python -m bench.fairness --a-children 50000 --b-runs 100
    python -m bench.fairness --a-children 50000 --b-destination other

Tenant A (`tenant-a`) submits one fan-out of `--a-children` children (`SPAWNER over
{{ input.items }}` → child with one GATEWAY POST to the demo downstream → MERGE); once A has
been running for `--b-after` seconds, tenant B (`tenant-b`) submits `--b-runs` single-step runs
(one GATEWAY POST each), spread evenly over `--b-spread-s` seconds (0: all in one burst),
each submitted as the API does (`ops.runs.submit`, which wakes the workers). Both tenants'
rate limits are raised (bench/common.worker_env: 10^8 per minute), so only scheduling (claims
round-robin across tenants) and admission protect B. By default B calls the same destination as A
(`bench-downstream`, one AIMD limit, default cap 100); `--b-destination other` gives B its own
key. The downstream: own process, `--latency-ms` (50), no capacity limit. Workers: `--workers`
(2) x `--concurrency` (64, the engine's default).

Printed: B's run latency (run created_at → ended_at, from the store) p50 / p95 / max, split
into `claim_delay` (created → its step started) and `exec` (step started → run ended); A's
progress when B started and when B's last run ended (A must still be RUNNING for the
measurement to count), and, with `--wait-a` (default), A's wall time and children/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from typing import Any

from sqlalchemy import text

from bench import as_user
from bench.admission_common import (
    DESTINATION,
    DownstreamControl,
    StatusPoller,
    child_workflow,
    downstream_process,
    fresh_backend,
    items,
    loadavg,
    other_benchmarks,
    publish_fanout,
    start_fleet,
    wait_for_run,
)
from bench.common import percentile
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings

B_RUNS = text(
    """
    SELECT r.id, r.status, r.created_at, r.ended_at, s.started_at AS step_started, s.attempts
    FROM run r JOIN step s ON s.run_id = r.id
    WHERE r.tenant_id = 'tenant-b'
    """
)


async def b_rows(poller: StatusPoller) -> list[Any]:
    async with poller.engine.connect() as conn:
        return list((await conn.execute(B_RUNS)).all())


def dist(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3),
        "mean": round(statistics.fmean(values), 3),
    }


async def once(args: argparse.Namespace) -> dict[str, Any]:  # noqa: PLR0915
    backend = await fresh_backend()
    settings = Settings(
        database_url=backend.database_url,
        redis_url=backend.redis_url,
        worker_concurrency=args.concurrency,
        # B must get in at the door whatever the depth of A's queue: this measures
        # scheduling, not the submission high-water mark (50,000 READY steps by default).
        submit_max_ready=100_000_000,
    )
    result: dict[str, Any] = {
        "a_children": args.a_children,
        "b_runs": args.b_runs,
        "b_destination": args.b_destination,
    }
    async with downstream_process(args.latency_ms) as ds:
        runtime = await Runtime.open(settings)
        control = DownstreamControl(ds.url)
        poller = StatusPoller(backend.database_url)
        fleet = None
        try:
            ops = Operations(runtime)
            parent = await publish_fanout(ops, child_workflow(ds.url))
            b_dest = DESTINATION if args.b_destination == "same" else "bench-dest-b"
            workflow_b = child_workflow(ds.url, name="bench-fair-b", destination=b_dest)
            await as_user.publish(ops, [workflow_b])
            fleet = await start_fleet(
                backend, args.workers, "sbfair", worker_concurrency=str(args.concurrency)
            )
            result["loadavg_before"] = loadavg()
            started = time.perf_counter()
            run_a = await as_user.submit(ops, parent, items(args.a_children), tenant_id="tenant-a")
            await asyncio.sleep(args.b_after)
            # Counters straight from the store: ops.runs.get would decode A's input and read
            # its log mid-measurement, and no operation gives the ready-queue depth.
            result["a_progress_at_b_start"] = await runtime.store.fanout_progress(run_a)
            result["ready_depth_at_b_start"] = await runtime.store.ready_depth()
            pause = args.b_spread_s / args.b_runs if args.b_runs else 0
            b_started = time.perf_counter()
            for i in range(args.b_runs):
                await as_user.submit(ops, workflow_b.name, {"id": i}, tenant_id="tenant-b")
                if pause:
                    await asyncio.sleep(pause)
            async with asyncio.timeout(args.timeout):
                while True:
                    rows = await b_rows(poller)
                    if len(rows) == args.b_runs and all(r.status != "RUNNING" for r in rows):
                        break
                    await asyncio.sleep(0.1)
            b_done = time.perf_counter()
            a_status = await poller.status(run_a)
            result["a_status_when_b_done"] = a_status
            result["a_progress_when_b_done"] = await runtime.store.fanout_progress(run_a)
            result["b_window_s"] = round(b_done - b_started, 2)
            result["b_statuses"] = dict(Counter(r.status for r in rows))
            result["b_latency_s"] = dist([r.ended_at - r.created_at for r in rows if r.ended_at])
            result["b_claim_delay_s"] = dist(
                [r.step_started - r.created_at for r in rows if r.step_started]
            )
            result["b_exec_s"] = dist(
                [r.ended_at - r.step_started for r in rows if r.ended_at and r.step_started]
            )
            result["b_step_attempts"] = dict(Counter(r.attempts for r in rows))
            if args.wait_a:
                status = await wait_for_run(
                    poller, runtime.store, run_a, args.timeout, label="A", progress_every_s=30
                )
                wall = time.perf_counter() - started
                result["a_status"] = status
                result["a_wall_s"] = round(wall, 1)
                result["a_children_per_s"] = round(args.a_children / wall, 1)
                result["a_children"] = await poller.children(run_a)
            result["loadavg_after"] = loadavg()
            result["foreign_workers_at_end"] = len(other_benchmarks())
            result["downstream_requests"] = (await control.stats())["total"]
        finally:
            if fleet is not None:
                fleet.stop()
            await poller.close()
            await control.close()
            await runtime.close()
            await backend.drop()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a-children", type=int, default=50_000)
    parser.add_argument("--b-runs", type=int, default=100)
    parser.add_argument("--b-after", type=float, default=20.0)
    parser.add_argument("--b-spread-s", type=float, default=10.0)
    parser.add_argument("--b-destination", choices=["same", "other"], default="same")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="per worker")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--wait-a", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    others = other_benchmarks()
    if others:
        print("WARNING: other workers are running:", *others, sep="\n  ", flush=True)
    result = await once(args)
    print(json.dumps(result), flush=True)
    p95 = result["b_latency_s"].get("p95", float("inf"))
    summary = {
        "b_latency_p50_s": result["b_latency_s"].get("p50"),
        "b_latency_p95_s": p95,
        "goal_p95_under_2s": p95 < 2.0,
        "a_still_running_when_b_done": result["a_status_when_b_done"] == "RUNNING",
        "a_children": args.a_children,
        "a_wall_s": result.get("a_wall_s"),
    }
    print("summary", json.dumps(summary), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
