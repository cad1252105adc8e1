"""Fan-out benchmark: one parent run, SPAWNER over N items → N child runs → MERGE.

    python -m bench.fanout --backend postgres --workers 2 --children 10000 --repeat 3
    python -m bench.fanout --backend sqlite --workers 1 --children 10000
    python -m bench.fanout --backend postgres --workers 2 --children 100000 --timeout 900

The parent workflow is `SPAWNER over {{ input.items }} → MERGE`; the items (`{"id": i}`) come
in the run input. Each child run is one GATEWAY POST to the demo downstream, which runs in its
own subprocess on 127.0.0.1 (so its CPU is not in this event loop) and answers after
`--latency-ms` (20 ms). `--answer small` (default) makes it answer `{"ok":true}` (per-request
`X-Demo-Raw` override) so a child's output is ~200 bytes; `--answer echo` keeps the demo's
default echo of the request (~1 KB per child), which the MERGE then carries N times.

Workers are `schemabridge worker` subprocesses named `sbfan-<backend>-<n>-w<i>`
(`--workers 0`: one worker in this process, its start-up heap settled as `schemabridge
serve` settles it). Each repetition uses a fresh database.

Reported per run (one JSON line each, then a `summary` line):

* `wall_s` — the run's submission (`ops.runs.submit`) → its status observed SUCCEEDED
  (polled every 50 ms); `store_wall_s` is the run's created_at → ended_at in the store;
* `children_per_s` — N / wall_s;
* `worker_peak_rss_mb` — peak RSS of each worker process (sampled every 200 ms);
* `merge_delay_s` — the last child's end (max run.ended_at over children) → the MERGE step's
  ended_at, split into `join_close_s` (last child → spawner closed), `merge_claim_s` (closed →
  MERGE claimed) and `merge_exec_s` (MERGE started → ended);
* `spawn_s` — the run's creation → the last batch of children created; `first_child_start_s`,
  `last_child_end_s` … — child step times relative to the run's creation;
* `cpu_s` — CPU seconds used during the run by the workers, this driver, the downstream, every
  `postgres` and `redis-server` process, and `everything_else` on the machine (other users:
  the machine is shared); `cpu_ms_per_child` — workers + downstream + PostgreSQL + Redis CPU
  per child (on 2 cores, 2000 / cpu_ms_per_child bounds children/s);
* `requests` — requests the downstream counted (> N means repeated calls);
* `commit` — the git commit the workers loaded (`+dirty`: engine files differed from it).

Options beyond the obvious: `--admission off` runs the workers with
SCHEMABRIDGE_ADMISSION_ENABLED=false (the engine without AIMD/breakers/tenant limits);
`--analyze-every S` runs `ANALYZE step, run` every S s during the run (what autovacuum's
autoanalyze would do; this machine's PostgreSQL has autovacuum = off); `--keep-db` keeps the
database for inspection; `--profile-s S` samples every worker with py-spy for S seconds,
starting `--profile-after` seconds into the run, and adds where the time goes (by engine area
and by function; raw profiles stay in bench/out); `--summarize FILE…` only summarizes raw
py-spy profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench import as_user
from bench.common import (
    OUT,
    Backend,
    RssSampler,
    make_backend,
    median,
    run_like_the_services,
    start_workers,
    stop_workers,
    worker_env,
)
from engine.operations import Operations
from engine.runtime import Runtime, settle_heap
from engine.settings import Settings
from engine.store import Store
from schemas.definitions import Workflow

PYSPY = str(Path(sys.executable).with_name("py-spy"))
CHILD = "bench-fanout-child"
PARENT = "bench-fanout"
SMALL_ANSWER = {"X-Demo-Raw": '{"ok":true}', "X-Demo-Content-Type": "application/json"}
ENGINE_PATHS = ("engine", "vertices", "admission", "schemas", "api", "demo")
POLL_S = 0.05
CHILD_CPU_ROLES = ("workers", "downstream", "postgres", "redis-server")


# ── the downstream, in its own process ─────────────────────────────────────────────────────


@dataclass(frozen=True)
class Downstream:
    url: str
    pid: int


@contextlib.asynccontextmanager
async def downstream_process(latency_ms: float) -> AsyncIterator[Downstream]:
    """`python -m demo.downstream` on a free port of 127.0.0.1 (its URL and pid)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "demo.downstream", "--host", "127.0.0.1", "--port", "0",
        "--latency-ms", str(latency_ms),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        if process.stdout is None:
            raise RuntimeError("no stdout from the demo downstream")
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        url = line.decode().strip().rsplit(" ", 1)[-1]
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"unexpected first line from the demo downstream: {line!r}")
        yield Downstream(url, process.pid)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def downstream_requests(base: str) -> int:
    """Requests the downstream has counted since it started (control calls excluded)."""
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{base}/_stats", params={"recent": "0"}, timeout=10)
        return int(response.json()["total"])


