"""Shared plumbing of the admission benchmarks (bench/admission_*.py, bench/fairness.py).

* `downstream_process` — the demo downstream in its own subprocess (so its CPU is not in the
  driver's event loop), with `DownstreamControl` for live `POST /_config` and `GET /_stats`;
* `publish_fanout` — publishes through the operations layer the fan-out under test: parent
  `SPAWNER over {{ input.items }} → MERGE`, child one GATEWAY POST to the downstream under one
  explicit admission key (`DESTINATION`);
* `Tracer` — polls, every `period_s`, `Admission.snapshot()` (the destination's AIMD limit,
  in-flight slots, cuts, retry tokens, breaker states) through the driver's own `Runtime` on
  the same PostgreSQL + Redis, and the downstream's counters; optionally it also collects every
  request the downstream saw (arrival time, outcome, Idempotency-Key) from its ring buffer;
* `Fleet` — `schemabridge worker` subprocesses (bench/common.py) plus waiting for their health
  markers, so start-up is not timed;
* `wait_for_run` — polls the parent's status with a bare query (no decoding of its input).

Every benchmark starts with a fresh PostgreSQL database and its own keys deleted from Redis
db 14 (`fresh_backend`); workers get a tenant rate limit of 10^8/min from
bench/common.worker_env, so only the mechanism under test binds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench import as_user
from bench.common import (
    OUT,
    PG_ADMIN,
    REDIS_URL,
    Backend,
    start_workers,
    stop_workers,
    worker_env,
)
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import Store
from schemas.definitions import Workflow

DESTINATION = "bench-downstream"
CHILD = "bench-adm-child"
PARENT = "bench-adm-parent"
SMALL_ANSWER = {"X-Demo-Raw": '{"ok":true}', "X-Demo-Content-Type": "application/json"}
"""Per-request override: a tiny answer body. NB the demo applies `failRate` only to requests
*without* overrides, so the outage benchmark must not send it."""
PLOTS = Path(__file__).with_name("plots")


# ── a fresh backend ────────────────────────────────────────────────────────────────────────


BENCH_REDIS_URL = REDIS_URL
"""Redis for these benchmarks: db 14 (bench/common.py) unless SB_BENCH_REDIS_URL says
otherwise — bench/common.make_backend FLUSHes db 14 at every start, so a benchmark started by
someone else during ours wipes our AIMD and breaker state mid-run; give ours its own db then."""

MY_KEY_PATTERNS = ("*bench-downstream*", "*bench-dest-*", "sb:tenant-rate:tenant-*")


async def fresh_backend() -> Backend:
    """A fresh PostgreSQL database, like bench/common.make_backend, but without FLUSHDB of
    Redis db 14: only this module's keys (its destinations and tenants, and the id of the
    database the Redis serves, which the new one's workers write anew) are deleted, so an
    engineer's benchmark sharing db 14 is not disturbed (and cannot disturb ours: every key
    admission reads is per destination or per tenant)."""
    name = f"sb_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    client = redis.Redis.from_url(BENCH_REDIS_URL)
    try:
        for pattern in MY_KEY_PATTERNS:
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
        client.srem("sb:destinations", DESTINATION, *[f"bench-dest-{x}" for x in "ab"])
        # A Redis serves one database's processes (`engine.coordination.keys.STORE_ID`, named
        # here: this code also drives older snapshots, bench/interleave.sh): the new one takes
        # it over.
        client.delete("sb:store-id")
    finally:
        client.close()
    return Backend(
        "postgres", f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}", BENCH_REDIS_URL, name
    )


# ── the downstream ─────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Downstream:
    url: str
    pid: int


@contextlib.asynccontextmanager
async def downstream_process(
    latency_ms: float,
    capacity: int | None = None,
    retry_after_s: float = 1.0,
    fail_rate: float = 0.0,
) -> AsyncIterator[Downstream]:
    """`python -m demo.downstream` on a free port of 127.0.0.1."""
    command = [
        sys.executable, "-m", "demo.downstream", "--host", "127.0.0.1", "--port", "0",
        "--latency-ms", str(latency_ms), "--retry-after", str(retry_after_s),
        "--fail-rate", str(fail_rate),
    ]  # fmt: skip
    if capacity is not None:
        command += ["--capacity", str(capacity)]
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
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


class DownstreamControl:
    """Live configuration and statistics of a running demo downstream."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._client = httpx.AsyncClient(timeout=10)

    async def close(self) -> None:
        await self._client.aclose()

    async def configure(self, **changes: Any) -> dict[str, Any]:
        """`POST /_config` with camelCase fields (latencyMs, capacity, retryAfterS, failRate)."""
        response = await self._client.post(f"{self.base}/_config", json=changes)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def stats(self, recent: int = 0) -> dict[str, Any]:
        response = await self._client.get(f"{self.base}/_stats", params={"recent": str(recent)})
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


