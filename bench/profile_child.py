"""Where a child's time goes: workers by phase, PostgreSQL by statement kind, Redis by command.

    python -m bench.profile_child --children 10000              # the fan-out workload
    python -m bench.profile_child --workload capacity --children 5000

Runs one `bench.fanout` (PostgreSQL + Redis, 2 workers x 64) or one
`bench.admission_capacity` run (AIMD 0.9, 2 workers x 100, downstream 20 x 50 ms) and, around
it:

* py-spy samples every worker (`--profile-s`, from 2 s into the run) and buckets the samples
  by engine phase (claim, admission, render, HTTP, record, join counter, …; see `PHASES`);
  the share of each phase times the workers' CPU per child gives CPU ms per child by phase
  (py-spy records only threads that are running, so the shares are of busy time);
* PostgreSQL: the CPU of the server backends serving the benchmark's database (found in
  `pg_stat_activity` every 0.5 s; a backend's CPU counts from when it was first seen), the
  database's commits and row counts from `pg_stat_database` / `pg_stat_user_tables` (this
  machine's PostgreSQL does not preload `pg_stat_statements`, so there are no per-statement
  times); all per child;
* Redis: `INFO commandstats` before and after (server-wide: other users' commands count too,
  so it is only exact on a quiet server) — calls and server µs per child by command — and the
  `redis-server` CPU per child.

Prints one JSON document. Raw py-spy profiles stay in bench/out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import redis

from bench import admission_capacity, admission_common, compare, fanout
from bench.common import OUT, PG_ADMIN, Backend

PG_ROOT = PG_ADMIN.rsplit("/", 1)[0]

PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # A sample counts once, for the first phase one of whose needles its stack contains.
    ("MERGE", ("run_merge (engine/execution/fanout.py",)),
    ("SPAWNER: create children", ("create_children (engine/store/fanout.py", "spawner.py")),
    ("join counter (children ended)", ("_children_ended (engine/store/queue.py",)),
    ("record (store.complete)", ("WorkQueue.complete (engine/store/queue.py",)),
    ("claim (store.claim)", ("WorkQueue.claim (engine/store/queue.py",)),
    ("lease renewal / reaper", ("Worker._renew", "Worker._reap")),
    ("admission exchange", ("ExchangeBatcher", "exchange (admission/backend.py")),
    ("admission other", ("admission/", "admission_guard.py")),
    ("render (build the request)", ("build_request (vertices/gateway", "gateway_request.py")),
    ("HTTP (aiohttp call + answer)", ("_exchange (vertices/gateway", "http_client.py")),
    ("GATEWAY other (parse, log lines)", ("vertices/gateway",)),
    ("executor (context, outcome)", ("engine/execution/executor.py",)),
    ("run events / wake-ups", ("engine/coordination/",)),
    ("worker loops", ("engine/execution/worker.py",)),
    ("database client, caller not visible", ("sqlalchemy/", "asyncpg/")),
    ("Redis client I/O", ("redis/",)),
    ("HTTP client I/O callbacks", ("aiohttp/",)),
    ("event loop (select, callbacks)", ("asyncio/",)),
)


def phase_of(stack: str) -> str:
    for label, needles in PHASES:
        if any(needle in stack for needle in needles):
            return label
    return "other"


def phases(paths: Sequence[Path]) -> dict[str, float]:
    """% of the busy samples per phase (idle select() excluded)."""
    counts: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            if stack.rsplit(";", 1)[-1].startswith(("select (selectors.py", "epoll")):
                continue  # the event loop waiting: not CPU
            counts[phase_of(stack)] += int(count_text)
    total = sum(counts.values())
    return {k: round(100 * v / total, 1) for k, v in counts.most_common()} if total else {}


# ── PostgreSQL and Redis accounting ────────────────────────────────────────────────────────


TABLE_STATS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, idx_scan
FROM pg_stat_user_tables
"""
DB_STATS = """
SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, tup_inserted, tup_updated,
       blks_hit, blks_read
FROM pg_stat_database WHERE datname = $1
"""


