"""Progress streams (`GET /runs/{id}/events`): the database load of idle streams, and how late
a fan-out's progress reaches a stream.

    python -m bench.api_events --streams 50 --window-s 20 --children 300 --baseline 261e92d

A fresh PostgreSQL database (migrated, an admin key), Redis `SB_BENCH_REDIS_URL` (default db
11), the demo downstream, two `schemabridge worker` processes, and one api process per code
measured: this checkout's, and with `--baseline REF` the code of commit REF (both run as
bench/api_phases.py `--serve`, which counts the SQL statements the process sends).

1. Idle streams. A run whose one GATEWAY call takes 10 minutes (claimed, RUNNING, nothing
   changes). `--streams` streams are opened on it through one api process; after 2 s, the SQL
   statements that process sends during `--window-s` are counted: statements per second.
   Each code in turn.
2. Latency on a fan-out. A run spawning `--children` children (one call of
   `--child-sleep-ms` each) is submitted, and one stream per api process reads it to its
   `end`. Each `progress` event says how many children have ended (k); its latency is its
   arrival time minus the time the k-th child ended (`ended_at` from the children list, read
   through the operations layer once the run is over). The `end` event's latency is its
   arrival minus the run's `ended_at`. Same machine, same clock. A run's `ended_at` is stamped
   when the worker's flush that ends it starts, so both include that flush's transaction:
   with many short children (large flushes) it dominates; slower children give small flushes.

Prints one JSON line per measurement and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from bench import api_stack
from bench.api_phases import HERE, _snapshot
from bench.api_submit import publish
from bench.common import OUT, percentile

IDLE_SLEEP_MS = 540_000


def workflows(downstream: str, child_sleep_ms: int) -> list[dict[str, Any]]:
    def call(path: str, sleep_ms: int) -> dict[str, Any]:
        return {
            "type": "GATEWAY",
            "config": {
                "url": f"{downstream}{path}",
                "method": "POST",
                "headers": {"X-Demo-Sleep-Ms": str(sleep_ms)},
                "timeoutMs": IDLE_SLEEP_MS + 60_000,
                "body": {"item": "{{ item }}"} if path == "/child" else {},
            },
        }

    return [
        {"name": "idle", "vertices": {"call": call("/idle", IDLE_SLEEP_MS)}},
        {"name": "child", "vertices": {"call": call("/child", child_sleep_ms)}},
        {
            "name": "fanout",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "child"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"], "config": {}},
            },
        },
    ]


async def _hold(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> int:
    """Keep a stream open until `stop`; the bytes it sent."""
    received = 0
    async with session.get(url) as answer:
        if answer.status != 200:
            raise RuntimeError(f"{url}: {answer.status}")
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(answer.content.readany(), 0.5)
            except TimeoutError:
                continue
            if not chunk:
                break
            received += len(chunk)
    return received


async def idle_streams(
    session: aiohttp.ClientSession, name: str, service: Any, run_id: str, args: argparse.Namespace
) -> dict[str, Any]:
    out = OUT / f"events-{name}.json"
    stop = asyncio.Event()
    url = f"{service.url}/runs/{run_id}/events"
    streams = [asyncio.create_task(_hold(session, url, stop)) for _ in range(args.streams)]
    await asyncio.sleep(2.0)
    cpu_before, before = _snapshot(service.pid, out)
    began = time.perf_counter()
    await asyncio.sleep(args.window_s)
    cpu_after, after = _snapshot(service.pid, out)
    elapsed = time.perf_counter() - began
    stop.set()
    await asyncio.gather(*streams)
    statements = after["statements"] - before["statements"]
    return {
        "measure": "idle_streams",
        "target": name,
        "streams": args.streams,
        "window_s": round(elapsed, 2),
        "statements": statements,
        "statements_per_s": round(statements / elapsed, 2),
        "api_cpu_ms_per_s": round((cpu_after - cpu_before) * 1000 / elapsed, 2),
        "load": api_stack.load_average(),
    }


async def read_events(session: aiohttp.ClientSession, url: str) -> list[tuple[float, str, Any]]:
    """(arrival time, event name, data) of every event of the stream, until it closes."""
    events: list[tuple[float, str, Any]] = []
    name = ""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=600)) as answer:
        async for raw in answer.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((time.time(), name, json.loads(line.removeprefix("data: "))))
    return events


async def ended_times(env: dict[str, str], run_id: str) -> tuple[list[float], float]:
    """The children's `ended_at`, sorted, and the run's own, through the operations layer."""
    from engine.operations import Operations
    from engine.runtime import Runtime
    from engine.settings import Settings

    os.environ.update({k: env[k] for k in ("SCHEMABRIDGE_DATABASE_URL", "SCHEMABRIDGE_REDIS_URL")})
    runtime = await Runtime.open(Settings(), migrate=False)
    try:
        ops = Operations(runtime)
        ends: list[float] = []
        cursor = None
        for _ in range(10_000):
            page = await ops.runs.children(run_id, limit=500, cursor=cursor)
            ends += [child.ended_at for child in page.items if child.ended_at is not None]
            cursor = page.next
            if cursor is None:
                break
        run = await ops.runs.get(run_id)
        if run.ended_at is None:
            raise RuntimeError(f"run {run_id} has not ended")
        return sorted(ends), run.ended_at
    finally:
        await runtime.close()


def latencies(
    events: list[tuple[float, str, Any]], ends: list[float], run_end: float
) -> dict[str, Any]:
    progress_ms = []
    for arrived, name, data in events[1:]:
        done = data["fanout"]["succeeded"] + data["fanout"]["failed"] + data["fanout"]["cancelled"]
        if name == "progress" and 0 < done <= len(ends):
            progress_ms.append((arrived - ends[done - 1]) * 1000)
    end_ms = [(arrived - run_end) * 1000 for arrived, name, _ in events if name == "end"]
    return {
        "progress_events": len(progress_ms),
        "progress_p50_ms": round(percentile(progress_ms, 50), 1),
        "progress_p99_ms": round(percentile(progress_ms, 99), 1),
        "progress_max_ms": round(max(progress_ms, default=float("nan")), 1),
        "end_ms": round(end_ms[0], 1) if end_ms else None,
    }


async def measure(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": api_stack.load_average()}), flush=True)
    async with api_stack.fresh_database("sb_apievents") as db:
        env = api_stack.service_env(db)
        key = api_stack.migrate_and_key(env)
        specs: list[api_stack.ServiceSpec] = [
            ("downstream", api_stack.downstream_command(1.0), env, True),
            ("current", [sys.executable, "-P", HERE, "--serve", "--out",
                         str(OUT / "events-current.json")], env, True),
        ]  # fmt: skip
        if args.baseline:
            old = api_stack.tree_env(env, api_stack.exported_tree(args.baseline))
            command = [sys.executable, "-P", HERE, "--serve", "--out",
                       str(OUT / "events-baseline.json")]  # fmt: skip
            specs.append(("baseline", command, old, True))
        specs += [(f"worker-{i}", api_stack.worker_command(f"w{i}"), env, False) for i in range(2)]
        async with api_stack.services(specs) as procs:
            await publish(env, workflows(str(procs[0].url), args.child_sleep_ms))
            apis = {p.name: p for p in procs if p.url and p.name != "downstream"}
            headers = {"Authorization": f"Bearer {key}"}
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
                base = str(apis["current"].url)
                async with session.post(f"{base}/workflows/idle/runs", json={}) as answer:
                    idle_id = (await answer.json())["id"]
                rows = []
                for name, service in apis.items():
                    rows.append(await idle_streams(session, name, service, idle_id, args))
                    print(json.dumps(rows[-1]), flush=True)
                items = list(range(args.children))
                async with session.post(
                    f"{base}/workflows/fanout/runs", json={"input": {"items": items}}
                ) as answer:
                    fan_id = (await answer.json())["id"]
                streams = {
                    name: asyncio.create_task(
                        read_events(session, f"{service.url}/runs/{fan_id}/events")
                    )
                    for name, service in apis.items()
                }
                results = {name: await task for name, task in streams.items()}
            ends, run_end = await ended_times(env, fan_id)
            for name, events in results.items():
                row = {"measure": "fanout_latency", "target": name, "children": len(ends)}
                row.update(latencies(events, ends, run_end))
                row["load"] = api_stack.load_average()
                rows.append(row)
                print(json.dumps(row), flush=True)
            print(json.dumps({"summary": True, "rows": rows, "commit": api_stack.code_version()}))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--children", type=int, default=300)
    parser.add_argument(
        "--child-sleep-ms", type=int, default=20, help="how long each child's call takes"
    )
    parser.add_argument("--baseline", metavar="REF", help="also measure the code of commit REF")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(measure(parse_args(argv)))


if __name__ == "__main__":
    main()
