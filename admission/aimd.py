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

**Slow start.** Until a destination's first overload (epoch 0) a success adds a whole 1, so
the limit doubles every window, as in TCP's slow start: a new destination at the initial
limit of 10 that could take 100 concurrent calls gets there in a few round trips instead of
ninety. That first overload ends slow start with a halving (the limit has overshot by up to
twice the capacity; a Retry-After hold lets it regrow to three quarters of the overshoot),
and from then on the increase is additive.

**The destination's Retry-After holds growth.** A cut caused by an answer that carried
`Retry-After` (a 429 or 503 saying "slow down for this long") also stops additive increase
above one below the limit that was cut (`hold_ceiling`) until then (at most `max_hold_s`):
the destination has said when it will want more traffic, so probing past the level that
overloaded it before that only produces the next burst of 429s, while growing back to just
under that level is safe (it did not overload). Without the hold a limit near a small
capacity (10 concurrent) grows back within a few round trips and is cut again, so several
percent of all calls are 429s; with it the sawtooth's period is the destination's own
Retry-After, and the limit spends that period just under the capacity instead of at the
cut level.

**Probes that keep failing back off.** Each probe past the hold costs a 429, and a call
answered 429 waits out its Retry-After: near the end of a fan-out that one call is the run's
last second. So when a cut comes while the previous hold lasts or within one hold's length
after it ended (the probe found the same ceiling again), the new hold is twice as long as
the previous one, up to `max_hold_s`: 1 s, 2 s, 4 s, 8 s, 10 s for a destination answering
`Retry-After: 1` at a steady capacity. A cut later than that (the capacity held more for a
while) starts again from the Retry-After. Rises are still found within `max_hold_s`.

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
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class AimdConfig:
    """Tuning of the AIMD algorithm."""

    initial_limit: float = 10.0
    """Limit of a destination never seen before (clamped to its cap). Default 10."""
    backoff_ratio: float = 0.9
    """Multiplier applied on a cut (after slow start), 0 < r < 1. Default 0.9, as the engine's
    `SCHEMABRIDGE_AIMD_BACKOFF_RATIO`: chosen by the capacity benchmark
    (bench/results-admission.md)."""
    min_limit: float = 1.0
    """Floor of the limit. Default 1: a destination is never shut out entirely by AIMD."""
    min_utilization: float = 0.5
    """A success raises the limit only if at least this fraction of the limit was in flight
    when the call finished. Default 0.5."""
    slow_start: bool = True
    """Double the limit every window until the first overload, which halves it. Default on."""
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
    """Until this time (epoch seconds; the last cut's Retry-After) the limit grows no further
    than `hold_ceiling`."""
    hold_ceiling: float = 0.0
    """One below the limit the last cut started from."""
    hold_s: float = 0.0
    """Length of the latest hold (0: none yet); the next one may be twice as long."""


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
        grown = limit
        if in_flight >= limit * self.config.min_utilization:
            step = 1.0 if self._slow_starting(state) else 1.0 / limit
            grown = self.clamp(limit + step, cap)
            if now < state.hold_until:
                grown = max(limit, min(grown, state.hold_ceiling))
        return replace(state, limit=grown)

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
        with a Retry-After holds growth for that long, or for twice the previous hold if this
        cut came during it or within its length after it (at most `max_hold_s`).
        """
        limit = self.clamp(state.limit, cap)
        if slot_epoch < state.epoch:
            return replace(state, limit=limit)
        if self._slow_starting(state):
            # The end of slow start: the limit overshot, by up to twice what the destination
            # takes, so its capacity lies between half the limit and the limit. Halve it, and
            # during a hold let it grow back only to the middle of that range.
            cut = self.clamp(limit * 0.5, cap)
            ceiling = max(cut, limit * 0.75 - 1.0)
        else:
            cut = self.clamp(limit * self.config.backoff_ratio, cap)
            ceiling = max(cut, limit - 1.0)
        if retry_after_s <= 0:
            return replace(state, limit=cut, epoch=state.epoch + 1)
        length = retry_after_s
        if state.hold_s > 0 and now <= state.hold_until + state.hold_s:
            length = max(length, 2 * state.hold_s)
        length = min(length, self.config.max_hold_s)
        hold = max(state.hold_until, now + length)
        return AimdState(cut, state.epoch + 1, hold, ceiling, length)

    def _slow_starting(self, state: AimdState) -> bool:
        return self.config.slow_start and state.epoch == 0


def slots(limit: float, cap: int) -> int:
    """Whole calls a fractional `limit` admits at once: ⌊limit⌋, at least 1, at most `cap`."""
    return max(1, min(math.floor(limit), cap))