@dataclass
class ServerMeter:
    """Samples the benchmark database's backends and the Redis server during one run."""

    redis_url: str
    backend: Backend | None = None
    first_cpu: dict[tuple[str, int], float] = field(default_factory=dict)
    last_cpu: dict[tuple[str, int], float] = field(default_factory=dict)
    db_before: dict[str, int] = field(default_factory=dict)
    db_after: dict[str, int] = field(default_factory=dict)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    redis_before: dict[str, dict[str, float]] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        while self.backend is None and not stop.is_set():
            await asyncio.sleep(0.05)
        if self.backend is None or self.backend._pg_name is None:
            return
        name = self.backend._pg_name
        self.redis_before = commandstats(self.redis_url)
        admin = await asyncpg.connect(PG_ADMIN)
        bench_db: asyncpg.Connection | None = None
        try:
            self.db_before = dict(await admin.fetchrow(DB_STATS, name) or {})
            while True:
                await self._sample(admin, name)
                # The database may be dropped as the run ends (admission_capacity drops it).
                with contextlib.suppress(asyncpg.PostgresError, OSError):
                    bench_db = bench_db or await asyncpg.connect(f"{PG_ROOT}/{name}")
                    for row in await bench_db.fetch(TABLE_STATS):
                        self.tables[row["relname"]] = {
                            k: int(v) for k, v in dict(row).items() if k != "relname"
                        }
                if stop.is_set():
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await stop.wait()
        finally:
            await admin.close()
            if bench_db is not None:
                with contextlib.suppress(asyncpg.PostgresError, OSError):
                    await bench_db.close()

    async def _sample(self, admin: asyncpg.Connection, name: str) -> None:
        stats = await admin.fetchrow(DB_STATS, name)
        if stats is not None:
            self.db_after = dict(stats)
        rows = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", name)
        self._cpu("postgres", [int(row["pid"]) for row in rows])
        workers = [
            p.pid
            for p in psutil.Process().children(recursive=True)
            if "worker" in " ".join(_cmdline(p))
        ]
        self._cpu("workers", workers)
        self._cpu(
            "redis", [p.pid for p in psutil.process_iter(["name"]) if p.name() == "redis-server"]
        )

    def _cpu(self, role: str, pids: Sequence[int]) -> None:
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            cpu = float(times.user + times.system)
            self.first_cpu.setdefault((role, pid), cpu)
            self.last_cpu[(role, pid)] = cpu

    def cpu_s(self, role: str) -> float:
        return sum(v - self.first_cpu[k] for k, v in self.last_cpu.items() if k[0] == role)

    def report(self, children: int) -> dict[str, Any]:
        per = 1000 / children
        db = {k: self.db_after.get(k, 0) - self.db_before.get(k, 0) for k in self.db_after}
        redis_after = commandstats(self.redis_url)
        redis_delta = {}
        for command, stats in redis_after.items():
            before = self.redis_before.get(command, {"calls": 0, "usec": 0})
            calls = stats["calls"] - before["calls"]
            if calls > 0:
                redis_delta[command] = {
                    "calls_per_child": round(calls / children, 3),
                    "server_us_per_child": round((stats["usec"] - before["usec"]) / children, 1),
                }
        return {
            "cpu_ms_per_child": {
                "workers": round(self.cpu_s("workers") * per, 3),
                "postgres_backends": round(self.cpu_s("postgres") * per, 3),
                "redis_server": round(self.cpu_s("redis") * per, 3),
            },
            "postgres_per_child": {k: round(v / children, 3) for k, v in db.items()},
            "tables_per_child": {
                table: {k: round(v / children, 3) for k, v in stats.items() if v}
                for table, stats in self.tables.items()
                if any(stats.values())
            },
            "redis_per_child": dict(
                sorted(redis_delta.items(), key=lambda kv: -kv[1]["server_us_per_child"])
            ),
        }


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return list(proc.cmdline())
    except psutil.Error:
        return []


def commandstats(url: str) -> dict[str, dict[str, float]]:
    client = redis.Redis.from_url(url)
    try:
        info = client.info("commandstats")
    finally:
        client.close()
    return {
        name.removeprefix("cmdstat_"): {"calls": float(v["calls"]), "usec": float(v["usec"])}
        for name, v in info.items()
    }


# ── the runs ───────────────────────────────────────────────────────────────────────────────


async def main(args: argparse.Namespace) -> None:
    meter = ServerMeter(admission_common.BENCH_REDIS_URL)
    stop = asyncio.Event()
    sampling = asyncio.create_task(meter.run(stop))

    def capture(make: Any) -> Any:
        async def wrapped(*a: Any) -> Backend:
            backend: Backend = await make(*a)
            meter.backend = backend
            return backend

        return wrapped

    # The backend is created inside the benchmarks' `once`: catch it on its way out.
    fanout.make_backend = capture(fanout.make_backend)  # type: ignore[attr-defined]
    admission_capacity.fresh_backend = capture(admission_capacity.fresh_backend)  # type: ignore[attr-defined]
    for old in OUT.glob("sb*.pyspy.txt"):
        old.unlink()
    try:
        if args.workload == "fanout":
            options = compare.fanout_args(args.children, "postgres", 2)
            options.profile_s, options.profile_after = args.profile_s, 2.0
            options.keep_db = True  # dropped below, once its statistics are read
            result = await fanout.once(options, 0)
            paths = sorted(OUT.glob(f"sbfan-postgres-{args.children}-r0-*.pyspy.txt"))
            summary = {
                k: result.get(k)
                for k in ("wall_s", "children_per_s", "cpu_s", "cpu_ms_per_child", "requests")
            }
        else:
            options = compare.capacity_args(args.children)
            options.profile_s = args.profile_s
            result = await admission_capacity.once(options, 0.9)
            paths = sorted(OUT.glob("sbadm-capacity-aimd0.9-*.pyspy.txt"))
            summary = {
                k: result.get(k)
                for k in ("wall_s", "goodput_pct", "share429_pct", "ds_in_flight_mean", "limit")
            } | {"slot_turnaround": result.get("slot_turnaround")}
    finally:
        stop.set()
        await sampling
    report: dict[str, Any] = {"workload": args.workload, "children": args.children} | summary
    shares = phases(paths)
    report["worker_busy_pct_by_phase"] = shares
    per_child = 1000 * meter.cpu_s("workers") / args.children
    report["worker_cpu_ms_per_child_by_phase"] = {
        k: round(per_child * v / 100, 3) for k, v in shares.items()
    }
    report |= meter.report(args.children)
    if meter.backend is not None and args.workload == "fanout":
        await meter.backend.drop()
    print(json.dumps(report, indent=1), flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["fanout", "capacity"], default="fanout")
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--profile-s", type=float, default=10.0, help="py-spy duration")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
