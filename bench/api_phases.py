"""Where the CPU of one submission goes, phase by phase, in a real `schemabridge api` process.

    python -m bench.api_phases --count 2000                  # this checkout
    python -m bench.api_phases --count 2000 --baseline 261e92d   # and commit 261e92d, interleaved

A fresh PostgreSQL database (migrated, an admin key), Redis `SB_BENCH_REDIS_URL` (default db
11), the one-GATEWAY workflow of bench/api_submit.py, no worker. The api process is this file
run with `--serve`: it wraps the functions named in `PHASES` with a CPU timer
(`time.thread_time` at entry and exit, nested phases subtracted from their parent), then runs
`schemabridge api`. The driver sends `--count` submissions (after `--warmup`), one at a time
by default (`--concurrency`), so the process does nothing else while a phase runs and its
CPU time is that phase's (background tasks, heartbeats and wake-ups, are a few ms a second).

CPU per submission: the api process's CPU time (psutil) over the measured requests, divided by
their number. Each phase's share is its exclusive CPU per request; what no phase covers (the
HTTP server, Starlette routing, the middleware stack, the event loop) is `unattributed`. A
phase absent from the code measured (renamed or removed) is reported as such.

The bare endpoint (bench/bare_insert.py) is measured the same way, CPU only, as the floor.
With `--baseline REF` another api process runs the code of commit REF (bench/api_stack.py
`exported_tree`). The processes are measured in alternating rounds of `--count / --rounds`
requests each. Prints one JSON line per process and round, and a table of medians.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = str(Path(__file__).resolve())
"""This file: the instrumented api process runs it by path (`--serve`)."""

PHASES: tuple[tuple[str, str, str], ...] = (
    # (phase, module, attribute path): the first phases are nested in the later, broader ones.
    ("auth key lookup", "engine.operations.keys", "KeyOperations.authenticate"),
    ("body parsing/validation", "fastapi.dependencies.utils", "request_body_to_args"),
    ("dependencies (rest)", "fastapi.routing", "solve_dependencies"),
    ("workflow version lookup", "engine.operations.runs", "RunOperations._version"),
    ("input-schema validation", "engine.operations.runs", "validate_input"),
    ("request hash", "engine.operations.submission", "request_hash"),
    ("idempotency key lookup", "engine.store.catalogue", "RunCatalogue.run_by_key"),
    ("ready gauge", "engine.operations.submission", "ReadyGauge.check"),
    ("version pins", "engine.store.catalogue", "RunCatalogue._resolve_pins"),
    ("quota", "engine.store.catalogue", "_take_quota"),
    ("commit", "sqlalchemy.ext.asyncio.engine", "AsyncTransaction.__aexit__"),
    ("run+steps insert", "engine.store.catalogue", "RunCatalogue.create_run"),
    ("wake-up", "engine.coordination.wakeup", "Wakeup.notify"),
    ("run summary view", "engine.operations.run_views", "summary"),
    ("route and operation (rest)", "fastapi.routing", "run_endpoint_function"),
    (
        "BEGIN",
        "sqlalchemy.dialects.postgresql.asyncpg",
        "AsyncAdapt_asyncpg_connection._start_transaction",
    ),
    ("connection close (ROLLBACK)", "sqlalchemy.ext.asyncio.engine", "AsyncConnection.close"),
    ("response model", "fastapi.routing", "serialize_response"),
    ("access log + metrics", "api.rest.middleware", "RequestObserver._record"),
)


# ── the instrumented api process (--serve) ─────────────────────────────────────────────────


class PhaseClock:
    """Exclusive CPU seconds and calls per phase. One request at a time: a plain stack."""

    def __init__(self) -> None:
        self.exclusive: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list[Any]] = []  # [phase, start, children's CPU]

    def enter(self, phase: str) -> None:
        self._stack.append([phase, time.thread_time(), 0.0])

    def leave(self) -> None:
        phase, start, children = self._stack.pop()
        spent = time.thread_time() - start
        self.exclusive[phase] = self.exclusive.get(phase, 0.0) + spent - children
        self.calls[phase] = self.calls.get(phase, 0) + 1
        if self._stack:
            self._stack[-1][2] += spent


def _timed(clock: PhaseClock, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            clock.enter(phase)
            try:
                return await function(*args, **kwargs)
            finally:
                clock.leave()

        return timed_async

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        clock.enter(phase)
        try:
            return function(*args, **kwargs)
        finally:
            clock.leave()

    return timed


def instrument(clock: PhaseClock) -> list[str]:
    """Wrap every phase that exists in the code loaded; the names of those that do not."""
    absent = []
    for phase, module_name, path in PHASES:
        try:
            owner: Any = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            absent.append(phase)
            continue
        if isinstance(inspect.getattr_static(owner, name), staticmethod):
            setattr(owner, name, staticmethod(_timed(clock, phase, original)))
        else:
            setattr(owner, name, _timed(clock, phase, original))
    return absent


def count_statements() -> list[int]:
    """A counter (its one item) of the SQL statements every SQLAlchemy engine of this process
    sends from now on (transaction control excluded: BEGIN, COMMIT, ROLLBACK)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    counter = [0]

    def count(*_args: Any) -> None:
        counter[0] += 1

    event.listen(Engine, "before_cursor_execute", count)
    return counter


