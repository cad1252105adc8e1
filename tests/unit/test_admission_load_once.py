"""Copying durable settings into Redis: once per key, shared by concurrent callers, refreshed
later (so a Redis that lost them gets them back)."""

from __future__ import annotations

import asyncio
import types

import pytest

from admission import caps
from admission.caps import LoadOnce


async def test_load_once_shares_a_load_and_refreshes_it_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The module's clock, moved by the test: "still fresh" must not depend on how long a
    # loaded host paused this process between two calls.
    now = [1000.0]
    monkeypatch.setattr(caps, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    loads: list[str] = []

    async def loader(arg: str) -> None:
        loads.append(arg)
        await asyncio.sleep(0.01)

    once = LoadOnce(refresh_s=0.5)
    await asyncio.gather(*(once.once("k", loader, "a") for _ in range(5)))
    assert loads == ["a"]  # five callers, one load
    now[0] += 0.49
    await once.once("k", loader, "a")
    assert loads == ["a"]  # still fresh
    now[0] += 0.02
    await once.once("k", loader, "a")
    assert loads == ["a", "a"]  # stale: loaded again (Redis may have lost the copy)
