"""Concurrency caps per destination (`maxConcurrency`, optional `ratePerSecond`).

The operative copy lives in Redis (`sb:caps:{destination}`), where the admission script reads
it atomically with the slot count, so a change applies to every worker's next admission.
The durable copy belongs to the database (the API persists it); anything that can answer
`get_caps` is a `CapsSource`, and `Admission` copies a destination's caps from its source
into Redis the first time it admits a call to that destination in this process.

Without caps a destination is capped at `AdmissionConfig.default_max_concurrency`.
`rate_per_second` is enforced as a sliding window of max(1 s, 1/rate) holding
⌊rate * window⌋ calls (at least one), so rates below 1/s still admit one call per window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from admission.backend import CoordinationBackend


@dataclass(frozen=True)
class DestinationCaps:
    """Bounds on every call to one destination, whatever AIMD says."""

    max_concurrency: int
    """Calls in flight at once, across all workers (AIMD's ceiling). At least 1."""
    rate_per_second: float | None = None
    """Calls started per second, across all workers; None = unlimited."""

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {self.max_concurrency}")
        if self.rate_per_second is not None and self.rate_per_second <= 0:
            raise ValueError(f"rate_per_second must be positive, got {self.rate_per_second}")


class CapsSource(Protocol):
    """Where a destination's configured caps come from (e.g. the database)."""

    async def get_caps(self, destination: str) -> DestinationCaps | None:
        """The destination's caps, or None if it has none configured."""
        ...


class RedisCapsStore:
    """Caps as the admission scripts see them. Also a `CapsSource`."""

    def __init__(self, backend: CoordinationBackend) -> None:
        self._backend = backend

    async def set_caps(self, destination: str, caps: DestinationCaps) -> None:
        """Replace the destination's caps; takes effect on the next admission anywhere."""
        await self._backend.write_caps(destination, caps.max_concurrency, caps.rate_per_second)

    async def get_caps(self, destination: str) -> DestinationCaps | None:
        """The caps in force, or None if the destination has none (default cap applies)."""
        found = await self._backend.read_caps(destination)
        if found is None:
            return None
        max_concurrency, rate = found
        return DestinationCaps(max_concurrency, rate)

    async def delete_caps(self, destination: str) -> None:
        """Forget the destination's caps (the default cap applies again)."""
        await self._backend.delete_caps(destination)


@dataclass
class LoadOnce:
    """Runs a loader once per key and process, then again after `refresh_s`; callers that
    arrive while it runs wait for the same run (steps that start together share one database
    read). The refresh puts the durable copy back into Redis after Redis lost it (a restart
    without persistence), within `refresh_s`."""

    refresh_s: float = 60.0
    """How long a load counts as current. Default 60 s."""
    _loaded_at: dict[Hashable, float] = field(default_factory=dict)
    _running: dict[Hashable, asyncio.Future[None]] = field(default_factory=dict)

    def mark(self, key: Hashable) -> None:
        """Consider `key` loaded now (its value was just written by this process)."""
        self._loaded_at[key] = time.monotonic()

    async def once(self, key: Hashable, loader: Callable[[str], Awaitable[None]], arg: str) -> None:
        loaded = self._loaded_at.get(key)
        if loaded is not None and time.monotonic() - loaded < self.refresh_s:
            return
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(loader(arg))
            self._running[key] = running
            running.add_done_callback(lambda done: self._finished(key, done))
        await asyncio.shield(running)

    def _finished(self, key: Hashable, done: asyncio.Future[None]) -> None:
        self._running.pop(key, None)
        # A failed load (database down) is tried again by the next caller.
        if not done.cancelled() and done.exception() is None:
            self.mark(key)
