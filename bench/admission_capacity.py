"""Admission benchmarks 1 and 2 of issue 5: capacity and adaptation (AIMD per destination).

    # capacity: 5,000 children against a downstream of 20 concurrent x 50 ms (400 req/s)
    python -m bench.admission_capacity --scenario capacity --ratios 0.5,0.7,0.9
    # the comparison: AIMD off, fixed concurrency 200 (worker concurrency 100 x 2 workers)
    python -m bench.admission_capacity --scenario capacity --admission off
    # the engine's own ceiling for this fan-out: AIMD off, downstream unlimited
    python -m bench.admission_capacity --scenario capacity --admission off --capacity 0
    # adaptation: capacity 20 → 10 at 10 s → 20 at 30 s, 20,000 children
    python -m bench.admission_capacity --scenario adapt --ratios 0.9 --children 20000

One parent run on PostgreSQL + Redis: `SPAWNER over {{ input.items }}` → child run with one
GATEWAY POST to the demo downstream (admission key `bench-downstream`, its cap set to 500 with
`Operations.settings.set_caps`; `SCHEMABRIDGE_DEFAULT_MAX_CONCURRENCY=1000`) → MERGE that
tolerates failed children (so the parent always ends and the children's statuses are counted).
The downstream runs in its own process: `--latency-ms` (50) per request, beyond `--capacity`
(20) concurrent requests an immediate 429 with `Retry-After: 1`. Workers: `--workers` (2)
`schemabridge worker` processes with `--concurrency` (100) steps in flight each; the tenant's
rate limit is raised (bench/common.py). Each configuration uses a fresh database.

The driver opens its own `Runtime` on the same database and Redis and samples
`Admission.snapshot()` (the destination's limit) and the downstream's counters every
`--trace-ms` (200) ms. Printed per run (one JSON line, then `summary` lines):

* `wall_s` — the parent's creation → its status observed not RUNNING (polled every 50 ms);
* `goodput_pct` — children / wall_s as a share of the downstream's capacity
  (capacity x 1000 / latency_ms req/s); the goal is ≥ 90 % (wall < 14 s for 5,000);
* `requests`, `r429`, `share429` — what the downstream answered (goal ≤ 5 % 429s);
* `children` — children by status (goal: all SUCCEEDED);
* `limit` — the AIMD limit's mean / min / max after the first second, and `cuts`;
* `ds_in_flight_mean` — the downstream's mean in-flight count (its busy share x capacity);
* `first_call_s`, `last_answer_s` — when the downstream saw the first call arrive and the
  last one answered, in seconds after the submission (what `wall_s` spends before any slot
  is busy, and after the last).

`adapt` also prints the 429 share per 1 s window after the drop, when it first / for good
falls under 2 % (goal within 10 s), and how long the limit takes to reach 80 % of the new
capacity after the rise (goal within 60 s). Plots: `--plot NAME` → bench/plots/NAME.png.

Experiments (not settings): `--breaker-thresholds 1000,1000` runs the workers through
`python -m bench.admission_common worker …`, which replaces the tenant/global breakers'
consecutive-failure thresholds (5/15) in the worker's AdmissionConfig, to measure AIMD without
the breakers reacting to 429s. `--profile-s S` samples every worker with py-spy for S seconds
from 3 s into the run and prints self time by function and inclusive time by area.
Set `SB_BENCH_REDIS_URL` to use another Redis db than 14 (see bench/admission_common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench import as_user
from bench.admission_common import (
    DESTINATION,
    DownstreamControl,
    StatusPoller,
    Tracer,
    call_span,
    child_workflow,
    downstream_process,
    fresh_backend,
    items,
    loadavg,
    log_reasons,
    other_benchmarks,
    plot_path,
    plot_runs,
    profile,
    publish_fanout,
    slot_turnaround,
    start_fleet,
    step_windows,
    summarize_profile,
    wait_for_run,
)
from bench.common import OUT
from demo.downstream_state import MAX_RECENT
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings


async def schedule(
    control: DownstreamControl, tracer: Tracer, plan: list[tuple[float, int]], t0: float
) -> None:
    """Apply `(at_s, capacity)` changes at their times (seconds since t0)."""
    for at_s, capacity in plan:
        await asyncio.sleep(max(0.0, t0 + at_s - time.time()))
        await control.configure(capacity=capacity)
        tracer.mark(f"capacity {capacity}")


async def once(args: argparse.Namespace, ratio: float | None) -> dict[str, Any]:  # noqa: PLR0915
    admission = ratio is not None
    capacity = args.capacity or None
    backend = await fresh_backend()
    fixed = "fixed" if capacity else "ceiling"
    label = f"{args.scenario}-{'aimd' + str(ratio) if admission else fixed}"
    if args.breaker_thresholds:
        label += "-bt" + args.breaker_thresholds.replace(",", "-")
    tag = f"sbadm-{label}"
    settings = Settings(
        database_url=backend.database_url,
        redis_url=backend.redis_url,
        admission_enabled=admission,
        aimd_backoff_ratio=ratio or 0.9,
        default_max_concurrency=1000,
        worker_concurrency=args.concurrency,
    )
    worker_settings = {
        "worker_concurrency": str(args.concurrency),
        "admission_enabled": str(admission).lower(),
        "default_max_concurrency": "1000",
    }
    if ratio is not None:
        worker_settings["aimd_backoff_ratio"] = str(ratio)
    result: dict[str, Any] = {"scenario": args.scenario, "label": label, "ratio": ratio}
    async with downstream_process(args.latency_ms, capacity, args.retry_after) as ds:
        runtime = await Runtime.open(settings)
        control = DownstreamControl(ds.url)
        poller = StatusPoller(backend.database_url)
        fleet = None
        try:
            ops = Operations(runtime)
            parent = await publish_fanout(ops, child_workflow(ds.url))
            if admission:
                await ops.settings.set_caps(DESTINATION, args.cap)
            thresholds = None
            if args.breaker_thresholds:
                tenant, global_ = args.breaker_thresholds.split(",")
                thresholds = (int(tenant), int(global_))
                result["breaker_thresholds_experiment"] = list(thresholds)
            fleet = await start_fleet(
                backend, args.workers, tag, breaker_thresholds=thresholds, **worker_settings
            )
            load_before = loadavg()
            t0 = time.time()
            tracer = Tracer(runtime, control, t0, period_s=args.trace_ms / 1000)
            stop = asyncio.Event()
            tracing = asyncio.create_task(tracer.run(stop))
            plan: list[tuple[float, int]] = []
            if args.scenario == "adapt":
                plan = [(args.drop_at, args.low), (args.rise_at, args.capacity)]
            changes = asyncio.create_task(schedule(control, tracer, plan, t0))
            profiling = None
            if args.profile_s > 0:
                profiling = asyncio.create_task(profile(fleet.pids, 3.0, args.profile_s, tag))
            started, submitted_at = time.perf_counter(), time.time()
            run_id = await as_user.submit(ops, parent, items(args.children))
            status = await wait_for_run(poller, runtime.store, run_id, args.timeout, label=label)
            wall = time.perf_counter() - started
            changes.cancel()
            if profiling is not None:
                result["profile"] = summarize_profile(await profiling)
            stop.set()
            await tracing
            result |= summarize(args, tracer, wall, status, capacity)
            result["children"] = await poller.children(run_id)
            result["failed_kinds"] = await poller.failure_kinds(run_id)
            result["redispatches"] = await poller.redispatches(run_id)
            result["why"] = await log_reasons(poller, run_id)
            stats = await control.stats(recent=MAX_RECENT)
            result["ds_max_concurrent"] = stats["maxConcurrent"]
            result["slot_turnaround"] = slot_turnaround(stats["recent"])
            result |= call_span(stats["recent"], submitted_at)
            result["loadavg_before"] = load_before
            result["loadavg_after"] = loadavg()
            result["foreign_workers_at_end"] = len(other_benchmarks())
            trace_file = OUT / f"{tag}.trace.json"
            trace_file.write_text(json.dumps({"samples": tracer.samples, "events": tracer.events}))
            result["trace"] = str(
                trace_file.relative_to(Path.cwd())
                if trace_file.is_relative_to(Path.cwd())
                else trace_file
            )
            result["_samples"] = tracer.samples
            result["_events"] = tracer.events
        finally:
            if fleet is not None:
                fleet.stop()
            await poller.close()
            await control.close()
            await runtime.close()
            await backend.drop()
    return result


def summarize(
    args: argparse.Namespace, tracer: Tracer, wall: float, status: str, capacity: int | None
) -> dict[str, Any]:
    samples = tracer.samples
    last = samples[-1]
    requests, r429 = last["total"], last["r429"]
    out: dict[str, Any] = {
        "status": status,
        "children_n": args.children,
        "wall_s": round(wall, 2),
        "children_per_s": round(args.children / wall, 1),
        "requests": requests,
        "ok": last["ok"],
        "r429": r429,
        "share429_pct": round(100 * r429 / requests, 2) if requests else 0.0,
    }
    if capacity is not None:
        ideal_rps = capacity * 1000 / args.latency_ms
        out["goodput_pct"] = round(100 * args.children / wall / ideal_rps, 1)
        out["ideal_wall_s"] = round(args.children / ideal_rps, 2)
    active = [s for s in samples if 1.0 <= s["t"] <= wall]
    limits = [s["limit"] for s in active if "limit" in s]
    if limits:
        out["limit"] = {
            "mean": round(statistics.fmean(limits), 1),
            "min": round(min(limits), 1),
            "max": round(max(limits), 1),
        }
        out["cuts"] = last.get("cuts")
        out["retry_tokens_end"] = last.get("tokens")
    if active:
        out["ds_in_flight_mean"] = round(statistics.fmean(s["ds_in_flight"] for s in active), 1)
    if args.scenario == "adapt":
        out |= adaptation(args, samples)
    return out


def adaptation(args: argparse.Namespace, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """After the drop: 429 share per 1 s window; after the rise: time to 80 % of capacity."""
    drop, rise = args.drop_at, args.rise_at
    wins = step_windows(samples, drop, rise)
    under = [w["share429"] < 0.02 for w in wins]
    first_under = next((w["from"] for w, ok in zip(wins, under, strict=True) if ok), None)
    sustained = None
    for k in range(len(wins)):
        if all(under[k:]):
            sustained = wins[k]["from"]
            break
    late = [w for w in wins if w["from"] >= 10]
    late_req = sum(w["requests"] for w in late)
    late_429 = sum(w["r429"] for w in late)
    target = 0.8 * args.capacity
    climb = next(
        (
            round(s["t"] - rise, 2)
            for s in samples
            if s["t"] >= rise and s.get("limit", 0) >= target
        ),
        None,
    )
    before = [s["limit"] for s in samples if drop - 3 <= s["t"] < drop and "limit" in s]
    low = [s["limit"] for s in samples if drop + 3 <= s["t"] < rise and "limit" in s]
    high = [s["limit"] for s in samples if rise + 5 <= s["t"] and "limit" in s]
    return {
        "drop_windows": [(w["from"], w["requests"], w["r429"]) for w in wins],
        "share429_first_under_2pct_after_s": first_under,
        "share429_under_2pct_for_good_after_s": sustained,
        "share429_from_drop_plus_10s_pct": round(100 * late_429 / late_req, 2)
        if late_req
        else None,
        "limit_before_drop_mean": round(statistics.fmean(before), 1) if before else None,
        "limit_while_low_mean": round(statistics.fmean(low), 1) if low else None,
        "limit_after_rise_mean": round(statistics.fmean(high), 1) if high else None,
        "limit_reaches_80pct_after_rise_s": climb,
    }


def printable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if not k.startswith("_")}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=["capacity", "adapt"], default="capacity")
    parser.add_argument("--ratios", default="0.9", help="AIMD backoff ratios, comma-separated")
    parser.add_argument("--admission", choices=["on", "off"], default="on")
    parser.add_argument("--children", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100, help="per worker")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--capacity", type=int, default=20, help="0: unlimited")
    parser.add_argument("--low", type=int, default=10, help="adapt: capacity after the drop")
    parser.add_argument("--drop-at", type=float, default=10.0)
    parser.add_argument("--rise-at", type=float, default=30.0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--cap", type=int, default=500, help="destination maxConcurrency")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--trace-ms", type=float, default=200.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--plot", default=None, help="bench/plots/<NAME>.png")
    parser.add_argument("--profile-s", type=float, default=0.0, help="py-spy the workers")
    parser.add_argument(
        "--breaker-thresholds",
        default="",
        help="experiment: 'TENANT,GLOBAL' consecutive-failure thresholds (default 5,15)",
    )
    args = parser.parse_args()
    others = other_benchmarks()
    if others:
        print("WARNING: other workers are running:", *others, sep="\n  ", flush=True)
    print("loadavg at start", loadavg(), flush=True)
    ratios: list[float | None] = (
        [float(r) for r in args.ratios.split(",")] if args.admission == "on" else [None]
    )
    results = []
    for ratio in ratios:
        for _ in range(args.repeat):
            result = await once(args, ratio)
            print(json.dumps(printable(result)), flush=True)
            results.append(result)
    for ratio in ratios:
        mine = [r for r in results if r.get("ratio") == ratio]
        summary: dict[str, Any] = {
            "scenario": args.scenario,
            "backoff_ratio": ratio,
            "runs": len(mine),
            "children": args.children,
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
            "median_share429_pct": statistics.median(r["share429_pct"] for r in mine),
            "all_children_succeeded": all(
                r["children"].get("SUCCEEDED", 0) == args.children for r in mine
            ),
        }
        if "goodput_pct" in mine[0]:
            summary["median_goodput_pct"] = statistics.median(r["goodput_pct"] for r in mine)
        if args.scenario == "adapt":
            for key in (
                "share429_first_under_2pct_after_s",
                "share429_under_2pct_for_good_after_s",
                "share429_from_drop_plus_10s_pct",
                "limit_reaches_80pct_after_rise_s",
            ):
                summary[key] = [r.get(key) for r in mine]
        print("summary", json.dumps(summary), flush=True)
    if args.plot:
        caps: list[tuple[float, float]] = []
        if args.capacity:
            caps = [(0.0, args.capacity)]
            if args.scenario == "adapt":
                caps += [(args.drop_at, args.low), (args.rise_at, args.capacity)]
        title = (
            f"{args.scenario}: {args.children} children, downstream {args.capacity or '∞'} x "
            f"{args.latency_ms:g} ms, {args.workers} workers x {args.concurrency}"
        )
        runs = [
            (
                f"{r['label']}: wall {r['wall_s']} s, 429s {r['share429_pct']} %",
                r["_samples"],
                r["_events"],
            )
            for r in results
        ]
        path = plot_runs(runs, plot_path(f"{args.plot}.png"), title, caps)
        print("plot", path, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
