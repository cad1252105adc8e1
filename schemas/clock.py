"""Injectable time.

Engine and admission code never read the wall clock directly; they take a `Clock` so tests can
feed timestamps instead of sleeping (docs/architecture.md, 'Injected time').
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


def utc_moment(epoch_s: float) -> str:
    """A time as messages say it: UTC, to the second ("2026-12-05 09:31:07Z")."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class Clock(Protocol):
    """A source of time in seconds."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch (comparable across processes)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, only meaningful within one process."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to; for tests."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._mono += seconds
