"""Admission benchmark 3 of issue 5: a 60 s outage (every answer 503) during a fan-out.

    python -m bench.admission_outage --children 2000 --outage-at 3 --outage-s 60
    python -m bench.admission_outage --max-auto-retries 10 --plot outage-retries10

One parent run on PostgreSQL + Redis, `SPAWNER over {{ input.items }}` → child run with one
GATEWAY POST to the demo downstream (admission key `bench-downstream`, default retry policy:
4 attempts, 1/2/4 s; the child vertex's `maxAutoRetries` from `--max-auto-retries`, default
3) → MERGE tolerating failed children. The downstream (own process, `--latency-ms` 50, no
capacity limit) answers the default echo (the demo's `failRate` applies only to requests
without per-request overrides). `--outage-at` seconds after the parent is submitted the driver
sets `failRate` 1.0 (`POST /_config`: every request answers 503), `--outage-s` later back to
0. Workers: `--workers` (2) x `--concurrency` (64); `SCHEMABRIDGE_REDISPATCH_DELAYS_S` from
`--redispatch-delays` (default: the engine's 5,10,20).

The driver keeps every request the downstream saw (arrival time, status, Idempotency-Key, from
its `/_stats` ring buffer, polled every 200 ms) and samples `Admission.snapshot()`. Printed:

* `outage_requests` / `outage_requests_after_10s` — requests that arrived during the outage,
  and during its part after the first 10 s (goal < 100);
* `retry_spread` — "retries" are requests of child steps that ran more than once (redispatched
  or re-claimed: `auto_retries > 0 or attempts > 1`, matched by the step's Idempotency-Key);
  of those arriving after the recovery: how many, the largest share of them in one 100 ms
  interval (goal ≤ 5 %). `repeat_key_spread`: the same for requests whose key had already
  reached the downstream; `all_requests_after_recovery_spread`: every request;
* `children` by status, `failed_kinds` (goal: only `external_overload`), `lost` = 2,000 -
  children counted (goal 0), `redispatches` histogram;
* `breaker_timeline` — when each layer changed state (from the snapshots).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from typing import Any

from sqlalchemy import text

from bench import as_user
from bench.admission_common import (
    DESTINATION,
    DownstreamControl,
    StatusPoller,
    Tracer,
    child_workflow,
    downstream_process,
    fresh_backend,
    items,
    loadavg,
    log_reasons,
    other_benchmarks,
    plot_path,
    plot_runs,
    publish_fanout,
    start_fleet,
    wait_for_run,
)
from bench.common import OUT
from engine.execution.step_rules import idempotency_key
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings


async def outage(
    control: DownstreamControl, tracer: Tracer, t0: float, at_s: float, for_s: float
) -> None:
    await asyncio.sleep(max(0.0, t0 + at_s - time.time()))
    await control.configure(failRate=1.0)
    tracer.mark("outage")
    await asyncio.sleep(max(0.0, t0 + at_s + for_s - time.time()))
    await control.configure(failRate=0.0)
    tracer.mark("recovery")


def spread(times: list[float], start: float, bin_s: float = 0.1) -> dict[str, Any]:
    if not times:
        return {"n": 0}
    bins = Counter(int((t - start) // bin_s) for t in times)
    (worst_bin, worst) = bins.most_common(1)[0]
    return {
        "n": len(times),
        "max_in_100ms": worst,
        "max_share_100ms_pct": round(100 * worst / len(times), 2),
        "worst_bin_starts_s_after_recovery": round(worst_bin * bin_s, 1),
        "first_s_after_recovery": round(min(times) - start, 2),
        "last_s_after_recovery": round(max(times) - start, 2),
    }


REDISPATCHED = text(
    """
    SELECT r.id FROM run r JOIN step s ON s.run_id = r.id
    WHERE r.parent_run_id = :run_id AND (s.auto_retries > 0 OR s.attempts > 1)
    """
)


async def redispatched_keys(poller: StatusPoller, run_id: str) -> set[str]:
    """Idempotency-Keys of the child steps that ran more than once (redispatched)."""
    async with poller.engine.connect() as conn:
        ids = (await conn.execute(REDISPATCHED, {"run_id": run_id})).scalars().all()
    return {idempotency_key(child_id, "call") for child_id in ids}


def analyse(tracer: Tracer, outage_at: float, outage_s: float, retried: set[str]) -> dict[str, Any]:
    reqs = sorted(tracer.requests, key=lambda r: r["t"])
    start = next((t for t, what in tracer.events if what == "outage"), outage_at)
    end = next((t for t, what in tracer.events if what == "recovery"), outage_at + outage_s)
    during = [r for r in reqs if start <= r["t"] < end]
    late = [r for r in during if r["t"] >= start + 10]
    seen: set[str] = set()
    retries_after: list[float] = []
    repeats_after: list[float] = []
    all_after: list[float] = []
    per_second: Counter[int] = Counter()
    for r in reqs:
        key = r["key"]
        if r["t"] >= end:
            all_after.append(r["t"])
            if key in retried:
                retries_after.append(r["t"])
            if key in seen:
                repeats_after.append(r["t"])
        if start <= r["t"] < end:
            per_second[int(r["t"] - start)] += 1
        if key:
            seen.add(key)
    return {
        "outage_window_s": [round(start, 2), round(end, 2)],
        "outage_requests": len(during),
        "outage_requests_by_status": dict(Counter(r["outcome"] for r in during)),
        "outage_requests_after_10s": len(late),
        "outage_requests_per_second": [per_second.get(i, 0) for i in range(int(end - start) + 1)],
        "requests_total": len(reqs),
        "records_lost": tracer.lost_records,
        "retry_spread": spread(retries_after, end),
        "repeat_key_spread": spread(repeats_after, end),
        "all_requests_after_recovery_spread": spread(all_after, end),
    }


def breaker_timeline(samples: list[dict[str, Any]]) -> list[tuple[float, str, str]]:
    out: list[tuple[float, str, str]] = []
    last: dict[str, str] = {}
    for s in samples:
        if "global" not in s:
            continue
        states = {"global": s["global"], **{f"tenant:{k}": v for k, v in s["tenant"].items()}}
        for layer, state in states.items():
            if last.get(layer, "closed") != state:
                out.append((s["t"], layer, state))
            last[layer] = state
        for layer in list(last):
            if layer not in states and last[layer] != "closed":
                out.append((s["t"], layer, "closed"))
                last[layer] = "closed"
    return out


async def once(args: argparse.Namespace) -> dict[str, Any]:  # noqa: PLR0915
    backend = await fresh_backend()
    tag = f"sbadm-outage-r{args.max_auto_retries}"
    settings = Settings(
        database_url=backend.database_url,
        redis_url=backend.redis_url,
        worker_concurrency=args.concurrency,
    )
    worker_settings = {"worker_concurrency": str(args.concurrency)}
    if args.redispatch_delays:
        worker_settings["redispatch_delays_s"] = json.dumps(
            [float(x) for x in args.redispatch_delays.split(",")]
        )
    result: dict[str, Any] = {
        "children_n": args.children,
        "max_auto_retries": args.max_auto_retries,
        "redispatch_delays_s": args.redispatch_delays or "5,10,20 (default)",
    }
    async with downstream_process(args.latency_ms) as ds:
        runtime = await Runtime.open(settings)
        control = DownstreamControl(ds.url)
        poller = StatusPoller(backend.database_url)
        fleet = None
        try:
            child = child_workflow(
                ds.url, small_answer=False, max_auto_retries=args.max_auto_retries
            )
            ops = Operations(runtime)
            parent = await publish_fanout(ops, child)
            fleet = await start_fleet(backend, args.workers, tag, **worker_settings)
            result["loadavg_before"] = loadavg()
            t0 = time.time()
            tracer = Tracer(runtime, control, t0, records=True)
            stop = asyncio.Event()
            tracing = asyncio.create_task(tracer.run(stop))
            breaking = asyncio.create_task(
                outage(control, tracer, t0, args.outage_at, args.outage_s)
            )
            started = time.perf_counter()
            run_id = await as_user.submit(ops, parent, items(args.children))
            status = await wait_for_run(poller, runtime.store, run_id, args.timeout, label="outage")
            wall = time.perf_counter() - started
            breaking.cancel()
            stop.set()
            await tracing
            children = await poller.children(run_id)
            result |= {
                "status": status,
                "wall_s": round(wall, 2),
                "children": children,
                "lost": args.children - sum(children.values()),
                "failed_kinds": await poller.failure_kinds(run_id),
                "redispatches": await poller.redispatches(run_id),
            }
            result["why"] = await log_reasons(poller, run_id)
            retried = await redispatched_keys(poller, run_id)
            result |= analyse(tracer, args.outage_at, args.outage_s, retried)
            result["breaker_timeline"] = breaker_timeline(tracer.samples)
            result["loadavg_after"] = loadavg()
            result["foreign_workers_at_end"] = len(other_benchmarks())
            trace = OUT / f"{tag}.trace.json"
            trace.write_text(
                json.dumps(
                    {
                        "samples": tracer.samples,
                        "events": tracer.events,
                        "requests": tracer.requests,
                    }
                )
            )
            result["trace"] = str(trace)
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


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--children", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="per worker")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--outage-at", type=float, default=3.0)
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--max-auto-retries", type=int, default=3)
    parser.add_argument("--redispatch-delays", default="", help="e.g. 5,10,20")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--plot", default=None, help="bench/plots/<NAME>.png")
    args = parser.parse_args()
    others = other_benchmarks()
    if others:
        print("WARNING: other workers are running:", *others, sep="\n  ", flush=True)
    result = await once(args)
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}), flush=True)
    verdict = {
        "outage_requests_after_10s": result["outage_requests_after_10s"],
        "goal_under_100": result["outage_requests_after_10s"] < 100,
        "retry_max_share_100ms_pct": result["retry_spread"].get("max_share_100ms_pct"),
        "goal_retry_spread": (result["retry_spread"].get("max_share_100ms_pct") or 0) <= 5,
        "children": result["children"],
        "failed_kinds": result["failed_kinds"],
        "goal_statuses": set(result["children"]) <= {"SUCCEEDED", "FAILED"}
        and set(result["failed_kinds"]) <= {"external_overload"},
        "lost": result["lost"],
    }
    print("summary", json.dumps(verdict), flush=True)
    if args.plot:
        label = (
            f"outage {args.outage_s:g} s: {args.children} children, maxAutoRetries "
            f"{args.max_auto_retries}, wall {result['wall_s']} s"
        )
        path = plot_runs(
            [(label, result["_samples"], result["_events"])],
            plot_path(f"{args.plot}.png"),
            f"Outage (503 for everything) during a fan-out; destination {DESTINATION}",
        )
        print("plot", path, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