def code_version() -> str:
    """The commit the workers run, `+dirty` when engine code differs from it (others edit the
    same tree while benchmarks run)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, check=True
            )
            .stdout.decode()
            .strip()
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *ENGINE_PATHS],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# ── CPU accounting ─────────────────────────────────────────────────────────────────────────


def _cpu_s(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


@dataclass
class CpuMeter:
    """CPU seconds (user + system) used by each part during a run: the workers, the driver
    (this process), the downstream, and every `postgres` and `redis-server` process on the
    machine (shared: other users' work counts too)."""

    roles: dict[str, list[int]]
    start: dict[int, float] = field(default_factory=dict)
    machine_start: float = 0.0

    @classmethod
    def begin(cls, workers: Sequence[int], downstream: int) -> CpuMeter:
        meter = cls({"workers": list(workers), "driver": [os.getpid()], "downstream": [downstream]})
        meter.start = meter._sample()
        meter.machine_start = _machine_busy_s()
        return meter

    def _servers(self) -> None:
        for name in ("postgres", "redis-server"):
            self.roles[name] = [p.pid for p in psutil.process_iter(["name"]) if p.name() == name]

    def _sample(self) -> dict[int, float]:
        self._servers()
        pids = {pid for pids in self.roles.values() for pid in pids}
        return {pid: _cpu_s(psutil.Process(pid)) for pid in pids if psutil.pid_exists(pid)}

    def used(self) -> dict[str, float]:
        """CPU seconds per role since `begin` (processes that exited meanwhile are missed)."""
        now = self._sample()
        used = {
            role: round(sum(now.get(p, 0.0) - self.start.get(p, 0.0) for p in pids), 2)
            for role, pids in self.roles.items()
        }
        machine = _machine_busy_s() - self.machine_start
        used["everything_else"] = round(machine - sum(used.values()), 2)
        return used


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all CPUs, everything but idle and iowait)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


# ── the workflows ──────────────────────────────────────────────────────────────────────────


def workflows(base: str, answer: str) -> tuple[Workflow, Workflow]:
    """(child, parent): the child is one GATEWAY POST; the parent SPAWNER → MERGE."""
    child = Workflow.model_validate(
        {
            "name": CHILD,
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/process",
                        "method": "POST",
                        "headers": SMALL_ANSWER if answer == "small" else {},
                        "body": {"id": "{{ input.id }}"},
                    },
                }
            },
        }
    )
    parent = Workflow.model_validate(
        {
            "name": PARENT,
            "vertices": {
                "fan": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": CHILD},
                },
                "merge": {"type": "MERGE", "dependsOn": ["fan"], "config": {}},
            },
        }
    )
    return child, parent


async def publish(ops: Operations, base: str, answer: str) -> None:
    await as_user.publish(ops, workflows(base, answer))


def run_input(children: int) -> dict[str, Any]:
    return {"items": [{"id": i} for i in range(children)]}


# ── workers ────────────────────────────────────────────────────────────────────────────────