# ── the workflows ──────────────────────────────────────────────────────────────────────────


def child_workflow(
    base: str,
    *,
    small_answer: bool = True,
    max_auto_retries: int = 3,
    retry: dict[str, Any] | None = None,
    name: str = CHILD,
    destination: str = DESTINATION,
) -> Workflow:
    config: dict[str, Any] = {
        "url": f"{base}/work",
        "method": "POST",
        "destination": destination,
        "headers": SMALL_ANSWER if small_answer else {},
        "body": {"id": "{{ input.id }}"},
    }
    if retry is not None:
        config["retry"] = retry
    return Workflow.model_validate(
        {
            "name": name,
            "vertices": {
                "call": {"type": "GATEWAY", "maxAutoRetries": max_auto_retries, "config": config}
            },
        }
    )


def parent_workflow(child: str = CHILD, *, tolerate: bool = True) -> Workflow:
    """SPAWNER → MERGE; with `tolerate` the join accepts any number of FAILED children, so the
    parent ends once every child ended and the benchmark counts the children's statuses."""
    merge: dict[str, Any] = {}
    if tolerate:
        merge = {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailureRatio": 1.0}}
    return Workflow.model_validate(
        {
            "name": PARENT,
            "vertices": {
                "fan": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": child},
                },
                "merge": {"type": "MERGE", "dependsOn": ["fan"], "config": merge},
            },
        }
    )


async def publish_fanout(ops: Operations, child: Workflow, *, tolerate: bool = True) -> str:
    """Publish `child` and the fan-out parent over it; the parent's name (to submit)."""
    parent = parent_workflow(child.name, tolerate=tolerate)
    await as_user.publish(ops, [child, parent])
    return parent.name


def items(n: int) -> dict[str, Any]:
    return {"items": [{"id": i} for i in range(n)]}


# ── workers ────────────────────────────────────────────────────────────────────────────────


@dataclass
class Fleet:
    procs: list[subprocess.Popen[bytes]]
    names: list[str]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        stop_workers(self.procs)


async def start_fleet(
    backend: Backend,
    count: int,
    tag: str,
    *,
    breaker_thresholds: tuple[int, int] | None = None,
    **settings: str,
) -> Fleet:
    """`count` workers with `SCHEMABRIDGE_<KEY>=value` settings; returns once all are up.

    `breaker_thresholds` (tenant, global): an experiment, not a setting — the workers run
    through `python -m bench.admission_common worker …`, which replaces the breaker layers'
    consecutive-failure thresholds in the worker's AdmissionConfig before starting the CLI."""
    env = worker_env(backend, **settings)
    names = [f"{tag}-w{i}" for i in range(count)]
    health = OUT / "health"
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (health / name).unlink()
    if breaker_thresholds is None:
        procs = start_workers(env, count, tag)
    else:
        env[THRESHOLDS_ENV] = ",".join(str(x) for x in breaker_thresholds)
        procs = _start_patched(env, names)
    fleet = Fleet(procs, names)
    try:
        async with asyncio.timeout(60):
            while not all((health / name).exists() for name in names):
                for proc in fleet.procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"worker exited with {proc.returncode}; see bench/out")
                await asyncio.sleep(0.1)
    except BaseException:
        fleet.stop()
        raise
    return fleet


