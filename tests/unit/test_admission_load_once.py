"""Copying durable settings into Redis: once per key, shared by concurrent callers, refreshed
later (so a Redis that lost them gets them back)."""

from __future__ import annotations

import asyncio

from admission.caps import LoadOnce


async def test_load_once_shares_a_load_and_refreshes_it_later() -> None:
    loads: list[str] = []

    async def loader(arg: str) -> None:
        loads.append(arg)
        await asyncio.sleep(0.01)

    # Fresh for 0.5 s: a loaded host may pause this process for tens of milliseconds between
    # the load and the "still fresh" call below.
    once = LoadOnce(refresh_s=0.5)
    await asyncio.gather(*(once.once("k", loader, "a") for _ in range(5)))
    assert loads == ["a"]  # five callers, one load
    await once.once("k", loader, "a")
    assert loads == ["a"]  # still fresh
    await asyncio.sleep(0.6)
    await once.once("k", loader, "a")
    assert loads == ["a", "a"]  # stale: loaded again (Redis may have lost the copy)
