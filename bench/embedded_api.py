"""The REST API of the embedded default: `schemabridge serve --demo` on a SQLite file.

    python -m bench.embedded_api [--count 1000] [--concurrency 1,8] [--repeat 1]

Starts `serve --demo` (the API, a worker and the demo downstream in one process, SQLite and the
embedded Redis) on a fresh file, then, at each concurrency: `--count` submissions of the
`support-ticket` example (two GATEWAY calls each, run by the same process meanwhile), then as
many reads of one of those runs (`GET /runs/{id}`) and of the newest 50 runs (`GET
/runs?limit=50`). Prints one JSON line per series: requests/s, p50/p99 ms, and the serve
process's CPU per request (its runs' work included for submissions). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.common import median, percentile, start_serve

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WORKFLOW = "support-ticket"
SERIES_TIMEOUT_S = 300.0
"""Bound on one series' time."""


async def _series(
    process: psutil.Process,
    count: int,
    concurrency: int,
    request: Callable[[int], Awaitable[httpx.Response]],
) -> dict[str, Any]:
    """`count` calls of `request` with `concurrency` in flight: rate, latencies, CPU."""
    latencies: list[float] = []
    failures = 0
    next_index = 0

    async def client_loop() -> None:
        nonlocal next_index, failures
        while next_index < count:
            index, next_index = next_index, next_index + 1
            started = time.perf_counter()
            response = await request(index)
            latencies.append((time.perf_counter() - started) * 1000)
            failures += response.status_code >= 400

    cpu = process.cpu_times()
    started = time.perf_counter()
    async with asyncio.timeout(SERIES_TIMEOUT_S):
        await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    used = process.cpu_times()
    cpu_s = (used.user + used.system) - (cpu.user + cpu.system)
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "failures": failures,
        "per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(median(latencies), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "serve_cpu_ms_per_request": round(cpu_s * 1000 / max(1, len(latencies)), 3),
    }


async def _runs_ended(client: httpx.AsyncClient) -> None:
    """Wait until no run is RUNNING (at most `SERIES_TIMEOUT_S`)."""
    async with asyncio.timeout(SERIES_TIMEOUT_S):
        while True:
            response = await client.get("/runs", params={"status": "RUNNING", "limit": 1})
            response.raise_for_status()
            if not response.json()["items"]:
                return
            await asyncio.sleep(0.2)


async def _measure(
    api: str, pid: int, count: int, concurrencies: list[int], series: list[str]
) -> None:
    process = psutil.Process(pid)
    body = {"input": json.loads((EXAMPLES / f"{WORKFLOW}.input.json").read_text())}
    run_ids: list[str] = []
    limits = httpx.Limits(max_connections=max(concurrencies))
    async with httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as client:

        async def submit(_: int) -> httpx.Response:
            response = await client.post(f"/workflows/{WORKFLOW}/runs", json=body)
            if response.status_code == 201:
                run_ids.append(response.json()["id"])
            return response

        async def read_run(index: int) -> httpx.Response:
            return await client.get(f"/runs/{run_ids[index % len(run_ids)]}")

        async def list_runs(_: int) -> httpx.Response:
            return await client.get("/runs", params={"limit": 50})

        requests = {"submit": submit, "run": read_run, "list": list_runs}
        await _series(process, 50, 1, submit)  # warm-up: caches, prepared statements
        for concurrency in concurrencies:
            for name in series:
                if name != "submit":
                    # Reads are measured alone, not beside the submitted runs' calls.
                    await _runs_ended(client)
                    random.shuffle(run_ids)
                result = await _series(process, count, concurrency, requests[name])
                line = {"series": name, **result, "load": round(os.getloadavg()[0], 2)}
                print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="requests per series")
    parser.add_argument("--concurrency", default="1,8", help="in flight, comma-separated")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--series", default="submit,run,list", help="which of submit,run,list (reads need submit)"
    )
    args = parser.parse_args(argv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="sb-embedded-api-") as tmp:
            workdir = Path(tmp)
            process, api = start_serve(f"sqlite+aiosqlite:///{workdir / 'sb.db'}", workdir)
            try:
                series = args.series.split(",")
                asyncio.run(_measure(api, process.pid, args.count, concurrencies, series))
            finally:
                process.terminate()
                process.wait(timeout=60)


if __name__ == "__main__":
    main()
