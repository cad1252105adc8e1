"""Shared helpers for the coordination-layer integration tests.

Not fixtures (conftest.py belongs to everyone): each test module wraps `open_client` in its own
parametrized fixture, so every test runs on the embedded fakeredis and on a real Redis.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import redis.asyncio as redis

from engine import coordination
from engine.settings import Settings

BACKENDS = ["embedded", "server"]

UNREACHABLE_REDIS_URL = "redis://127.0.0.1:1/0"
"""Nothing listens on port 1: connecting is refused at once, like a Redis that is down."""


def unique(prefix: str) -> str:
    """A name no other test (or parallel test run on the same Redis) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def open_client(redis_url: str | None) -> AsyncIterator[redis.Redis]:
    """A client from `coordination.open_redis`, closed afterwards."""
    client = await coordination.open_redis(Settings(redis_url=redis_url))
    try:
        yield client
    finally:
        await coordination.close_redis(client)


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout_s: float = 5.0,
    what: str = "condition",
) -> None:
    """Re-check `condition` every few milliseconds until true; fail after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