async def wait_for_markers(names: Sequence[str], timeout_s: float = 60) -> None:
    """Wait until every worker has written its health marker (it is up and claiming)."""
    health = OUT / "health"
    async with asyncio.timeout(timeout_s):
        while not all((health / name).exists() for name in names):
            await asyncio.sleep(0.1)


def worker_names(tag: str, count: int) -> list[str]:
    return [f"{tag}-w{i}" for i in range(count)]


def clear_markers(names: Sequence[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (OUT / "health" / name).unlink()


# ── measurements from the store ────────────────────────────────────────────────────────────


@dataclass
class ChildSummary:
    count: int = 0
    by_status: Counter[str] | None = None
    last_end: float | None = None
    last_created: float | None = None


async def summarize_children(ops: Operations, run_id: str) -> ChildSummary:
    """Page through the children in item order: statuses, last end, last creation."""
    summary = ChildSummary(by_status=Counter())
    async for child in as_user.children(ops, run_id):
        summary.count += 1
        assert summary.by_status is not None
        summary.by_status[child.status] += 1
        if child.ended_at is not None:
            summary.last_end = max(summary.last_end or 0.0, child.ended_at)
        summary.last_created = max(summary.last_created or 0.0, child.created_at)
    return summary


def _s_or_none(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round(later - earlier, 3)


CHILD_STEP_TIMES = text(
    """
    SELECT MIN(s.started_at) AS first_start, MAX(s.started_at) AS last_start,
           MIN(s.ended_at) AS first_end, SUM(CASE WHEN s.attempts > 1 THEN 1 ELSE 0 END) AS again
    FROM step s JOIN run r ON r.id = s.run_id
    WHERE r.parent_run_id = :run_id
    """
)


async def child_step_times(database_url: str, run_id: str) -> Any:
    """When the children's steps started and ended (one aggregate query, read-only: no
    operation aggregates the steps of every child, and reading each child's detail would
    take N queries)."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(CHILD_STEP_TIMES, {"run_id": run_id})).one()
    finally:
        await engine.dispose()


async def timings(ops: Operations, database_url: str, run_id: str) -> dict[str, Any]:
    run = await ops.runs.get(run_id)
    child_steps = await child_step_times(database_url, run_id)
    steps = {s.vertex_id: s for s in run.steps}
    children = await summarize_children(ops, run_id)
    fan, merge = steps["fan"], steps["merge"]
    return {
        "store_wall_s": _s_or_none(run.ended_at, run.created_at),
        "spawn_s": _s_or_none(children.last_created, run.created_at),
        "first_child_start_s": _s_or_none(child_steps.first_start, run.created_at),
        "first_child_end_s": _s_or_none(child_steps.first_end, run.created_at),
        "last_child_start_s": _s_or_none(child_steps.last_start, run.created_at),
        "last_child_end_s": _s_or_none(children.last_end, run.created_at),
        "child_steps_run_again": int(child_steps.again or 0),
        "merge_delay_s": _s_or_none(merge.ended_at, children.last_end),
        "join_close_s": _s_or_none(fan.ended_at, children.last_end),
        "merge_claim_s": _s_or_none(merge.started_at, fan.ended_at),
        "merge_exec_s": _s_or_none(merge.ended_at, merge.started_at),
        "merge_attempts": merge.attempts,
        "spawner_attempts": fan.attempts,
        "children": children.count,
        "children_by_status": dict(children.by_status or {}),
    }


# ── profiling ──────────────────────────────────────────────────────────────────────────────


async def profile(pids: Sequence[int], after_s: float, duration_s: float, tag: str) -> list[Path]:
    """py-spy (raw format) on every pid for `duration_s`, starting `after_s` from now."""
    await asyncio.sleep(after_s)
    paths = [OUT / f"{tag}-{pid}.pyspy.txt" for pid in pids]
    procs = []
    for pid, path in zip(pids, paths, strict=True):
        command = [PYSPY, "record", "--pid", str(pid), "-d", str(int(duration_s))]
        command += ["--format", "raw", "-o", str(path), "--nonblocking"]
        procs.append(
            await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
        )
    async with asyncio.timeout(duration_s + 60):
        await asyncio.gather(*(p.wait() for p in procs))
    return [p for p in paths if p.exists()]


BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Each sampled stack counts once, for the first bucket one of whose needles it contains.
    ("MERGE step", ("run_merge (engine/execution/fanout.py",)),
    ("SPAWNER: creating children", ("create_children (engine/store/fanout.py",)),
    ("claim (WorkQueue.claim)", ("WorkQueue.claim (engine/store/queue.py",)),
    ("record results (WorkQueue.complete)", ("WorkQueue.complete (engine/store/queue.py",)),
    ("lease renewal / reaper", ("Worker._renew", "Worker._reap")),
    ("admission: per-attempt ticket (admit + settle)", ("AdmissionGuard",)),
    ("admission: batched Redis exchange", ("ExchangeBatcher", "CoordinationBackend.exchange")),
    ("admission: other", ("admission/",)),
    ("GATEWAY: build request", ("build_request (vertices/gateway",)),
    ("GATEWAY: HTTP exchange (aiohttp)", ("_exchange (vertices/gateway",)),
    ("GATEWAY: other (log lines, body parsing)", ("vertices/gateway",)),
    ("executor (context, outcome)", ("engine/execution/executor.py",)),
    ("heartbeat / wake-ups", ("engine/coordination/heartbeat.py", "engine/coordination/wakeup.py")),
    ("worker loops (other)", ("engine/execution/worker.py",)),
    # Stacks with no engine frame: SQLAlchemy's greenlet (py-spy shows it from
    # Connection.execute, without the caller) or I/O callbacks run by the event loop.
    ("database client, caller not visible (greenlet / I/O callbacks)", ("sqlalchemy/", "asyncpg/")),
    ("Redis client I/O callbacks", ("redis/",)),
    ("HTTP client I/O callbacks", ("aiohttp/", "httpx/")),
)


def _function(frame: str) -> str:
    """`name (path/to/file.py:123)` → `name (file.py)` with a short path."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{name} ({short})"


def _bucket(stack: str) -> str:
    for label, needles in BUCKETS:
        if any(needle in stack for needle in needles):
            return label
    return "event loop and everything else"


def summarize_profile(paths: Sequence[Path], top: int = 12) -> dict[str, Any]:
    """Where the workers' time goes (% of the samples py-spy counted as active): by engine
    area (exclusive buckets, see BUCKETS) and the top functions by self time."""
    self_time: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            self_time[_function(stack.rsplit(";", 1)[-1])] += count
            areas[_bucket(stack)] += count
    if not total:
        return {"samples": 0}
    return {
        "samples": total,
        "by_area_pct": [(name, round(100 * n / total, 1)) for name, n in areas.most_common()],
        "self_pct": [(name, round(100 * n / total, 1)) for name, n in self_time.most_common(top)],
    }


# ── one run ────────────────────────────────────────────────────────────────────────────────


RUN_STATUS = text("SELECT status FROM run WHERE id = :run_id")


async def run_status(engine: AsyncEngine, run_id: str) -> str | None:
    """The run's status alone: `Store.get_run` would decode the parent's input (the whole
    item list) on every poll."""
    async with engine.connect() as conn:
        return (await conn.execute(RUN_STATUS, {"run_id": run_id})).scalar_one_or_none()


async def analyze(engine: AsyncEngine) -> None:
    """Refresh the planner statistics of the queue tables (what autovacuum's autoanalyze does;
    this machine's PostgreSQL runs with autovacuum = off)."""
    async with engine.connect() as conn:
        sql = "ANALYZE step, run" if engine.dialect.name == "postgresql" else "ANALYZE"
        await conn.execute(text(sql))
        await conn.commit()


async def wait_until_done(
    args: argparse.Namespace, store: Store, engine: AsyncEngine, run_id: str
) -> tuple[bool, dict[str, int]]:
    """Poll the parent run's status; print progress to stderr every 10 s; ANALYZE every
    `--analyze-every` s. Returns (succeeded, last progress)."""
    started = time.perf_counter()
    last_report = last_analyze = started
    progress: dict[str, int] = {}
    while time.perf_counter() - started < args.timeout:
        status = await run_status(engine, run_id)
        if status is not None and status != "RUNNING":
            return status == "SUCCEEDED", progress
        now = time.perf_counter()
        if args.analyze_every > 0 and now - last_analyze >= args.analyze_every:
            last_analyze = now
            await analyze(engine)
        if now - last_report >= 10:
            last_report = now
            # The store's counters alone: ops.runs.get would also decode the input and read
            # 5,000 log lines every 10 s, load on what is being measured.
            progress = await store.fanout_progress(run_id)
            rate = progress.get("succeeded", 0) / (now - started)
            print(
                f"  t={now - started:.0f}s {json.dumps(progress)} ({rate:.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
        await asyncio.sleep(POLL_S)
    return False, await store.fanout_progress(run_id)


@dataclass
class Processes:
    procs: list[Any]
    pids: list[int]
    local: asyncio.Task[None] | None


def launch(
    args: argparse.Namespace, backend: Backend, runtime: Runtime, stop: asyncio.Event, tag: str
) -> Processes:
    if args.workers == 0:
        # As `schemabridge serve` and `run` do before their worker starts: without it this
        # process's full collections walk the whole start-up heap (9 % fewer children/s).
        settle_heap()
        local = asyncio.create_task(runtime.worker().run(stop))
        return Processes([], [os.getpid()], local)
    env = worker_env(
        backend,
        worker_concurrency=str(args.concurrency),
        admission_enabled=str(args.admission == "on").lower(),
    )
    clear_markers(worker_names(tag, args.workers))
    procs = start_workers(env, args.workers, tag)
    return Processes(procs, [p.pid for p in procs], None)


def cpu_ms_per_child(cpu_used: dict[str, float], children: int) -> float:
    return round(1000 * sum(cpu_used.get(k, 0.0) for k in CHILD_CPU_ROLES) / children, 3)


async def measure(
    args: argparse.Namespace, runtime: Runtime, procs: Processes, downstream: Downstream, tag: str
) -> dict[str, Any]:
    """Create the parent run, wait for it, and gather what the module docstring lists."""
    commit = code_version()  # what the workers, started just before, have loaded
    ops = Operations(runtime)
    items = run_input(args.children)
    stop = asyncio.Event()
    sampler = RssSampler(procs.pids)
    sampling = asyncio.create_task(sampler.run(stop))
    profiling = None
    if args.profile_s > 0:
        profiling = asyncio.create_task(
            profile(procs.pids, args.profile_after, args.profile_s, tag)
        )
    load_before = os.getloadavg()
    cpu = CpuMeter.begin(procs.pids, downstream.pid)
    started = time.perf_counter()
    run_id = await as_user.submit(ops, PARENT, items)
    poller = create_async_engine(runtime.settings.database_url)
    try:
        done, progress = await wait_until_done(args, runtime.store, poller, run_id)
    finally:
        await poller.dispose()
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    cpu_used = cpu.used()
    profile_paths = await profiling if profiling is not None else []
    stop.set()
    await sampling
    result: dict[str, Any] = {
        "commit": commit,
        "backend": args.backend,
        "workers": args.workers,
        "children": args.children,
        "admission": args.admission,
        "analyze_every_s": args.analyze_every,
        "succeeded": done,
        "wall_s": round(wall, 2),
        "children_per_s": round(args.children / wall, 1),
    }
    if done:
        result |= await timings(ops, runtime.settings.database_url, run_id)
    else:
        result["progress_at_timeout"] = progress
    return (
        result
        | {
            "worker_peak_rss_mb": sampler.peaks_mb(),
            "requests": await downstream_requests(downstream.url),
            "cpu_s": cpu_used,
            "cpu_ms_per_child": cpu_ms_per_child(cpu_used, args.children),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
        }
        | ({"profile": summarize_profile(profile_paths)} if profile_paths else {})
    )


def remove_sqlite_file(backend: Backend) -> None:
    """bench.common leaves SQLite files in bench/out; a 10,000-child run makes 20 MB."""
    if backend.name != "sqlite":
        return
    path = Path(backend.database_url.removeprefix("sqlite+aiosqlite:///"))
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


async def once(args: argparse.Namespace, repetition: int) -> dict[str, Any]:
    """One measured run on a fresh database with fresh workers and a fresh downstream."""
    backend = await make_backend(args.backend)
    tag = f"sbfan-{args.backend}-{args.children}"
    try:
        async with downstream_process(args.latency_ms) as downstream:
            settings = Settings(
                database_url=backend.database_url,
                redis_url=backend.redis_url,
                worker_concurrency=args.concurrency,
                admission_enabled=args.admission == "on",
                tenant_rate_per_minute=100_000_000,  # as bench.common.worker_env sets it
                # The items travel in the run's input: 100,000 of them are about 1.3 MB.
                max_input_bytes=64 * 1024 * 1024,
            )
            runtime = await Runtime.open(settings)
            stop = asyncio.Event()
            procs: Processes | None = None
            try:
                await publish(Operations(runtime), downstream.url, args.answer)
                procs = launch(args, backend, runtime, stop, tag)
                if procs.procs:
                    await wait_for_markers(worker_names(tag, args.workers))
                return await measure(args, runtime, procs, downstream, f"{tag}-r{repetition}")
            finally:
                stop.set()
                if procs is not None:
                    if procs.local is not None:
                        await procs.local
                    stop_workers(procs.procs)
                await runtime.close()
    finally:
        if args.keep_db:
            print(f"kept database: {backend.database_url}", file=sys.stderr)
        else:
            await backend.drop()
            remove_sqlite_file(backend)


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


def summary_of(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [r for r in results if r["succeeded"]]
    return {
        "backend": args.backend,
        "workers": args.workers,
        "children": args.children,
        "concurrency": args.concurrency,
        "admission": args.admission,
        "analyze_every_s": args.analyze_every,
        "answer": args.answer,
        "runs": len(results),
        "finished": len(finished),
        "median_wall_s": _median_or_none([r["wall_s"] for r in finished]),
        "median_children_per_s": _median_or_none([r["children_per_s"] for r in finished]),
        "median_merge_delay_s": _median_or_none(
            [r["merge_delay_s"] for r in finished if r.get("merge_delay_s") is not None]
        ),
        "max_worker_rss_mb": max(max(r["worker_peak_rss_mb"] or [0]) for r in results),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--workers", type=int, default=2, help="0: one worker in this process")
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=64, help="steps in flight per worker")
    parser.add_argument("--answer", choices=["small", "echo"], default="small")
    parser.add_argument(
        "--admission", choices=["on", "off"], default="on", help="SCHEMABRIDGE_ADMISSION_ENABLED"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900, help="per run, seconds")
    parser.add_argument("--profile-s", type=float, default=0, help="py-spy duration (0: off)")
    parser.add_argument("--profile-after", type=float, default=2.0)
    parser.add_argument(
        "--analyze-every",
        type=float,
        default=0,
        help="PostgreSQL: ANALYZE step, run every S seconds during the run (0: never)",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--summarize", nargs="+", type=Path, help="only summarize py-spy raw profiles and exit"
    )
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    if args.summarize:
        print(json.dumps(summarize_profile(args.summarize), indent=1))
        return
    results = []
    for repetition in range(args.repeat):
        result = await once(args, repetition)
        print(json.dumps(result), flush=True)
        results.append(result)
    print("summary", json.dumps(summary_of(args, results)), flush=True)


if __name__ == "__main__":
    run_like_the_services(main(parse_args()))
