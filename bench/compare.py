"""SchemaBridge against a plain asyncio + aiohttp loop, interleaved, on the same loopback mock.

    python -m bench.compare                                   # issue 17's sizes, 3 rounds
    python -m bench.compare --children 2000 --repeat 1        # a quick try (capacity: 1,000)
    python -m bench.compare --only fanout,embedded
    python -m bench.compare --only fanout,arq                 # the peer as well (arq installed)
    python -m bench.compare --only arq --children 1000 --repeat 1  # SchemaBridge and arq only

Every figure this prints is a ratio of SchemaBridge to the plain loop (to arq, for `arq`)
*measured in the same round*, with both absolute figures beside it: on a shared 2-core machine
an absolute figure moves by ±10 % with the hour, a ratio of interleaved runs much less. One
round runs, for each workload, the plain loop (A) and then SchemaBridge (B), so `--repeat 3`
is A B A B A B (with `arq`, its run C follows the fan-out's B: A B C …).

Workloads (each on a fresh database and a fresh mock downstream in its own process):

* `fanout` — 10,000 children (`--children`), each one POST to a mock answering in 20 ms.
  A: `bench.baseline_asyncio`'s aiohttp loop with 128 in flight (no durability: the limit of
  the HTTP leg on this machine). B: `bench.fanout` on PostgreSQL + Redis with 2
  `schemabridge worker` processes x 64 steps in flight (128 in all), admission on.
  Ratio: children/s ÷ requests/s (goal ≥ 0.5).
* `capacity` — 5,000 children (`--capacity-children`, default `--children` / 2) against a
  mock with 20 concurrent x 50 ms (400 req/s) and an immediate 429 + `Retry-After: 1` beyond.
  A: the same aiohttp loop with exactly 20 in flight (it knows the limit). B:
  `bench.admission_capacity` (AIMD, backoff ratio 0.9; 2 workers x 100). Ratio: goodput
  (successful children per second) ÷ A's (goal ≥ 0.95, 429s ≤ 1 %, every child SUCCEEDED).
* `embedded` — the embedded default: `bench.fanout --backend sqlite --workers 0` (SQLite file,
  embedded Redis, the worker in this process, default worker concurrency 64, the tenant's
  rate limit raised), compared with the `fanout` round's plain loop (goal ≥ 0.3).
* `arq` — not in the default set (arq is an extra install: `pip install --no-deps arq`, see
  bench/arq_fanout.py). The same fan-out on arq, the peer issue 17 names: `bench.arq_fanout`,
  2 arq worker processes x `max_jobs` 64, `poll_delay` 0.02 s, Redis db 12 unless
  SB_BENCH_REDIS_URL is set. It runs after the round's SchemaBridge fan-out (B), which it
  reuses when `fanout` is asked too (`--only arq` runs B and arq alone). Ratio: SchemaBridge's
  children/s ÷ arq's (goal ≥ 5); the `plain` column and figures of its line are arq's.

The PostgreSQL benchmarks use the Redis database of `SB_BENCH_REDIS_URL` (db 14 unless set;
`bench.fanout` FLUSHes it). Prints one JSON line per run (`"run"`), then one `"ratio"` line
per workload with the median of the per-round ratios (the rounds' ratios beside it) and the
median absolute figures, and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench import admission_capacity, admission_common, baseline_asyncio, fanout
from bench.common import run_like_the_services
from bench.fanout import code_version
from demo.downstream_state import MAX_RECENT

FANOUT_IN_FLIGHT = 128
"""The plain loop's concurrency on the fan-out: what 2 workers x 64 steps hold in flight."""
FANOUT_LATENCY_MS = 20.0
CAPACITY = 20
CAPACITY_LATENCY_MS = 50.0
CAPACITY_RETRY_AFTER_S = 1.0
GOALS = {"fanout": 0.5, "capacity": 0.95, "embedded": 0.3, "arq": 5.0}
WORKLOADS = ("fanout", "capacity", "embedded")
"""The default set. `arq` needs arq installed and adds a run per round: asked for by name."""
OPTIONAL_WORKLOADS = ("arq",)
BASELINE = {"arq": "arq"}
"""What a workload's ratio divides by, where it is not the plain loop."""


# ── A: the plain loop ──────────────────────────────────────────────────────────────────────


