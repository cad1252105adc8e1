"""One arq worker process for bench/arq_fanout.py (which starts it; not run by hand).

    python -m bench.arq_worker --redis-url redis://127.0.0.1:6379/12 \
        --downstream http://127.0.0.1:PORT --max-jobs 64 --poll-delay 0.02 --headers '{}'

A module of its own so that the worker imports arq, aiohttp and uvloop only (~40 MB), as an arq
application's worker would, and not the engine that bench/fanout.py's driver loads. Each job
POSTs its item to `{downstream}/process` with the worker's one aiohttp session (opened in
`on_startup`, connection limit `max_jobs`, closed in `on_shutdown`) and returns the status.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any

import aiohttp
import uvloop
from arq.connections import RedisSettings
from arq.worker import Worker, create_worker

JOB = "post_item"
READY_KEY = "arq-bench:ready:"
"""Each worker sets `READY_KEY<pid>` in its on_startup: the driver waits for all of them."""


async def post_item(ctx: dict[str, Any], item: int) -> int:
    """One child: POST the item to the downstream with the worker's session; its status."""
    session: aiohttp.ClientSession = ctx["session"]
    async with session.post(ctx["url"], json={"id": item}, headers=ctx["headers"]) as response:
        await response.json()
        return response.status


WORKER_SETTINGS: dict[str, Any] = {
    "functions": [post_item],
    "job_timeout": 30,
    # arq's defaults, spelled out because the driver's join depends on them: results are kept
    # an hour; a job that raises is tried up to 5 times.
    "keep_result": 3600,
    "max_tries": 5,
}
"""arq's worker settings (a dict: arq takes one as well as a class); `make_worker` adds the
rest from the command line."""


def make_worker(args: argparse.Namespace) -> Worker:
    headers: dict[str, str] = json.loads(args.headers)

    async def on_startup(ctx: dict[str, Any]) -> None:
        connector = aiohttp.TCPConnector(limit=args.max_jobs)
        timeout = aiohttp.ClientTimeout(total=30)
        ctx["session"] = aiohttp.ClientSession(connector=connector, timeout=timeout)
        ctx["url"] = f"{args.downstream}/process"
        ctx["headers"] = headers
        await ctx["redis"].set(f"{READY_KEY}{os.getpid()}", b"1", ex=3600)

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        session: aiohttp.ClientSession | None = ctx.get("session")
        if session is not None:
            await session.close()

    return create_worker(
        WORKER_SETTINGS,
        redis_settings=RedisSettings.from_dsn(args.redis_url),
        max_jobs=args.max_jobs,
        poll_delay=args.poll_delay,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--downstream", required=True, help="the downstream's base URL")
    parser.add_argument("--max-jobs", type=int, required=True)
    parser.add_argument("--poll-delay", type=float, required=True)
    parser.add_argument("--headers", default="{}", help="request headers, a JSON object")
    args = parser.parse_args(argv)
    # uvloop, the loop `schemabridge worker` runs on. arq's Worker takes the current event loop
    # when it is built (asyncio.get_event_loop), so it is set first.
    asyncio.set_event_loop(uvloop.new_event_loop())
    # arq logs every job's start and end at INFO; without a logging configuration only
    # warnings and errors reach stderr.
    make_worker(args).run()  # returns after SIGTERM/SIGINT, once on_shutdown has run


if __name__ == "__main__":
    main()
