"""AIMD: the adaptive concurrency-limit algorithm, as pure arithmetic (no I/O, no clock).

A destination's limit is the number of calls that may be in flight to it at once, shared by
every worker. It moves on samples, one per finished call:

- **success** raises it by `1 / limit`, so about +1 after a whole window of `limit`
  successes (TCP congestion avoidance). Only while the destination is actually being used:
  if fewer than `min_utilization * limit` calls were in flight, the success says nothing
  about a higher limit, and growing it anyway would let an idle period inflate the limit
  into a burst later (the "application-limited" rule of RFC 7661 and Netflix's AIMDLimit).
- **overload** (429, 503, a timeout, the global breaker opening) multiplies it by
  `backoff_ratio`.
- It never goes below `min_limit` nor above the destination's cap.

**The destination's Retry-After holds growth.** A cut caused by an answer that carried
`Retry-After` (a 429 or 503 saying "slow down for this long") also stops additive increase
until then (at most `max_hold_s`): the destination has said when it will want more traffic,
so probing for more before that only produces the next burst of 429s. The limit itself is
not lowered further, and slots keep turning over at the reduced limit. Without this hold a
limit near a small capacity (10 concurrent) grows back within a few round trips and is cut
again, so several percent of all calls are 429s; with it the sawtooth's period is the
destination's own Retry-After.

**One cut per window (NewReno-like).** Twenty calls in flight that all get 429 at once are
one congestion event, not twenty. Every cut increments `epoch`; each slot is tagged with the
epoch current when it was acquired. An overload from a slot acquired before the latest cut
(`slot_epoch < epoch`) is the tail of an event already answered, so it does not cut again.
The first overload of the new window (a slot acquired after the cut) may cut once more.

This module is the specification; `lua/lib_aimd.lua` applies the same arithmetic atomically
inside Redis, and a contract test feeds both the same samples and compares the results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AimdConfig:
    """Tuning of the AIMD algorithm."""

    initial_limit: float = 10.0
    """Limit of a destination never seen before (clamped to its cap). Default 10."""
    backoff_ratio: float = 0.9
    """Multiplier applied on a cut, 0 < r < 1. Default 0.9 (Netflix concurrency-limits'
    default): with one cut per window the limit oscillates between about 0.9 * and 1 * the
    destination's capacity, keeping goodput near 95 % of it; the capacity benchmark tunes it."""
    min_limit: float = 1.0
    """Floor of the limit. Default 1: a destination is never shut out entirely by AIMD."""
    min_utilization: float = 0.5
    """A success raises the limit only if at least this fraction of the limit was in flight
    when the call finished. Default 0.5."""
    max_hold_s: float = 10.0
    """Longest growth hold after a cut that came with a Retry-After. Default 10 s."""

    def __post_init__(self) -> None:
        if not 0.0 < self.backoff_ratio < 1.0:
            raise ValueError(f"backoff_ratio must be in (0, 1), got {self.backoff_ratio}")
        if self.min_limit < 1.0:
            raise ValueError(f"min_limit must be at least 1, got {self.min_limit}")
        if self.initial_limit < self.min_limit:
            raise ValueError("initial_limit must be at least min_limit")
        if not 0.0 <= self.min_utilization <= 1.0:
            raise ValueError("min_utilization must be in [0, 1]")
        if self.max_hold_s < 0:
            raise ValueError("max_hold_s must not be negative")


@dataclass(frozen=True)
class AimdState:
    """A destination's limit and how many cuts it has had."""

    limit: float
    """Current limit (fractional; `slots()` is the whole number of calls it admits)."""
    epoch: int = 0
    """Number of cuts so far; slots acquired now are tagged with it."""
    hold_until: float = 0.0
    """No additive increase before this time (epoch seconds): the last cut's Retry-After."""


class Aimd:
    """The AIMD `Limit` (in concurrency-limits' terms): sample in, new state out."""

    def __init__(self, config: AimdConfig | None = None) -> None:
        self.config = config or AimdConfig()

    def initial(self, cap: int) -> AimdState:
        """State of a destination never seen before."""
        return AimdState(self.clamp(self.config.initial_limit, cap))

    def clamp(self, limit: float, cap: int) -> float:
        """`limit` bounded to `[min_limit, cap]`."""
        return max(self.config.min_limit, min(limit, float(cap)))

    def on_success(
        self, state: AimdState, *, in_flight: int, cap: int, now: float = 0.0
    ) -> AimdState:
        """A call succeeded at `now` while `in_flight` calls (itself included) were in flight."""
        limit = self.clamp(state.limit, cap)
        if in_flight < limit * self.config.min_utilization or now < state.hold_until:
            return AimdState(limit, state.epoch, state.hold_until)
        return AimdState(self.clamp(limit + 1.0 / limit, cap), state.epoch, state.hold_until)

    def on_overload(
        self,
        state: AimdState,
        *,
        slot_epoch: int,
        cap: int,
        now: float = 0.0,
        retry_after_s: float = 0.0,
    ) -> AimdState:
        """A call acquired at `slot_epoch` was answered at `now` with an overload signal
        (and the destination's `Retry-After`, 0 if none).

        Cuts (and starts a new epoch) only if the call started after the latest cut; a cut
        holds growth until `now + retry_after_s` (at most `max_hold_s`).
        """
        limit = self.clamp(state.limit, cap)
        if slot_epoch < state.epoch:
            return AimdState(limit, state.epoch, state.hold_until)
        hold = state.hold_until
        if retry_after_s > 0:
            hold = max(hold, now + min(retry_after_s, self.config.max_hold_s))
        return AimdState(self.clamp(limit * self.config.backoff_ratio, cap), state.epoch + 1, hold)


def slots(limit: float, cap: int) -> int:
    """Whole calls a fractional `limit` admits at once: ⌊limit⌋, at least 1, at most `cap`."""
    return max(1, min(math.floor(limit), cap))