THRESHOLDS_ENV = "SB_BENCH_BREAKER_THRESHOLDS"


def _start_patched(env: dict[str, str], names: Sequence[str]) -> list[subprocess.Popen[bytes]]:
    procs = []
    for name in names:
        command = [sys.executable, "-m", "bench.admission_common", "worker", "--name", name]
        with (OUT / f"{name}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [*command, "--log-level", "warning"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def _patched_cli() -> None:
    """`schemabridge …` with the breaker thresholds from SB_BENCH_BREAKER_THRESHOLDS
    ("tenant,global") — for measuring what the breakers' thresholds do to a benchmark without
    touching the engine's code."""
    import dataclasses

    import engine.runtime as runtime_module
    from api.cli import main as cli_main

    tenant, global_ = (int(x) for x in os.environ[THRESHOLDS_ENV].split(","))
    original = runtime_module.admission_config

    def patched(settings: Any) -> Any:
        config = original(settings)
        return dataclasses.replace(
            config,
            tenant_breaker=dataclasses.replace(config.tenant_breaker, threshold=tenant),
            global_breaker=dataclasses.replace(config.global_breaker, threshold=global_),
        )

    runtime_module.admission_config = patched  # type: ignore[assignment]
    sys.argv = ["schemabridge", *sys.argv[1:]]
    cli_main()


# ── run status ─────────────────────────────────────────────────────────────────────────────


RUN_STATUS = text("SELECT status FROM run WHERE id = :run_id")
CHILD_STATUSES = text(
    "SELECT status, COUNT(*) AS n FROM run WHERE parent_run_id = :run_id GROUP BY status"
)
CHILD_ERRORS = text(
    """
    SELECT COALESCE(s.error ->> 'kind', '?') AS kind, COUNT(*) AS n
    FROM run r JOIN step s ON s.run_id = r.id
    WHERE r.parent_run_id = :run_id AND r.status = 'FAILED' AND s.status = 'FAILED'
    GROUP BY 1
    """
)
CHILD_ATTEMPTS = text(
    """
    SELECT s.auto_retries AS redispatches, COUNT(*) AS n
    FROM run r JOIN step s ON s.run_id = r.id
    WHERE r.parent_run_id = :run_id GROUP BY 1 ORDER BY 1
    """
)


class StatusPoller:
    """Bare queries on the run table (Store.get_run would decode a 50,000-item input)."""

    def __init__(self, database_url: str) -> None:
        self.engine: AsyncEngine = create_async_engine(database_url, pool_size=2)

    async def close(self) -> None:
        await self.engine.dispose()

    async def status(self, run_id: str) -> str | None:
        async with self.engine.connect() as conn:
            return (await conn.execute(RUN_STATUS, {"run_id": run_id})).scalar_one_or_none()

    async def children(self, run_id: str) -> dict[str, int]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(CHILD_STATUSES, {"run_id": run_id})).all()
        return {row.status: int(row.n) for row in rows}

    async def failure_kinds(self, run_id: str) -> dict[str, int]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(CHILD_ERRORS, {"run_id": run_id})).all()
        return {row.kind: int(row.n) for row in rows}

    async def redispatches(self, run_id: str) -> dict[int, int]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(CHILD_ATTEMPTS, {"run_id": run_id})).all()
        return {int(row.redispatches): int(row.n) for row in rows}


async def wait_for_run(
    poller: StatusPoller,
    store: Store,
    run_id: str,
    timeout_s: float,
    *,
    progress_every_s: float = 10.0,
    label: str = "",
) -> str:
    """Poll every 50 ms until the run leaves RUNNING; progress to stderr. Returns the status
    ("TIMEOUT" when `timeout_s` passed first)."""
    started = time.perf_counter()
    last = started
    while time.perf_counter() - started < timeout_s:
        status = await poller.status(run_id)
        if status is not None and status != "RUNNING":
            return status
        now = time.perf_counter()
        if now - last >= progress_every_s:
            last = now
            # The store's counters alone: ops.runs.get would decode the input and read the
            # log of a run under measurement.
            progress = await store.fanout_progress(run_id)
            print(f"  {label} t={now - started:.0f}s {json.dumps(progress)}", file=sys.stderr)
        await asyncio.sleep(0.05)
    return "TIMEOUT"


