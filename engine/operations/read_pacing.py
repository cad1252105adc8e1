"""How often a waiter reads a run again as its events arrive: a token bucket.

A short run has a few events (its step claimed, the run ended), each worth a read at once; a
run that changes all the time (a fan-out's parent) must not be read at every event. So reads
are paced by a bucket of `burst` tokens refilled at one per `interval_s`: the first reads after
a quiet spell go at once, and a steady stream of events is read at most every `interval_s`.
Arithmetic on the timestamps it is given, so a unit test feeds it times.
"""

from __future__ import annotations


class ReadPacing:
    """One waiter's pacing; call `pause(now)` before a read and `read(now)` after it."""

    def __init__(self, interval_s: float, burst: int, now: float) -> None:
        """`now`: the time of the read made before the first wait (it spent a token)."""
        self.interval_s = interval_s
        self.burst = burst
        self._tokens = burst - 1.0
        self._at = now

    def pause(self, now: float) -> float:
        """Seconds to sleep before the next read (0: read now)."""
        tokens = self._tokens_at(now)
        return 0.0 if tokens >= 1 else (1 - tokens) * self.interval_s

    def read(self, now: float) -> None:
        """A read was made at `now`: it spends a token."""
        self._tokens, self._at = max(0.0, self._tokens_at(now) - 1), now

    def _tokens_at(self, now: float) -> float:
        return min(self.burst, self._tokens + (now - self._at) / self.interval_s)
