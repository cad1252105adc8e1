"""A process's copies of rows it would otherwise read from the store on every request.

A `RowCache` answers from memory only while the process would hear of a change at once
(`Invalidations.trusted`), and only for a row younger than `max_age_s`; otherwise it reads the
store. A row read while a change was announced is used for that request and not kept (see
`engine.coordination.invalidations`). Only found rows are kept: a miss (an unknown key) always
goes to the store, so garbage presented by a caller never fills the memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from engine.coordination.invalidations import Invalidations
from schemas.clock import Clock

if TYPE_CHECKING:
    from engine.runtime import Runtime

Row = TypeVar("Row")


class RowCache(Generic[Row]):
    """Rows of one `topic`, by key; see the module docstring."""

    def __init__(
        self,
        invalidations: Invalidations,
        topic: str,
        clock: Clock,
        *,
        max_age_s: float,
        max_rows: int,
    ) -> None:
        self._invalidations = invalidations
        self._clock = clock
        self.max_age_s = max_age_s
        self.max_rows = max_rows
        self._rows: dict[str, tuple[Row, float]] = {}
        invalidations.watch(topic, self._rows.clear)

    async def get(self, key: str, read: Callable[[], Awaitable[Row | None]]) -> Row | None:
        """The row under `key`: the copy when it can be trusted, else `read()` (kept when
        found and nothing changed meanwhile)."""
        now = self._clock.monotonic()
        trusted = self._invalidations.trusted
        if trusted:
            kept = self._rows.get(key)
            if kept is not None and now - kept[1] < self.max_age_s:
                return kept[0]
        generation = self._invalidations.generation
        row = await read()
        # Kept only if the channel was trusted for the whole read and nothing was dropped
        # meanwhile: a read begun before the first subscription may have missed a change.
        unchanged = self._invalidations.generation == generation
        if row is not None and trusted and unchanged and self._invalidations.trusted:
            if len(self._rows) >= self.max_rows:
                self._rows.clear()  # rarer than a key per request: start over
            self._rows[key] = (row, now)
        return row

    def __len__(self) -> int:
        return len(self._rows)


def shared_row_cache(
    runtime: Runtime, topic: str, *, max_age_s: float, max_rows: int
) -> RowCache[Row] | None:
    """A `RowCache` of `topic` for `runtime`'s process; None with the embedded Redis, which
    no other process reaches (a `keys revoke` or a deployment's worker beside a `serve` could
    not tell it of a change)."""
    if runtime.settings.redis_url is None:
        return None
    return RowCache(
        runtime.invalidations, topic, runtime.clock, max_age_s=max_age_s, max_rows=max_rows
    )