# ── tracing ────────────────────────────────────────────────────────────────────────────────


@dataclass
class Tracer:
    """Samples admission state and downstream counters every `period_s` from `t0`.

    Each sample: `t` (s since t0), `limit`, `slots`, `in_flight`, `cuts`, `tokens`,
    `global` / `tenant` breaker states, downstream `total` (arrivals), `ok` (200s), `r429`,
    `r503`, `ds_in_flight`. With `records`, every request the downstream answered is kept
    in `requests` (dicts with `t` relative to t0, `outcome`, `key`)."""

    runtime: Runtime
    control: DownstreamControl
    t0: float
    destination: str = DESTINATION
    period_s: float = 0.2
    records: bool = False
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lost_records: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)
    _ended: int = 0
    _want: int = 500

    def mark(self, what: str) -> None:
        self.events.append((round(time.time() - self.t0, 3), what))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a sample lost to a hiccup is not fatal
                await self.sample()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period_s):
                    await stop.wait()
        await self.sample()

    async def sample(self) -> None:
        snapshot = await self.runtime.admission.snapshot()
        stats = await self.control.stats(recent=self._want if self.records else 0)
        now = time.time() - self.t0
        row: dict[str, Any] = {"t": round(now, 3)}
        for dest in snapshot.destinations:
            if dest.destination == self.destination:
                tenants = {k: v.state.value for k, v in dest.tenant_breakers.items()}
                row |= {
                    "limit": round(dest.limit, 3),
                    "slots": dest.slots,
                    "in_flight": dest.in_flight,
                    "cuts": dest.cuts,
                    "tokens": round(dest.retry_tokens, 2),
                    "global": dest.global_breaker.state.value,
                    "tenant": tenants,
                }
        by = stats["byStatus"]
        row |= {
            "total": stats["total"],
            "ok": by.get("200", 0),
            "r429": by.get("429", 0),
            "r503": by.get("503", 0),
            "ds_in_flight": stats["inFlight"],
        }
        self.samples.append(row)
        if self.records:
            self._collect(stats)

    def _collect(self, stats: dict[str, Any]) -> None:
        ended = sum(stats["byStatus"].values())
        new = ended - self._ended
        recent = stats["recent"]
        if new > len(recent):
            self.lost_records += new - len(recent)
        fresh = recent[-new:] if new > 0 else []
        self.requests += [
            {
                "t": round(r["t"] - self.t0, 4),
                "outcome": r["outcome"],
                "key": r["idempotencyKey"],
            }
            for r in fresh
        ]
        self._ended = ended
        self._want = min(10_000, max(500, 3 * new))


def limit_at(samples: Sequence[dict[str, Any]], t: float) -> float | None:
    last = None
    for s in samples:
        if s["t"] > t:
            break
        last = s.get("limit", last)
    return last


def windows(
    requests: Sequence[dict[str, Any]], start: float, end: float, width: float = 1.0
) -> list[tuple[float, int, int]]:
    """(window end, requests, 429s) for consecutive windows of `width` s over [start, end)."""
    out = []
    t = start
    ordered = sorted(requests, key=lambda r: r["t"])
    i = 0
    while t < end - 1e-9:
        hi = min(t + width, end)
        n = n429 = 0
        while i < len(ordered) and ordered[i]["t"] < t:
            i += 1
        j = i
        while j < len(ordered) and ordered[j]["t"] < hi:
            n += 1
            n429 += ordered[j]["outcome"] == "429"
            j += 1
        out.append((round(hi, 3), n, n429))
        t = hi
    return out