def serve(out: Path) -> None:
    clock = PhaseClock()
    absent = instrument(clock)

    def collecting(phase: str, _info: dict[str, int]) -> None:
        # A collection runs inside whatever allocated last: it is a phase of its own.
        if phase == "start":
            clock.enter("garbage collection")
        else:
            clock.leave()

    gc.callbacks.append(collecting)
    statements = count_statements()

    def dump(_signum: int, _frame: Any) -> None:
        snapshot = {
            "exclusive": clock.exclusive,
            "calls": clock.calls,
            "absent": absent,
            "threads": [t.name for t in threading.enumerate()],
            "main_thread_cpu_s": time.thread_time(),
            "statements": statements[0],
        }
        out.write_text(json.dumps(snapshot))

    signal.signal(signal.SIGUSR1, dump)
    from api.cli import main as cli

    sys.argv = ["schemabridge", "api", "--port", "0", "--log-level", "warning", "--no-access-log"]
    cli()


# ── the driver ──────────────────────────────────────────────────────────────────────────────


def _snapshot(pid: int, out: Path) -> tuple[float, dict[str, Any]]:
    """(CPU seconds of `pid`, its phase totals): it writes them to `out` on SIGUSR1."""
    import psutil

    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    for _ in range(500):
        if out.exists() and out.stat().st_size:
            break
        time.sleep(0.01)
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system, json.loads(out.read_text())


def _cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


class Driver:
    """Submissions (or bare inserts), `concurrency` at a time, over one aiohttp session."""

    def __init__(self, session: Any, concurrency: int) -> None:
        self.session = session
        self.concurrency = concurrency
        self.sent = 0

    async def send(self, url: str, path: str, count: int) -> None:
        import asyncio

        async def one(i: int) -> None:
            body = {"input": {"n": i}, "tenantId": f"tenant-{i % 8}"}
            async with self.session.post(f"{url}{path}", json=body) as answer:
                await answer.read()
                if answer.status != 201:
                    raise RuntimeError(f"{path}: {answer.status} {await answer.text()}")

        for start in range(0, count, self.concurrency):
            batch = range(self.sent + start, self.sent + min(count, start + self.concurrency))
            await asyncio.gather(*(one(i) for i in batch))
        self.sent += count


def _phases_row(
    before: tuple[float, dict[str, Any]], after: tuple[float, dict[str, Any]], count: int
) -> dict[str, Any]:
    (cpu_before, old), (cpu_after, new) = before, after
    phases = {
        phase: round((spent - old["exclusive"].get(phase, 0.0)) * 1000 / count, 3)
        for phase, spent in new["exclusive"].items()
    }
    total = (cpu_after - cpu_before) * 1000 / count
    phases["unattributed"] = round(total - sum(phases.values()), 3)
    return {
        "cpu_ms_per_request": round(total, 3),
        "phases_ms": phases,
        "absent": new["absent"],
        "threads": new["threads"],
    }


