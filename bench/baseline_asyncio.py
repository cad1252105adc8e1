"""The non-durable baseline for bench/fanout.py: the same N POSTs as a plain asyncio loop.

    python -m bench.baseline_asyncio --requests 10000 --concurrency 100 --latency-ms 20

Starts the demo downstream in its own subprocess on 127.0.0.1 (as bench/fanout.py does) and
sends N POSTs — the same path, body and headers as a fan-out child's GATEWAY call — with C in
flight, once with httpx's default transport (httpcore) and once with plain aiohttp, each on a
fresh client (no warm-up, like a fan-out). Prints one JSON line per client and run: wall time,
requests per second, errors, and this process's CPU seconds. Nothing is stored: no retries, no
record of what was done; this is what the engine's wall time is compared with.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx

from bench.common import median
from bench.fanout import SMALL_ANSWER, downstream_process

Post = Callable[[str, dict[str, Any]], Awaitable[int]]
ClientFactory = Callable[[int], Any]  # concurrency -> async context manager yielding Post


@asynccontextmanager
async def httpx_default(concurrency: int) -> AsyncIterator[Post]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def post(url: str, body: dict[str, Any]) -> int:
            response = await client.post(url, json=body, headers=SMALL_ANSWER)
            response.json()
            return response.status_code

        yield post


@asynccontextmanager
async def aiohttp_plain(concurrency: int) -> AsyncIterator[Post]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def post(url: str, body: dict[str, Any]) -> int:
            async with session.post(url, json=body, headers=SMALL_ANSWER) as response:
                await response.json()
                return response.status

        yield post


CLIENTS: dict[str, ClientFactory] = {
    "httpx (default transport)": httpx_default,
    "aiohttp": aiohttp_plain,
}


async def one_run(post: Post, url: str, total: int, concurrency: int) -> dict[str, Any]:
    counter = itertools.count()
    errors = 0

    async def sender() -> None:
        nonlocal errors
        while (index := next(counter)) < total:  # bounded: the shared counter reaches `total`
            try:
                if await post(url, {"id": index}) != 200:
                    errors += 1
            except (httpx.HTTPError, aiohttp.ClientError, OSError, TimeoutError):
                errors += 1

    cpu, wall = time.process_time(), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(sender())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "wall_s": round(wall, 2),
        "requests_per_s": round(total / wall, 1),
        "errors": errors,
        "client_cpu_s": round(cpu, 2),
    }


async def main(args: argparse.Namespace) -> None:
    names = [n for n in CLIENTS if args.client in ("all", n.split(" ")[0])]
    async with downstream_process(args.latency_ms) as downstream:
        url = f"{downstream.url}/process"
        for name in names:
            runs = []
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                async with CLIENTS[name](args.concurrency) as post:
                    result = await one_run(post, url, args.requests, args.concurrency)
                result |= {"client": name, "requests": args.requests, "loadavg_1m": load}
                print(json.dumps(result), flush=True)
                runs.append(result)
            summary = {
                "client": name,
                "requests": args.requests,
                "concurrency": args.concurrency,
                "latency_ms": args.latency_ms,
                "median_wall_s": median([r["wall_s"] for r in runs]),
                "median_requests_per_s": median([r["requests_per_s"] for r in runs]),
            }
            print("summary", json.dumps(summary), flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--requests", type=int, default=10_000)
    parser.add_argument("-c", "--concurrency", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--client", choices=["all", "httpx", "aiohttp"], default="all")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
