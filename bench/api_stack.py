"""The REST benchmarks' stack: a fresh PostgreSQL database, `schemabridge api` and `worker`
subprocesses, an admin key, the demo downstream, and a closed-loop HTTP driver.

Used by bench/api_submit.py and bench/api_list.py. Every process listens on a free loopback
port (port 0; the URL is read from its first stdout line) and is stopped on exit. Redis is
`SB_BENCH_REDIS_URL` (default 127.0.0.1:6379 database 11), flushed at the start: give the
benchmark a database of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
import redis

from bench.common import OUT, PG_ADMIN, SCHEMABRIDGE, percentile

REDIS_URL = os.environ.get("SB_BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
START_TIMEOUT_S = 180.0
"""A Python service starting beside others on a loaded 2-core machine can take a minute."""
STOP_TIMEOUT_S = 30.0


# ── the database ────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Database:
    name: str

    @property
    def url(self) -> str:
        """The SQLAlchemy URL SchemaBridge processes are given."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{self.name}"

    @property
    def dsn(self) -> str:
        """The same database for asyncpg directly (the bare endpoint, bulk loads)."""
        return f"postgresql://postgres@127.0.0.1:5432/{self.name}"


@contextlib.asynccontextmanager
async def fresh_database(prefix: str, *, keep: bool = False) -> AsyncIterator[Database]:
    """An empty PostgreSQL database (dropped on exit unless `keep`); `REDIS_URL` flushed."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    redis.Redis.from_url(REDIS_URL).flushdb()
    try:
        yield Database(name)
    finally:
        if not keep:
            conn = await asyncpg.connect(PG_ADMIN)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()


def service_env(db: Database, **settings: str) -> dict[str, str]:
    """The environment of every SchemaBridge subprocess (and of this process's own runtime)."""
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = db.url
    env["SCHEMABRIDGE_REDIS_URL"] = REDIS_URL
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(OUT / "health")
    # Only the REST path is under test: the tenant rate limit must not bind.
    env["SCHEMABRIDGE_TENANT_RATE_PER_MINUTE"] = "100000000"
    for key, value in settings.items():
        env[f"SCHEMABRIDGE_{key.upper()}"] = value
    return env


def cli(env: dict[str, str], *args: str) -> str:
    """Run `schemabridge ARGS…` to completion; its stdout (raises with stderr on failure)."""
    done = subprocess.run(
        [SCHEMABRIDGE, *args], env=env, capture_output=True, timeout=START_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"schemabridge {' '.join(args)}: {done.stderr.decode()[-2000:]}")
    return done.stdout.decode()


def migrate_and_key(env: dict[str, str]) -> str:
    """`schemabridge db upgrade`, then `keys create --admin`: the admin key's secret."""
    cli(env, "db", "upgrade")
    return cli(env, "keys", "create", "--admin", "--name", "bench").strip()


# ── processes ───────────────────────────────────────────────────────────────────────────────


@dataclass
class Service:
    """A subprocess that announced `… listening on URL` on stdout (`url`), or a worker."""

    name: str
    process: asyncio.subprocess.Process
    url: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


async def _first_url(process: asyncio.subprocess.Process, name: str) -> str:
    if process.stdout is None:
        raise RuntimeError(f"{name}: no stdout")
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                line = (await process.stdout.readline()).decode()
                if not line:
                    raise RuntimeError(f"{name} exited before listening (bench/out/{name}.log)")
                if "http://" in line:
                    return line.strip().rsplit(" ", 1)[-1]
    except TimeoutError:
        raise RuntimeError(f"{name} not listening after {START_TIMEOUT_S:g} s") from None


async def start_service(
    name: str, command: Sequence[str], env: dict[str, str], *, announces: bool = True
) -> Service:
    """Start `command` (stderr to bench/out/NAME.log); wait for its URL when it `announces`."""
    OUT.mkdir(exist_ok=True)
    with (OUT / f"{name}.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            stdout=asyncio.subprocess.PIPE if announces else log,
            stderr=log,
        )
    service = Service(name, process)
    if announces:
        try:
            service.url = await _first_url(process, name)
        except BaseException:
            await stop_services([service])
            raise
    return service


async def stop_services(services: Sequence[Service]) -> None:
    """SIGTERM each, wait (bounded) for a graceful stop, then SIGKILL what is left."""
    for service in services:
        if service.process.returncode is None:
            service.process.terminate()
    for service in services:
        try:
            await asyncio.wait_for(service.process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            service.process.kill()
            await service.process.wait()


def api_command(access_log: bool, tree: Path | None = None) -> list[str]:
    """`schemabridge api` on a free port; with `tree`, the code of that directory (see
    `exported_tree`; the subprocess needs `tree_env`)."""
    # `api` logs every request by default; `--no-access-log` is understood by the old trees
    # (before `--access-log` took a value) and the new alike.
    log = [] if access_log else ["--no-access-log"]
    args = ["api", "--port", "0", "--log-level", "warning", *log]
    if tree is None:
        return [SCHEMABRIDGE, *args]
    # -P: no script directory on sys.path, so PYTHONPATH (the tree) wins over this checkout.
    return [sys.executable, "-P", "-c", "from api.cli import main; main()", *args]


def exported_tree(ref: str) -> Path:
    """The files of commit `ref` (`git archive`), made once in the system's temporary
    directory (`schemabridge-trees/<commit>`; outside the repository, where the tests that read
    every file of it would find a second copy): the code a before/after comparison runs as
    "before", beside this checkout's."""
    root = Path(__file__).resolve().parent.parent
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
            cwd=root,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    tree = Path(tempfile.gettempdir()) / "schemabridge-trees" / commit[:12]
    if not (tree / "engine").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit], cwd=root, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def tree_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    """`env` for a process running the code of `tree` instead of this checkout's."""
    return {**env, "PYTHONPATH": str(tree)}


def worker_command(name: str) -> list[str]:
    return [SCHEMABRIDGE, "worker", "--name", name, "--log-level", "info"]


def downstream_command(latency_ms: float) -> list[str]:
    return [
        sys.executable, "-m", "demo.downstream", "--host", "127.0.0.1", "--port", "0",
        "--latency-ms", str(latency_ms),
    ]  # fmt: skip


ServiceSpec = tuple[str, list[str], dict[str, str], bool]
"""(name, command, env, announces a URL)."""


@contextlib.asynccontextmanager
async def services(specs: Sequence[ServiceSpec]) -> AsyncIterator[list[Service]]:
    """Start the services concurrently (in `specs` order in the list); stop them on exit."""
    started: dict[int, Service] = {}

    async def one(index: int, spec: ServiceSpec) -> None:
        name, command, env, announces = spec
        started[index] = await start_service(name, command, env, announces=announces)

    try:
        async with asyncio.TaskGroup() as group:
            for index, spec in enumerate(specs):
                group.create_task(one(index, spec))
        yield [started[i] for i in range(len(specs))]
    finally:
        await stop_services(list(started.values()))


# ── measuring ───────────────────────────────────────────────────────────────────────────────


def _cpu_s(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _machine_busy_s() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass
class CpuMeter:
    """CPU seconds used by each role (named pids, plus every `postgres` and `redis-server`
    process) between `begin` and `used`; `everything_else` is the rest of the machine."""

    roles: dict[str, list[int]]
    start: dict[int, float] = field(default_factory=dict)
    machine_start: float = 0.0

    @classmethod
    def begin(cls, roles: dict[str, list[int]]) -> CpuMeter:
        meter = cls({**roles, "driver": [os.getpid()]})
        meter._servers()
        meter.start = {pid: _cpu_s(pid) for pids in meter.roles.values() for pid in pids}
        meter.machine_start = _machine_busy_s()
        return meter

    def _servers(self) -> None:
        for name in ("postgres", "redis-server"):
            self.roles[name] = [p.pid for p in psutil.process_iter(["name"]) if p.name() == name]

    def used(self) -> dict[str, float]:
        """CPU seconds per role; a server process that started meanwhile counts in full, one
        that exited meanwhile (a closed PostgreSQL connection's backend) is missed."""
        self._servers()
        now = {pid: _cpu_s(pid) for pids in self.roles.values() for pid in pids}
        used = {
            role: round(sum(max(0.0, now[p] - self.start.get(p, 0.0)) for p in pids), 2)
            for role, pids in self.roles.items()
        }
        busy = _machine_busy_s() - self.machine_start
        used["everything_else"] = round(busy - sum(used.values()), 2)
        return used


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


Request = Callable[[aiohttp.ClientSession, int], Any]
"""One request of a series: (session, sequence number) → an awaitable of the HTTP status."""


@dataclass
class Series:
    """What a closed-loop series measured."""

    sent: int
    """Requests sent while measuring (answered or failed)."""
    elapsed_s: float
    latencies_ms: list[float]
    statuses: Counter[int]
    errors: Counter[str]
    sent_in_all: int = 0
    """Requests sent, warm-up included: what the processes' CPU seconds were spent on."""

    def summary(self) -> dict[str, Any]:
        ok = len(self.latencies_ms)
        return {
            "requests": self.sent,
            "requests_with_warmup": self.sent_in_all,
            "ok": ok,
            "rps": round(ok / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            "p50_ms": round(percentile(self.latencies_ms, 50), 2),
            "p99_ms": round(percentile(self.latencies_ms, 99), 2),
            "max_ms": round(max(self.latencies_ms, default=float("nan")), 2),
            "elapsed_s": round(self.elapsed_s, 2),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": dict(self.errors),
        }


async def closed_loop(
    request: Callable[[int], Any],
    *,
    count: int,
    concurrency: int,
    max_s: float,
    ok_status: int,
    warmup: int = 0,
    warmup_s: float = 10.0,
) -> Series:
    """`concurrency` loops send requests back to back until `count` were measured or `max_s`
    passed. The first `warmup` requests, or those sent in the first `warmup_s` seconds if
    that ends sooner, are sent but not measured. `request(i)` returns the HTTP status.
    Latency is measured from just before the request to its answer read in full."""
    counter = 0
    measured_from: float | None = None
    first_measured = 0
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    started = time.perf_counter()
    deadline = started + max_s

    def measuring(i: int, now: float) -> bool:
        nonlocal measured_from, first_measured
        if measured_from is None and (i >= warmup or now - started >= warmup_s):
            measured_from, first_measured = now, i
        return measured_from is not None

    async def loop() -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            if measured_from is not None and counter - first_measured >= count:
                return
            i = counter
            counter += 1
            begin = time.perf_counter()
            measured = measuring(i, begin)
            try:
                status = await request(i)
            except (aiohttp.ClientError, TimeoutError) as error:
                errors[type(error).__name__] += 1
                continue
            if not measured:
                continue
            statuses[status] += 1
            if status == ok_status:
                latencies.append((time.perf_counter() - begin) * 1000)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(loop())
    first = measured_from if measured_from is not None else time.perf_counter()
    return Series(
        sent=sum(statuses.values()) + sum(errors.values()),
        elapsed_s=time.perf_counter() - first,
        latencies_ms=latencies,
        statuses=statuses,
        errors=errors,
        sent_in_all=counter,
    )


def code_version() -> str:
    """The commit the processes run (`+dirty`: tracked files differ from it)."""
    root = Path(__file__).resolve().parent.parent
    head = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, check=False
        )
        .stdout.decode()
        .strip()
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=root,
        capture_output=True,
        check=False,
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")