async def _round(
    driver: Driver, target: str, service: Any, out: Path | None, count: int
) -> dict[str, Any]:
    """One measured round against one process: CPU per request, by phase when instrumented."""
    url = str(service.url)
    if out is None:  # the bare endpoint: CPU only
        before_s = _cpu_s(service.pid)
        await driver.send(url, "/rows", count)
        return {"cpu_ms_per_request": round((_cpu_s(service.pid) - before_s) * 1000 / count, 3)}
    before = _snapshot(service.pid, out)
    await driver.send(url, "/workflows/bench-submit/runs", count)
    return _phases_row(before, _snapshot(service.pid, out), count)


def _table(rows: dict[str, list[dict[str, Any]]]) -> None:
    from bench.common import median

    names = [p for p, _, _ in PHASES] + ["garbage collection", "unattributed"]
    print(f"\n{'phase (ms per request, median)':34}" + "".join(f"{n:>12}" for n in rows))
    for phase in [*names, "total"]:
        cells = []
        for measured in rows.values():
            if phase == "total":
                values = [r["cpu_ms_per_request"] for r in measured]
            else:
                values = [r.get("phases_ms", {}).get(phase, 0.0) for r in measured]
            cells.append(f"{median(values):12.3f}")
        print(f"{phase:34}" + "".join(cells))


async def measure(args: argparse.Namespace) -> None:
    import aiohttp

    from bench import api_stack
    from bench.api_submit import publish, workflow
    from bench.common import OUT

    print(json.dumps({"args": vars(args), "load": api_stack.load_average()}), flush=True)
    here = HERE
    async with api_stack.fresh_database("sb_apiphase") as db:
        env = api_stack.service_env(db)
        key = api_stack.migrate_and_key(env)
        outs: dict[str, Path | None] = {"current": OUT / "phases-current.json"}
        specs: list[api_stack.ServiceSpec] = [
            ("downstream", api_stack.downstream_command(1.0), env, True),
            ("current", [sys.executable, "-P", here, "--serve", "--out", str(outs["current"])],
             env, True),
        ]  # fmt: skip
        if args.baseline:
            outs["baseline"] = OUT / "phases-baseline.json"
            old = api_stack.tree_env(env, api_stack.exported_tree(args.baseline))
            command = [sys.executable, "-P", here, "--serve", "--out", str(outs["baseline"])]
            specs.append(("baseline", command, old, True))
        outs["bare"] = None
        specs.append(("bare", [sys.executable, "-m", "bench.bare_insert", "--dsn", db.dsn],
                      env, True))  # fmt: skip
        async with api_stack.services(specs) as procs:
            await publish(env, workflow(str(procs[0].url)))
            targets = {p.name: p for p in procs[1:]}
            rows: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
            headers = {"Authorization": f"Bearer {key}"}
            async with aiohttp.ClientSession(headers=headers) as session:
                driver = Driver(session, args.concurrency)
                for name, service in targets.items():
                    path = "/rows" if outs[name] is None else "/workflows/bench-submit/runs"
                    await driver.send(str(service.url), path, args.warmup)
                per_round = max(1, args.count // args.rounds)
                for round_ in range(args.rounds):
                    for name, service in targets.items():
                        row = await _round(driver, name, service, outs[name], per_round)
                        row = {"target": name, "round": round_, "requests": per_round, **row}
                        row["load"] = api_stack.load_average()
                        rows[name].append(row)
                        print(json.dumps(row), flush=True)
    _table(rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=2000, help="measured submissions")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--baseline", metavar="REF", help="also measure the code of commit REF")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve:
        serve(args.out)
        return
    import asyncio

    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
