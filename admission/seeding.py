"""Operator settings put back into a Redis that lost them (docs/architecture.md, 'Redis
restarts').

Tenant rate limits and destination caps are stored in the database; Redis holds the copies
admission decides with. A Redis restarted without its data has none of them, and would apply
the defaults (1,000 items a minute, the default cap) until each process's next refresh. So the
exchange script answers 'unseeded' while the marker `keys.SETTINGS_SEEDED` is absent, and the
backend calls `Reseeder.reseed` before it sends the batch again: every setting is read from the
database and the ones Redis lacks are written back, with the marker, in one script call.

Steps that ask together share one copy. A copy that fails (the database unreachable too) is
logged, and not tried again for `RETRY_S`: meanwhile the batches go with what Redis holds (the
defaults), as they did before this check existed, rather than wait for the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from admission.backend import CoordinationBackend
from admission.caps import DestinationCaps

logger = logging.getLogger(__name__)

RETRY_S = 5.0
"""After a failed copy, how long batches go without one before the next try."""


class SettingsSource(Protocol):
    """Every operator setting admission copies into Redis (the database's copies)."""

    async def all_tenant_limits(self) -> Mapping[str, int]: ...

    async def all_caps(self) -> Mapping[str, DestinationCaps]: ...


class Reseeder:
    """Copies the settings of `source` into the Redis of `backend` when it lost them."""

    def __init__(self, backend: CoordinationBackend, source: SettingsSource) -> None:
        self._backend = backend
        self._source = source
        self._running: asyncio.Future[None] | None = None
        self._failed_at: float | None = None
        self.copies = 0
        """Copies made (tests and the log read it)."""

    async def reseed(self) -> None:
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_S:
            return
        if self._running is None:
            self._running = asyncio.ensure_future(self._copy())
            self._running.add_done_callback(self._finished)
        await asyncio.shield(self._running)

    def _finished(self, _: asyncio.Future[None]) -> None:
        self._running = None

    async def _undo_removed(
        self, limits: Mapping[str, int], caps: Mapping[str, DestinationCaps]
    ) -> None:
        """Read the settings again after the copy and remove from Redis what an operator
        removed meanwhile. A removal writes the database, then Redis: one that landed between
        the first read and the copy found nothing in Redis to remove, and the copy wrote it
        back. A removal later than this read removes its own copy."""
        now_limits = await self._source.all_tenant_limits()
        now_caps = await self._source.all_caps()
        for tenant_id in limits.keys() - now_limits.keys():
            await self._backend.write_tenant_limit(tenant_id, None)
        for destination in caps.keys() - now_caps.keys():
            await self._backend.delete_caps(destination)

    async def _copy(self) -> None:
        try:
            limits = await self._source.all_tenant_limits()
            caps = await self._source.all_caps()
            written = await self._backend.seed(
                limits, {d: (c.max_concurrency, c.rate_per_second) for d, c in caps.items()}
            )
            await self._undo_removed(limits, caps)
        except Exception as error:
            self._failed_at = time.monotonic()
            logger.warning(
                "%s, and copying them from the database failed (%s); what Redis holds, else "
                "the default tenant rate and caps, applies until the next try in %g s",
                UNSEEDED,
                error,
                RETRY_S,
            )
            return
        self._failed_at = None
        self.copies += 1
        logger.info("%s", copied_line(len(limits), len(caps), written))


UNSEEDED = (
    "Redis has not been given the operator settings since it started (new, or restarted "
    "without its data)"
)
"""What the missing marker tells, and no more: Redis may hold some settings all the same (an
operator's change written since it started, a copy another process made in part)."""


def copied_line(limits: int, caps: int, written: tuple[int, int]) -> str:
    """The log line of a copy: of the `limits` tenant rate limits and `caps` destination caps
    stored, how many Redis lacked (`written`), so it never says Redis held none and some."""
    limits_written, caps_written = written
    return (
        f"{UNSEEDED}; before admitting, copied from the database the ones it lacked: "
        f"{limits_written} of {limits} tenant rate limit{'' if limits == 1 else 's'} and "
        f"{caps_written} of {caps} destination cap{'' if caps == 1 else 's'}"
    )
