"""A process's copies of rows it would otherwise read from the store on every request.

A `RowCache` answers from memory only under the change token its copies were kept under
(`engine.coordination.invalidations`): it reads the token first, drops every copy when the
token moved, and reads the store when Redis cannot say. A copy is also read again at
`max_age_s`, which bounds what a change whose token could not be replaced costs. Only found
rows are kept: a miss (an unknown key) always goes to the store, so garbage presented by a
caller never fills the memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

from engine.coordination import invalidations as tokens
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
        keeps: bool = True,
        outage: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.keeps = keeps
        """False: every `get` reads the store (nothing could tell this process of a change)."""
        self._outage = outage
        """Tells a store that cannot be reached from other read errors: a copy past
        `max_age_s`, still under the current token, then answers (None: never)."""
        self._invalidations = invalidations
        self._topic = topic
        self._clock = clock
        self.max_age_s = max_age_s
        self.max_rows = max_rows
        self._rows: dict[str, tuple[Row, float]] = {}
        self._token: bytes | None = None
        """The change token the copies were kept under."""
        invalidations.watch(topic, self._rows.clear)

    async def get(self, key: str, read: Callable[[], Awaitable[Row | None]]) -> Row | None:
        """The row under `key`: the copy when it is current, else `read()` (kept when found
        and the token did not move meanwhile)."""
        if not self.keeps:
            return await read()
        token = await self._invalidations.token(self._topic)
        if token is None:  # Redis cannot say whether anything changed: the store can
            return await read()
        if token != self._token:
            self._rows.clear()
            self._token = token
        now = self._clock.monotonic()
        kept = self._rows.get(key)
        if kept is not None and now - kept[1] < self.max_age_s:
            return kept[0]
        try:
            row = await read()
        except Exception as error:
            # The database is out, and the token says the row has not changed since it was
            # kept (a change commits in the database first, so none can be made while it is
            # out): the copy answers, rather than every request needing the row failing
            # from `max_age_s` into the outage.
            if kept is not None and self._outage is not None and self._outage(error):
                return kept[0]
            raise
        # Another request may have seen a newer token during the read: then this row may be
        # older than a change, and it answers this request only.
        if row is not None and self._token == token:
            if len(self._rows) >= self.max_rows:
                self._rows.clear()  # rarer than a key per request: start over
            self._rows[key] = (row, now)
        return row

    def __len__(self) -> int:
        return len(self._rows)


def shared_row_cache(
    runtime: Runtime,
    topic: str,
    *,
    max_age_s: float,
    max_rows: int,
    outage: Callable[[BaseException], bool] | None = None,
) -> RowCache[Row]:
    """A `RowCache` of `topic` for `runtime`'s process. With the embedded Redis it keeps
    nothing: no other process reaches that Redis (a `keys revoke` or a deployment's worker
    beside a `serve` could not replace its tokens)."""
    return RowCache(
        runtime.invalidations,
        topic,
        runtime.clock,
        max_age_s=max_age_s,
        max_rows=max_rows,
        keeps=runtime.settings.redis_url is not None,
        outage=outage,
    )


def request_scope() -> AbstractContextManager[None]:
    """One request at a front door: its row caches read their change tokens once, together
    (the REST middleware opens one per request)."""
    return tokens.request_scope()
