"""Whether a worker is alive, by the heartbeats `GET /services` reads: what a deployment's
start warns of and a run's READY steps say (`WaitReason.NO_WORKER`) when none is.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from engine.coordination.heartbeat import ServiceStatus, read_services
from engine.coordination.redis_client import COORDINATION_ERRORS

if TYPE_CHECKING:
    from engine.runtime import Runtime

KEPT_S = 2.0
"""How long `WorkersAlive` answers from its last read: heartbeats go stale after 30 s
(`HEARTBEAT_TTL_S`), so an answer this old says nothing less."""


async def workers_alive(runtime: Runtime) -> bool | None:
    """Whether a worker is alive by its heartbeat, the rule of `GET /services` (up while its
    latest beat is at most `HEARTBEAT_TTL_S` old; an api process runs no worker, by the role
    its beat says, else by its `api-…` name: `ServiceStatus.runs_worker`). None
    when it cannot be told: Redis does not answer, or no service ever beat here (a process
    that runs no service, or the embedded Redis, which another process's heartbeats never
    reach). Two Redis reads: the services, then their heartbeats."""
    return _alive(await _services(runtime))


async def _services(runtime: Runtime) -> dict[str, ServiceStatus] | None:
    """Every service by name (`read_services`); None when Redis does not answer."""
    try:
        statuses = await read_services(
            runtime.redis, runtime.clock, ttl_s=float(runtime.settings.heartbeat_ttl_s)
        )
    except COORDINATION_ERRORS:
        return None
    return {status.name: status for status in statuses}


def _alive(services: dict[str, ServiceStatus] | None) -> bool | None:
    if not services:
        return None
    return any(s.up and s.runs_worker for s in services.values())


class WorkersAlive:
    """`workers_alive` for reads made many times a second (a run's detail and progress while
    a step is READY: a just-submitted run polled, a progress stream): one process's answer is
    at most `KEPT_S` old, and concurrent askers share one read. `services` answers from the
    same read: the holders of a fan-out's running children are judged by it, not by a read
    of their own."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._answer: tuple[float, dict[str, ServiceStatus] | None] | None = None
        self._reading: asyncio.Task[dict[str, ServiceStatus] | None] | None = None

    async def __call__(self) -> bool | None:
        return _alive(await self.services())

    async def services(self) -> dict[str, ServiceStatus] | None:
        """Every service by name, as `GET /services` reads them, at most `KEPT_S` old; None
        when Redis does not answer."""
        now = self._runtime.clock.monotonic()
        if self._answer is not None and now - self._answer[0] < KEPT_S:
            return self._answer[1]
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        # Shielded: a caller cancelled (a client gone) must not cancel the others' read.
        return await asyncio.shield(self._reading)

    async def _read(self) -> dict[str, ServiceStatus] | None:
        try:
            services = await _services(self._runtime)
            self._answer = (self._runtime.clock.monotonic(), services)
            return services
        finally:
            self._reading = None