async def plain_fanout(children: int) -> dict[str, Any]:
    """N POSTs with 128 in flight to a mock answering in 20 ms (bench.baseline_asyncio)."""
    async with fanout.downstream_process(FANOUT_LATENCY_MS) as ds:
        load = os.getloadavg()[0]
        async with baseline_asyncio.aiohttp_plain(FANOUT_IN_FLIGHT) as post:
            result = await baseline_asyncio.one_run(
                post, f"{ds.url}/process", children, FANOUT_IN_FLIGHT
            )
    return result | {"per_s": result["requests_per_s"], "loadavg_1m": round(load, 2)}


async def plain_capacity(children: int) -> dict[str, Any]:
    """N POSTs with exactly `CAPACITY` in flight to the capacity-limited mock."""
    async with admission_common.downstream_process(
        CAPACITY_LATENCY_MS, CAPACITY, CAPACITY_RETRY_AFTER_S
    ) as ds:
        control = admission_common.DownstreamControl(ds.url)
        try:
            load = os.getloadavg()[0]
            async with baseline_asyncio.aiohttp_plain(CAPACITY) as post:
                result = await baseline_asyncio.one_run(post, f"{ds.url}/work", children, CAPACITY)
            stats = await control.stats(recent=MAX_RECENT)
        finally:
            await control.close()
    ok = stats["byStatus"].get("200", 0)
    return result | {
        # A 429 is not retried by the plain loop: its goodput counts only the 200s.
        "per_s": round(ok / result["wall_s"], 1),
        "ok": ok,
        "r429": stats["byStatus"].get("429", 0),
        "ds_max_concurrent": stats["maxConcurrent"],
        "slot_turnaround": admission_common.slot_turnaround(stats["recent"]),
        "loadavg_1m": round(load, 2),
    }


# ── B: SchemaBridge ────────────────────────────────────────────────────────────────────────


def fanout_args(children: int, backend: str, workers: int) -> argparse.Namespace:
    """bench.fanout's options for one run (its own defaults otherwise)."""
    return argparse.Namespace(
        backend=backend,
        workers=workers,
        children=children,
        latency_ms=FANOUT_LATENCY_MS,
        concurrency=FANOUT_IN_FLIGHT // 2,
        answer="small",
        admission="on",
        timeout=900.0,
        profile_s=0.0,
        profile_after=2.0,
        analyze_every=0.0,
        keep_db=False,
    )


async def engine_fanout(children: int, backend: str, workers: int) -> dict[str, Any]:
    result = await fanout.once(fanout_args(children, backend, workers), 0)
    statuses = result.get("children_by_status", {})
    return {
        "per_s": result["children_per_s"] if result["succeeded"] else 0.0,
        "wall_s": result["wall_s"],
        "succeeded": result["succeeded"] and statuses.get("SUCCEEDED", 0) == children,
        "cpu_ms_per_child": result["cpu_ms_per_child"],
        "cpu_s": result["cpu_s"],
        "merge_delay_s": result.get("merge_delay_s"),
        "worker_peak_rss_mb": result["worker_peak_rss_mb"],
        "requests": result["requests"],
        "loadavg_1m": result["loadavg_before"][0],
    }


def capacity_args(children: int) -> argparse.Namespace:
    """bench.admission_capacity's options for the capacity scenario (its defaults)."""
    return argparse.Namespace(
        scenario="capacity",
        children=children,
        workers=2,
        concurrency=100,
        latency_ms=CAPACITY_LATENCY_MS,
        capacity=CAPACITY,
        retry_after=CAPACITY_RETRY_AFTER_S,
        cap=500,
        trace_ms=200.0,
        timeout=600.0,
        profile_s=0.0,
        breaker_thresholds="",
        drop_at=10.0,
        rise_at=30.0,
        low=10,
    )


async def engine_capacity(children: int) -> dict[str, Any]:
    result = await admission_capacity.once(capacity_args(children), 0.9)
    succeeded = result["children"].get("SUCCEEDED", 0)
    return {
        "per_s": round(succeeded / result["wall_s"], 1),
        "wall_s": result["wall_s"],
        "succeeded": succeeded == children,
        "children": result["children"],
        "requests": result["requests"],
        "r429": result["r429"],
        "share429_pct": result["share429_pct"],
        "goodput_pct": result.get("goodput_pct"),
        "limit": result.get("limit"),
        "ds_in_flight_mean": result.get("ds_in_flight_mean"),
        "slot_turnaround": result.get("slot_turnaround"),
        "first_call_s": result.get("first_call_s"),
        "last_answer_s": result.get("last_answer_s"),
        "loadavg_1m": result["loadavg_before"][0],
    }


