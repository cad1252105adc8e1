"""Settings copied back into a Redis that lost them must not undo an operator's removal.

`Reseeder` reads every setting from the database, then writes the ones Redis lacks
(`seed.lua`). A removal of a destination's caps (the database row, then the Redis hash) that
lands between the two leaves nothing in Redis for the script to respect, and the copy writes
the removed caps back; no later refresh removes them (a refresh only writes caps the database
holds). Real parts: PostgreSQL and the test Redis; the removal runs where it would interleave.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from admission import Admission, AdmissionConfig, DestinationCaps
from engine.execution.admission_guard import StoreSettingsSource
from engine.store import Store
from schemas.clock import SystemClock

DESTINATION = "http://127.0.0.1:9/charge"


@pytest.fixture
async def store(pg_database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(pg_database_url, SystemClock())
    yield opened
    await opened.close()


class RemovedWhileCopying(StoreSettingsSource):
    """The database's settings, with an operator's removal of the caps landing right after
    the copy has read them (as `SettingsOperations.remove_caps` does it: row, then Redis)."""

    admission: Admission | None = None

    async def all_caps(self) -> dict[str, DestinationCaps]:
        read = await super().all_caps()
        assert self.admission is not None
        await self.store.remove_destination_caps(DESTINATION)
        await self.admission.remove_caps(DESTINATION)
        return read


async def test_a_removal_during_the_copy_stays_removed(store: Store, redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    source = RemovedWhileCopying(store)
    admission = Admission(redis, SystemClock(), AdmissionConfig(), settings=source)
    source.admission = admission
    try:

        async def caps(cap: int, per_second: float | None) -> None:
            await admission.set_caps(DESTINATION, DestinationCaps(cap, per_second))

        await store.change_destination_caps(DESTINATION, {"max_concurrency": 1}, caps)
        await redis.flushdb()  # Redis restarted without its data
        ticket = await admission.admit(DESTINATION, "default", wait_timeout_s=0)
        await ticket.success()
        assert admission.reseeder is not None and admission.reseeder.copies == 1
        assert await store.get_destination_caps(DESTINATION) is None
        assert await admission.get_caps(DESTINATION) is None
    finally:
        await redis.aclose()
