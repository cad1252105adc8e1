"""Benchmark the HTTP clients a worker could use against the demo downstream.

    .venv/bin/python bench/http_transport.py [-n 5000] [-c 100] [--runs 3] [--latency-ms 1]

Starts `python -m demo.downstream` in a subprocess (so its CPU is not ours), then for each
client sends N GET requests with C in flight, reading every body, and prints requests/s and
client CPU per request (process time of this process: the event loop and the client code),
as the median of `--runs` runs after one warm-up run. Clients:

* `httpx (default transport)` — httpx.AsyncClient on httpcore (encode/httpx#3215);
* `httpx + aiohttp transport` — httpx.AsyncClient on the `httpx-aiohttp` transport (what
  workers used before the GATEWAY moved onto aiohttp);
* `aiohttp (plain)` — aiohttp.ClientSession, the ceiling;
* `vertices.http_client` — `build_http_client()`, what workers use (aiohttp, no cookies, no
  hidden resend);
* `gateway.execute (ours)` — the whole GATEWAY vertex (rendering, attempt, body parse, log
  call) on our client, to show what the vertex adds on top of its client.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from schemas.definitions import GatewayConfig
from vertices import gateway
from vertices.contract import StepContext
from vertices.http_client import build_http_client, close_http_client

Fetch = Callable[[str], Awaitable[int]]
ClientFactory = Callable[[int], Any]  # concurrency -> async context manager yielding Fetch


@asynccontextmanager
async def httpx_default(concurrency: int) -> AsyncIterator[Fetch]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def fetch(url: str) -> int:
            response = await client.get(url)
            return response.status_code

        yield fetch


@asynccontextmanager
async def httpx_aiohttp(concurrency: int) -> AsyncIterator[Fetch]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    transport = AiohttpTransport(limits=limits)
    async with httpx.AsyncClient(transport=transport, limits=limits) as client:

        async def fetch(url: str) -> int:
            response = await client.get(url)
            return response.status_code

        yield fetch


@asynccontextmanager
async def ours(concurrency: int) -> AsyncIterator[Fetch]:
    client = build_http_client(max_connections=concurrency)
    try:

        async def fetch(url: str) -> int:
            async with client.request("GET", url, timeout_s=30) as response:
                await response.read()
                return response.status

        yield fetch
    finally:
        await close_http_client(client)


@asynccontextmanager
async def aiohttp_plain(concurrency: int) -> AsyncIterator[Fetch]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def fetch(url: str) -> int:
            async with session.get(url) as response:
                await response.read()
                return response.status

        yield fetch


@asynccontextmanager
async def gateway_vertex(concurrency: int) -> AsyncIterator[Fetch]:
    client = build_http_client(max_connections=concurrency)
    timeouts = gateway.GatewayTimeouts()
    ctx = StepContext(
        run_id="bench", vertex_id="call", tenant_id="t", attempt=1, context={"input": {}}
    )
    try:
        configs: dict[str, GatewayConfig] = {}  # the engine parses a vertex's config once

        async def fetch(url: str) -> int:
            config = configs.get(url) or configs.setdefault(url, GatewayConfig(url=url))
            result = await gateway.execute(config, ctx, client, timeouts)
            return int(result.output["status"])

        yield fetch
    finally:
        await close_http_client(client)


CLIENTS: dict[str, ClientFactory] = {
    "httpx (default transport)": httpx_default,
    "httpx + aiohttp transport": httpx_aiohttp,
    "aiohttp (plain)": aiohttp_plain,
    "vertices.http_client": ours,
    "gateway.execute (ours)": gateway_vertex,
}


@dataclass(frozen=True)
class Run:
    requests_per_s: float
    cpu_us_per_request: float
    errors: int


async def one_run(fetch: Fetch, url: str, total: int, concurrency: int) -> Run:
    counter = itertools.count()
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while next(counter) < total:  # bounded: the shared counter reaches `total`
            try:
                if await fetch(url) != 200:
                    errors += 1
            except (httpx.HTTPError, aiohttp.ClientError, OSError):
                errors += 1

    cpu, wall = time.process_time(), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Run(total / wall, cpu / total * 1e6, errors)


async def bench_client(factory: ClientFactory, url: str, args: argparse.Namespace) -> list[Run]:
    async with factory(args.concurrency) as fetch:
        await one_run(fetch, url, min(args.requests, 1000), args.concurrency)  # warm-up
        return [
            await one_run(fetch, url, args.requests, args.concurrency) for _ in range(args.runs)
        ]


@asynccontextmanager
async def downstream(latency_ms: float) -> AsyncIterator[str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "demo.downstream", "--port", "0", "--latency-ms", str(latency_ms),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        if process.stdout is None:
            raise RuntimeError("no stdout from the demo downstream")
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        yield line.decode().strip().rsplit(" ", 1)[-1] + "/bench"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), timeout=10)


def describe_machine() -> str:
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("httpx", "httpx-aiohttp", "aiohttp")
    )
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {versions}"
    )


async def main(args: argparse.Namespace) -> None:
    print(describe_machine())
    print(
        f"demo downstream in a subprocess, latency {args.latency_ms:g} ms; "
        f"N={args.requests} requests, C={args.concurrency} concurrent; "
        f"median of {args.runs} runs after a warm-up"
    )
    print(f"{'client':<28}{'req/s':>9}{'CPU µs/req':>12}  runs (req/s)              errors")
    async with downstream(args.latency_ms) as url:
        for name, factory in CLIENTS.items():
            runs = await bench_client(factory, url, args)
            rps = statistics.median(r.requests_per_s for r in runs)
            cpu = statistics.median(r.cpu_us_per_request for r in runs)
            each = ", ".join(f"{r.requests_per_s:.0f}" for r in runs)
            errors = sum(r.errors for r in runs)
            print(f"{name:<28}{rps:>9.0f}{cpu:>12.0f}  {each:<26}{errors}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--requests", type=int, default=5000)
    parser.add_argument("-c", "--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