# ── C: arq, the peer ───────────────────────────────────────────────────────────────────────


async def arq_fanout(children: int) -> dict[str, Any]:
    """bench.arq_fanout with its defaults: 2 workers x 64 jobs, the mock answering in 20 ms."""
    # Imported here: arq is an extra install, and the other workloads run without it.
    from bench import arq_fanout as peer

    args = peer.parse_args(["--children", str(children)])
    result = await peer.once(args)
    return {
        "per_s": result["children_per_s"] if result["succeeded"] else 0.0,
        "wall_s": result["wall_s"],
        "succeeded": result["succeeded"],
        "errors": result["errors"],
        "enqueue_s": result["enqueue_s"],
        "cpu_ms_per_child": result["cpu_ms_per_child"],
        "cpu_ms_per_child_with_driver": result["cpu_ms_per_child_with_driver"],
        "cpu_s": result["cpu_s"],
        "worker_peak_rss_mb": result["worker_peak_rss_mb"],
        "requests": result["requests"],
        "poll_delay_s": result["poll_delay_s"],
        "loadavg_1m": result["loadavg_before"][0],
    }


# ── the rounds ─────────────────────────────────────────────────────────────────────────────


@dataclass
class Pair:
    workload: str
    plain: dict[str, Any]
    engine: dict[str, Any]

    @property
    def ratio(self) -> float:
        return self.engine["per_s"] / self.plain["per_s"] if self.plain["per_s"] else 0.0


Runner = Callable[[], Awaitable[dict[str, Any]]]


async def timed(label: str, run: Runner) -> dict[str, Any]:
    started = time.perf_counter()
    result = await run()
    print(
        json.dumps({"run": label, "took_s": round(time.perf_counter() - started, 1)} | result),
        flush=True,
    )
    return result


async def one_round(args: argparse.Namespace, round_no: int) -> list[Pair]:
    """A then B for each workload; `embedded` reuses this round's plain fan-out loop, `arq`
    (C) this round's SchemaBridge fan-out."""
    pairs: list[Pair] = []
    plain_fan: dict[str, Any] | None = None
    engine_fan: dict[str, Any] | None = None
    tag = f"round {round_no}"
    if "fanout" in args.only or "embedded" in args.only:
        plain_fan = await timed(f"{tag} fanout A plain", lambda: plain_fanout(args.children))
    if "fanout" in args.only or "arq" in args.only:
        engine_fan = await timed(
            f"{tag} fanout B schemabridge", lambda: engine_fanout(args.children, "postgres", 2)
        )
    if "fanout" in args.only and plain_fan is not None and engine_fan is not None:
        pairs.append(Pair("fanout", plain_fan, engine_fan))
    if "arq" in args.only and engine_fan is not None:
        peer = await timed(f"{tag} fanout C arq", lambda: arq_fanout(args.children))
        pairs.append(Pair("arq", peer, engine_fan))
    if "capacity" in args.only:
        plain = await timed(
            f"{tag} capacity A plain", lambda: plain_capacity(args.capacity_children)
        )
        engine = await timed(
            f"{tag} capacity B schemabridge", lambda: engine_capacity(args.capacity_children)
        )
        pairs.append(Pair("capacity", plain, engine))
    if "embedded" in args.only and plain_fan is not None:
        engine = await timed(
            f"{tag} embedded B schemabridge", lambda: engine_fanout(args.children, "sqlite", 0)
        )
        pairs.append(Pair("embedded", plain_fan, engine))
    return pairs