def outcomes(requests: Sequence[dict[str, Any]], start: float, end: float) -> Counter[str]:
    return Counter(r["outcome"] for r in requests if start <= r["t"] < end)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def other_benchmarks() -> list[str]:
    """Command lines of `schemabridge worker` processes that are not this process's children."""
    mine = {str(os.getpid())}
    found = []
    for line in subprocess.run(
        ["pgrep", "-fa", "schemabridge worker"], capture_output=True, text=True, check=False
    ).stdout.splitlines():
        pid = line.split(" ", 1)[0]
        with contextlib.suppress(OSError):
            ppid = Path(f"/proc/{pid}/stat").read_text().split()[3]
            if ppid not in mine:
                found.append(line)
    return found


def plot_path(name: str) -> Path:
    PLOTS.mkdir(exist_ok=True)
    return PLOTS / name


# ── series and plots ───────────────────────────────────────────────────────────────────────


def rates(samples: Sequence[dict[str, Any]], width: float = 1.0) -> list[dict[str, float]]:
    """Per sample: requests, 200s and 429s per second over the trailing `width` seconds
    (from the downstream's counters), and the 429 share of that window."""
    out = []
    j = 0
    for s in samples:
        while j < len(samples) and samples[j]["t"] < s["t"] - width:
            j += 1
        base = samples[max(0, j - 1)] if j > 0 else samples[0]
        span = s["t"] - base["t"]
        if span <= 0:
            continue
        total = s["total"] - base["total"]
        r429 = s["r429"] - base["r429"]
        out.append(
            {
                "t": s["t"],
                "rps": total / span,
                "ok_ps": (s["ok"] - base["ok"]) / span,
                "r429_ps": r429 / span,
                "r503_ps": (s["r503"] - base["r503"]) / span,
                "share429": r429 / total if total else 0.0,
            }
        )
    return out


def step_windows(
    samples: Sequence[dict[str, Any]], start: float, end: float, width: float = 1.0
) -> list[dict[str, float]]:
    """Consecutive windows [start + k·width, start + (k+1)·width) clipped to `end`, from the
    counter samples nearest to each edge: requests and 429s in each."""

    def at(t: float) -> dict[str, Any]:
        best = samples[0]
        for s in samples:
            if s["t"] <= t:
                best = s
            else:
                break
        return best

    out = []
    t = start
    while t < end - 1e-6:
        lo, hi = at(t), at(min(t + width, end))
        total = hi["total"] - lo["total"]
        r429 = hi["r429"] - lo["r429"]
        out.append(
            {
                "from": round(t - start, 2),
                "requests": total,
                "r429": r429,
                "share429": round(r429 / total, 4) if total else 0.0,
            }
        )
        t += width
    return out


