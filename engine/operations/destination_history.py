"""The recent history of every destination's AIMD limit and calls in flight: what the run
monitor's Destinations chart draws.

Where it lives: in the memory of each API process, as a bounded ring per destination filled by
a sampler the REST app runs (`DestinationHistory.run`), not in Redis. The chart is a picture of
the last minutes, not a record, so losing it with the process costs nothing; kept in Redis it
would add writes to the store that every GATEWAY call's admission already leans on, and need
one elected writer among the API processes. Every API process samples the same shared state
(admission's in Redis), so whichever process answers draws the same curve, up to when each
took its samples. The cost is one admission snapshot and one small read of the stored caps
per `interval_s` per API process, whether or not anyone looks.

Memory is bounded: `window_s / interval_s` samples per destination (300 by default) and at
most `MAX_DESTINATIONS` destinations (the ones seen longest ago are dropped first).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence

from engine.operations.settings_views import DestinationView
from engine.operations.views import View
from schemas.clock import Clock
from schemas.errors import OperationError

logger = logging.getLogger(__name__)

INTERVAL_S = 2.0
"""How often the sampler reads admission's state."""
WINDOW_S = 600.0
"""How far back the history goes (10 minutes)."""
MAX_DESTINATIONS = 200
"""Destinations whose history is kept; beyond it the least recently seen is dropped."""


class HistoryPoint(View):
    """One sample of one destination."""

    at: float
    """Epoch seconds."""
    limit: float
    """The AIMD limit (fractional)."""
    in_flight: int
    cap: int


class DestinationSeries(View):
    destination: str
    points: list[HistoryPoint]
    """Oldest first."""


class DestinationHistoryView(View):
    """The samples of the last `windowS` seconds, taken every `intervalS` seconds by the API
    process that answered (each API process keeps its own, of the same shared state)."""

    interval_s: float
    window_s: float
    series: list[DestinationSeries]


Read = Callable[[], Awaitable[Sequence[DestinationView]]]
"""What a sample reads: every destination's state (`SettingsOperations.destinations`)."""


class DestinationHistory:
    """A bounded ring of samples per destination, filled by `sample` (or `run`)."""

    def __init__(
        self,
        read: Read,
        clock: Clock,
        *,
        interval_s: float = INTERVAL_S,
        window_s: float = WINDOW_S,
        max_destinations: int = MAX_DESTINATIONS,
    ) -> None:
        if interval_s <= 0 or window_s < interval_s:
            raise ValueError("the interval is above 0 and the window at least one interval")
        self._read = read
        self._clock = clock
        self.interval_s = interval_s
        self.window_s = window_s
        self._per_series = int(window_s // interval_s) + 1
        self._max_destinations = max_destinations
        self._series: OrderedDict[str, deque[HistoryPoint]] = OrderedDict()

    async def sample(self) -> None:
        """Read every destination once and append a point to each one's ring. A refusal
        (Redis or the database unreachable) leaves a gap and is raised to the caller."""
        destinations = await self._read()
        at = self._clock.now()
        for state in destinations:
            ring = self._series.pop(state.destination, None)
            if ring is None:
                ring = deque(maxlen=self._per_series)
            ring.append(
                HistoryPoint(at=at, limit=state.limit, in_flight=state.in_flight, cap=state.cap)
            )
            self._series[state.destination] = ring  # most recently seen last
        while len(self._series) > self._max_destinations:
            self._series.popitem(last=False)

    def view(self, destination: str | None = None) -> DestinationHistoryView:
        """The samples within the window (of one destination when given; none if unknown)."""
        since = self._clock.now() - self.window_s
        chosen = (
            self._series.items()
            if destination is None
            else [(destination, self._series.get(destination, deque()))]
        )
        series = [
            DestinationSeries(destination=key, points=[p for p in ring if p.at >= since])
            for key, ring in sorted(chosen)
        ]
        return DestinationHistoryView(
            interval_s=self.interval_s, window_s=self.window_s, series=series
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every `interval_s` until `stop` is set. A failed sample is logged (once
        per outage) and leaves a gap; sampling goes on."""
        failing = False
        while not stop.is_set():
            try:
                await self.sample()
                failing = False
            except OperationError as error:
                if not failing:
                    # The error as the argument: its cause (Redis down) makes the record part
                    # of the outage's one line in a process's log (`api.cli.log_setup`).
                    logger.warning("destination history: a sample failed: %s", error)
                failing = True
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except TimeoutError:
                continue