def summary(workload: str, pairs: list[Pair]) -> dict[str, Any]:
    mine = [p for p in pairs if p.workload == workload]
    ratios = [round(p.ratio, 3) for p in mine]
    # The divisor's figures are named after it: `plain_…`, or `arq_…` on the arq line.
    base = BASELINE.get(workload, "plain")
    out: dict[str, Any] = {
        "ratio": workload,
        "median_ratio": round(statistics.median(ratios), 3),
        "round_ratios": ratios,
        "goal": GOALS[workload],
        f"{base}_median_per_s": statistics.median(p.plain["per_s"] for p in mine),
        "engine_median_per_s": statistics.median(p.engine["per_s"] for p in mine),
        f"{base}_median_wall_s": statistics.median(p.plain["wall_s"] for p in mine),
        "engine_median_wall_s": statistics.median(p.engine["wall_s"] for p in mine),
        "every_child_succeeded": all(p.engine["succeeded"] for p in mine),
    }
    if workload == "arq":
        out["every_arq_job_succeeded"] = all(p.plain["succeeded"] for p in mine)
        out["arq_median_cpu_ms_per_child"] = statistics.median(
            p.plain["cpu_ms_per_child"] for p in mine
        )
    if workload == "capacity":
        out["engine_median_share429_pct"] = statistics.median(
            p.engine["share429_pct"] for p in mine
        )
        out["plain_r429"] = [p.plain["r429"] for p in mine]
        out["engine_median_ds_in_flight"] = statistics.median(
            p.engine["ds_in_flight_mean"] or 0.0 for p in mine
        )
        for side in ("plain", "engine"):
            gaps = [getattr(p, side)["slot_turnaround"].get("mean_ms") for p in mine]
            out[f"{side}_median_slot_gap_ms"] = statistics.median(g or 0.0 for g in gaps)
        firsts = [p.engine["first_call_s"] for p in mine if p.engine.get("first_call_s")]
        if firsts:
            out["engine_median_first_call_s"] = statistics.median(firsts)
    else:
        out["engine_median_cpu_ms_per_child"] = statistics.median(
            p.engine["cpu_ms_per_child"] for p in mine
        )
    return out


def table(summaries: list[dict[str, Any]]) -> str:
    unit = {
        "fanout": "children/s",
        "capacity": "goodput/s",
        "embedded": "children/s",
        "arq": "children/s",
    }
    lines = [
        "| workload | ratio (median) | rounds | goal | plain loop | SchemaBridge | all OK |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for s in summaries:
        w = s["ratio"]
        rounds = ", ".join(f"{r:.2f}" for r in s["round_ratios"])
        base = BASELINE.get(w, "plain")
        plain = f"{s[f'{base}_median_per_s']:,.0f} {unit[w]} ({s[f'{base}_median_wall_s']} s)"
        if base != "plain":
            plain = f"{base}: {plain}"
        engine = f"{s['engine_median_per_s']:,.0f} {unit[w]} ({s['engine_median_wall_s']} s)"
        ok = (
            "yes" if s["every_child_succeeded"] and s.get("every_arq_job_succeeded", True) else "NO"
        )
        lines.append(
            f"| {w} | **{s['median_ratio']:.2f}** | {rounds} | ≥ {s['goal']} | {plain}"
            f" | {engine} | {ok} |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000, help="fan-out and embedded")
    parser.add_argument(
        "--capacity-children", type=int, default=None, help="capacity (default: --children / 2)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds (A B per workload each)")
    known = WORKLOADS + OPTIONAL_WORKLOADS
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of {known} (default: {','.join(WORKLOADS)})",
    )
    args = parser.parse_args()
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in args.only if w not in known]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}: choose from {', '.join(known)}")
    if args.capacity_children is None:
        args.capacity_children = max(1, args.children // 2)
    return args


async def main(args: argparse.Namespace) -> None:
    others = admission_common.other_benchmarks()
    print(
        json.dumps(
            {
                "commit": code_version(),
                "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                "loadavg": admission_common.loadavg(),
                "cpus": os.cpu_count(),
                "foreign_workers": len(others),
                "redis": admission_common.BENCH_REDIS_URL,
            }
        ),
        flush=True,
    )
    pairs: list[Pair] = []
    for round_no in range(1, args.repeat + 1):
        pairs += await one_round(args, round_no)
    summaries = [
        summary(w, pairs)
        for w in WORKLOADS + OPTIONAL_WORKLOADS
        if any(p.workload == w for p in pairs)
    ]
    for s in summaries:
        print(json.dumps(s), flush=True)
    print(table(summaries), flush=True)


if __name__ == "__main__":
    run_like_the_services(main(parse_args()))
