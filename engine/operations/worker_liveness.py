"""Whether a worker is alive, by the heartbeats `GET /services` reads: what a deployment's
start warns of and a run's READY steps say (`WaitReason.NO_WORKER`) when none is.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from engine.coordination.heartbeat import is_worker_service, read_services
from engine.coordination.redis_client import COORDINATION_ERRORS

if TYPE_CHECKING:
    from engine.runtime import Runtime

KEPT_S = 2.0
"""How long `WorkersAlive` answers from its last read: heartbeats go stale after 30 s
(`HEARTBEAT_TTL_S`), so an answer this old says nothing less."""


async def workers_alive(runtime: Runtime) -> bool | None:
    """Whether a worker is alive by its heartbeat, the rule of `GET /services` (up while its
    latest beat is at most `HEARTBEAT_TTL_S` old; an `api-…` service runs no worker). None
    when it cannot be told: Redis does not answer, or no service ever beat here (a process
    that runs no service, or the embedded Redis, which another process's heartbeats never
    reach). Two Redis reads: the services, then their heartbeats."""
    try:
        statuses = await read_services(
            runtime.redis, runtime.clock, ttl_s=float(runtime.settings.heartbeat_ttl_s)
        )
    except COORDINATION_ERRORS:
        return None
    if not statuses:
        return None
    return any(status.up and is_worker_service(status.name) for status in statuses)


class WorkersAlive:
    """`workers_alive` for reads made many times a second (a run's detail and progress while
    a step is READY: a just-submitted run polled, a progress stream): one process's answer is
    at most `KEPT_S` old, and concurrent askers share one read."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._answer: tuple[float, bool | None] | None = None
        self._reading: asyncio.Task[bool | None] | None = None

    async def __call__(self) -> bool | None:
        now = self._runtime.clock.monotonic()
        if self._answer is not None and now - self._answer[0] < KEPT_S:
            return self._answer[1]
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        # Shielded: a caller cancelled (a client gone) must not cancel the others' read.
        return await asyncio.shield(self._reading)

    async def _read(self) -> bool | None:
        try:
            alive = await workers_alive(self._runtime)
            self._answer = (self._runtime.clock.monotonic(), alive)
            return alive
        finally:
            self._reading = None