def plot_runs(
    runs: Sequence[tuple[str, Sequence[dict[str, Any]], Sequence[tuple[float, str]]]],
    path: Path,
    title: str,
    capacity_lines: Sequence[tuple[float, float]] = (),
) -> Path | None:
    """One column of two panels per run: (top) AIMD limit and the downstream's in-flight
    count, (bottom) 200s/s and 429s/s (1 s trailing windows). `capacity_lines`: (from t,
    capacity) steps drawn on the top panel. Returns None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cols = len(runs)
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 6.5), squeeze=False, sharex="col")
    for col, (label, samples, marks) in enumerate(runs):
        top, bottom = axes[0][col], axes[1][col]
        t = [s["t"] for s in samples if "limit" in s]
        if t:
            top.plot(t, [s["limit"] for s in samples if "limit" in s], label="AIMD limit")
        top.plot(
            [s["t"] for s in samples],
            [s["ds_in_flight"] for s in samples],
            label="downstream in flight",
            alpha=0.6,
            linewidth=0.8,
        )
        if capacity_lines:
            xs, ys = [], []
            end = samples[-1]["t"] if samples else 0
            for i, (since, cap) in enumerate(capacity_lines):
                until = capacity_lines[i + 1][0] if i + 1 < len(capacity_lines) else end
                xs += [since, until]
                ys += [cap, cap]
            top.plot(xs, ys, "k--", linewidth=0.8, label="capacity")
        for when, what in marks:
            top.axvline(when, color="grey", linewidth=0.5)
            bottom.axvline(when, color="grey", linewidth=0.5)
            top.annotate(what, (when, 0), fontsize=7, rotation=90, va="bottom")
        top.set_title(label, fontsize=9)
        top.set_ylabel("concurrent calls")
        top.legend(fontsize=7, loc="upper right")
        series = rates(samples)
        bottom.plot([r["t"] for r in series], [r["ok_ps"] for r in series], label="200/s")
        bottom.plot([r["t"] for r in series], [r["r429_ps"] for r in series], label="429/s")
        if any(r["r503_ps"] for r in series):
            bottom.plot([r["t"] for r in series], [r["r503_ps"] for r in series], label="503/s")
        bottom.set_xlabel("seconds since the fan-out was submitted")
        bottom.set_ylabel("answers per second (1 s window)")
        bottom.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ── why children were redispatched (from their run logs) ───────────────────────────────────


CHILD_WARNINGS = text(
    """
    SELECT l.message FROM run_log l JOIN run r ON r.id = l.run_id
    WHERE r.parent_run_id = :run_id AND l.level IN ('warning', 'error')
    """
)


def _delay_bucket(seconds: float) -> str:
    for edge in (1, 5, 10, 20, 30, 60, 90):
        if seconds <= edge + 0.5:
            return f"<={edge}s"
    return ">90s"


async def log_reasons(poller: StatusPoller, run_id: str) -> dict[str, Any]:
    """From the children's warning/error log lines: why admission refused attempts (counts by
    reason), and the redispatch delays the engine chose (histogram)."""
    import re

    async with poller.engine.connect() as conn:
        messages = (await conn.execute(CHILD_WARNINGS, {"run_id": run_id})).scalars().all()
    refusals: Counter[str] = Counter()
    delays: Counter[str] = Counter()
    final: Counter[str] = Counter()
    for message in messages:
        if "refused by admission" in message:
            reason = message.split("refused by admission: ", 1)[-1]
            reason = re.sub(r"'[^']*'", "…", reason)
            reason = re.sub(r"in [0-9.]+ s", "in N s", reason)
            reason = re.sub(r"\([0-9]+ calls in flight, limit [0-9.]+\)", "(…)", reason)
            refusals[reason[:140]] += 1
        match = re.search(r": redispatch (\d+) in ([0-9.]+) s", message)
        if match:
            delays[_delay_bucket(float(match.group(2)))] += 1
        elif message.startswith("step failed"):
            final[re.sub(r"[0-9.]+", "N", message)[:120]] += 1
    return {
        "refusals": dict(refusals.most_common(8)),
        "redispatch_delays": dict(sorted(delays.items())),
        "final_failures": dict(final.most_common(5)),
    }


if __name__ == "__main__":
    _patched_cli()


# ── profiling (py-spy) ─────────────────────────────────────────────────────────────────────


PYSPY = str(Path(sys.executable).with_name("py-spy"))
AREAS: tuple[tuple[str, str], ...] = (
    ("admission (admission/*)", "admission/"),
    ("  admission.admit", "admit (admission/controller.py"),
    ("  ticket settle", "_settle (admission/controller.py"),
    ("  exchange batcher", "ExchangeBatcher"),
    ("redis client", "redis/"),
    ("gateway.execute (whole call)", "execute (vertices/gateway.py"),
    ("aiohttp", "aiohttp/"),
    ("store.complete", "complete (engine/store/queue.py"),
    ("store.claim", "claim (engine/store/queue.py"),
    ("sqlalchemy", "sqlalchemy/"),
    ("asyncpg", "asyncpg/"),
    ("asyncio event loop", "asyncio/base_events.py"),
)


async def profile(pids: Sequence[int], after_s: float, duration_s: float, tag: str) -> list[Path]:
    """py-spy (raw, --nonblocking) on every pid for `duration_s`, starting `after_s` from now."""
    await asyncio.sleep(after_s)
    paths = [OUT / f"{tag}-{pid}.pyspy.txt" for pid in pids]
    procs = []
    for pid, path in zip(pids, paths, strict=True):
        command = [PYSPY, "record", "--pid", str(pid), "-d", str(int(duration_s)), "-r", "50"]
        command += ["--format", "raw", "-o", str(path), "--nonblocking"]
        procs.append(
            await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
        )
    async with asyncio.timeout(duration_s + 60):
        await asyncio.gather(*(p.wait() for p in procs))
    return [p for p in paths if p.exists()]


def summarize_profile(paths: Sequence[Path], top: int = 12) -> dict[str, Any]:
    """Self time by function and inclusive time by area, in % of all samples (idle
    included: py-spy records the event loop's select() as `select (selectors.py)`)."""
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
            frames = stack.split(";")
            name, _, where = frames[-1].partition(" (")
            self_time[f"{name} ({where.rsplit('/', 1)[-1].split(':')[0]})"] += count
            for area, needle in AREAS:
                if needle in stack:
                    areas[area] += count
    if not total:
        return {"samples": 0}
    return {
        "samples": total,
        "self_pct": [(n, round(100 * c / total, 1)) for n, c in self_time.most_common(top)],
        "inclusive_pct": [(n, round(100 * c / total, 1)) for n, c in areas.most_common()],
    }


# ── slot turnaround ────────────────────────────────────────────────────────────────────────


def held_slots(records: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(arrival, answer) of each call that held a downstream slot, from its request records
    (arrival `t`, `durationMs`): the answered-200 ones (a 429 is answered at once)."""
    return [
        (float(r["t"]), float(r["t"]) + float(r["durationMs"]) / 1000)
        for r in records
        if r.get("outcome") == "200"
    ]


def call_span(records: Sequence[dict[str, Any]], submitted_at: float) -> dict[str, Any]:
    """When the downstream saw the run's first call arrive and its last call answered, in
    seconds after the submission (`time.time()` at `submitted_at`), from its request records:
    the start-up the run pays before any slot is busy (submission, the spawner's first batch,
    a claim, admission) and what it pays after the last answer (the join, the status poll)."""
    held = held_slots(records)
    if not held:
        return {}
    first = min(arrival for arrival, _ in held)
    last = max(answer for _, answer in held)
    return {
        "first_call_s": round(first - submitted_at, 3),
        "last_answer_s": round(last - submitted_at, 3),
    }


def slot_turnaround(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How long a downstream slot stays empty between one call's answer and the next call's
    arrival, from the downstream's own request records (arrival `t`, `durationMs`).

    Only answered-200 calls hold a slot (a 429 is answered at once). Events are replayed in
    time order: an answer frees a slot, an arrival takes the oldest freed one (FIFO), and the
    gap between the two is what the client side costs per call — reading the answer,
    settling admission, recording, claiming, admitting and sending the next request. Arrivals
    with no freed slot waiting (the ramp-up) are not gaps. Little's law ties it to the mean
    occupancy: busy slots ≈ limit x latency / (latency + mean gap)."""
    events: list[tuple[float, int]] = []
    for arrival, answer in held_slots(records):
        events += [(arrival, 1), (answer, 0)]
    events.sort()  # an answer (0) before an arrival (1) at the same instant
    freed: list[float] = []
    head = 0
    gaps: list[float] = []
    for at, kind in events:
        if kind == 0:
            freed.append(at)
        elif head < len(freed):
            gaps.append(1000 * (at - freed[head]))
            head += 1
    if not gaps:
        return {"calls": 0}
    gaps.sort()
    return {
        "calls": len(gaps),
        "mean_ms": round(sum(gaps) / len(gaps), 2),
        "p50_ms": round(gaps[len(gaps) // 2], 2),
        "p90_ms": round(gaps[int(0.9 * (len(gaps) - 1))], 2),
        "p99_ms": round(gaps[int(0.99 * (len(gaps) - 1))], 2),
    }
