"""Shared benchmark plumbing: fresh databases, worker processes, RSS sampling, percentiles."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import redis
import uvloop

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = os.environ.get("SB_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
"""The Redis database of PostgreSQL benchmarks (`make_backend` flushes it at every start):
db 14 unless SB_BENCH_REDIS_URL names another."""
PG_SOCKET_DIR = os.environ.get("SB_BENCH_PG_SOCKET_DIR")
"""With a directory (`/var/run/postgresql`), SchemaBridge's processes reach PostgreSQL through
its Unix socket there instead of TCP on 127.0.0.1: what a deployment with the database on the
same machine can choose (a statement's client CPU is about a fifth lower on this VM)."""
SCHEMABRIDGE = str(Path(sys.executable).with_name("schemabridge"))
OUT = Path(__file__).with_name("out")


@dataclass
class Backend:
    name: str
    database_url: str
    redis_url: str | None
    _pg_name: str | None = None

    async def drop(self) -> None:
        if self._pg_name is not None:
            conn = await asyncpg.connect(PG_ADMIN)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{self._pg_name}" WITH (FORCE)')
            finally:
                await conn.close()


async def make_backend(kind: str) -> Backend:
    """A fresh database: `sqlite` (file in bench/out, embedded Redis) or `postgres` + Redis."""
    OUT.mkdir(exist_ok=True)
    if kind == "sqlite":
        path = OUT / f"bench-{uuid.uuid4().hex[:8]}.db"
        return Backend("sqlite", f"sqlite+aiosqlite:///{path}", None)
    name = f"sb_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    redis.Redis.from_url(REDIS_URL).flushdb()
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    if PG_SOCKET_DIR:
        url = f"postgresql+asyncpg://postgres@/{name}?host={PG_SOCKET_DIR}"
    return Backend("postgres", url, REDIS_URL, name)


def worker_env(backend: Backend, **settings: str) -> dict[str, str]:
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = backend.database_url
    if backend.redis_url:
        env["SCHEMABRIDGE_REDIS_URL"] = backend.redis_url
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(OUT / "health")
    # Benchmarks raise the tenant's rate limit so that only the mechanism under test binds.
    env["SCHEMABRIDGE_TENANT_RATE_PER_MINUTE"] = "100000000"
    for key, value in settings.items():
        env[f"SCHEMABRIDGE_{key.upper()}"] = value
    return env


def start_workers(env: dict[str, str], count: int, tag: str) -> list[subprocess.Popen[bytes]]:
    OUT.mkdir(exist_ok=True)
    procs = []
    profile = os.environ.get("SB_BENCH_PYSPY")  # e.g. SB_BENCH_PYSPY=1: flame graph per worker
    for i in range(count):
        command = [SCHEMABRIDGE, "worker", "--name", f"{tag}-w{i}", "--log-level", "warning"]
        if profile:
            spy = str(Path(sys.executable).with_name("py-spy"))
            svg = str(OUT / f"{tag}-w{i}.svg")
            command = [spy, "record", "--nonblocking", "-o", svg, "--", *command]
        with (OUT / f"{tag}-w{i}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def stop_workers(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


SERVE_READY_TIMEOUT_S = 120.0


def start_serve(database_url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`schemabridge serve --demo` on `database_url` and a free loopback port, its output in
    `workdir`: (the process, its base URL) once it listens. Terminate the process when done."""
    env = {**os.environ, "SCHEMABRIDGE_DATABASE_URL": database_url}
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(workdir / "health")
    out = workdir / "serve.out"
    with out.open("wb") as stdout, (workdir / "serve.log").open("wb") as stderr:
        process = subprocess.Popen(
            [SCHEMABRIDGE, "serve", "--demo", "--port", "0", "--no-access-log"],
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    deadline = time.monotonic() + SERVE_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in out.read_text().splitlines():
            if " listening on " in line:
                return process, line.rsplit(" ", 1)[1]
        if process.poll() is not None:
            raise SystemExit(f"serve exited {process.returncode}: see {workdir}/serve.log")
        time.sleep(0.1)
    process.terminate()
    raise SystemExit(f"serve did not start within {SERVE_READY_TIMEOUT_S:.0f} s")


@dataclass
class RssSampler:
    """Samples the resident memory of processes every `period_s`; keeps the peak of each."""

    pids: list[int]
    period_s: float = 0.2
    peaks: dict[int, int] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        procs = [psutil.Process(pid) for pid in self.pids]
        while not stop.is_set():
            for proc in procs:
                try:
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), rss)
            try:
                async with asyncio.timeout(self.period_s):
                    await stop.wait()
            except TimeoutError:
                pass

    def peaks_mb(self) -> list[float]:
        return [round(self.peaks.get(pid, 0) / 2**20, 1) for pid in self.pids]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start


def run_like_the_services(main: Coroutine[Any, Any, None]) -> None:
    """Run a benchmark's `main` on uvloop, the event loop `schemabridge serve` and `worker` run
    on: the embedded runs (`--workers 0`) execute the engine in this process, and measuring
    them on asyncio's own loop would measure a configuration no user runs."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
