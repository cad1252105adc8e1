"""Cancellations: "these runs were cancelled: their steps send nothing more".

A cancel commits in the store first (runs and steps CANCELLED, claims cleared); what the store
cannot do is stop a step a worker already holds in memory: one waiting between two HTTP
attempts, or for an admission slot, or claimed and about to send. So the cancel then calls
`announce(run_ids)`, and every worker process stops those steps before their next attempt
(docs/architecture.md, 'Cancelling a run'):

- Local first: this process's listeners learn at once (in `serve` and `run` the worker shares
  the process with the cancel), before `announce` returns.
- Remote by one PUBLISH on `sb:cancellations` (`engine.coordination.keys
  .CANCELLATIONS_CHANNEL`) through `PubSubChannel`, sent inline and awaited, not coalesced:
  when the cancel returns, Redis has handed the message to every subscribed process, which
  acts on it as soon as its event loop reads it (milliseconds).
- Remembered: each process keeps the ids it heard of, and when, in a bounded memory
  (`REMEMBERED`, the oldest forgotten first), so a step whose claim was under way as the
  message arrived is still stopped (`heard_since`). Cancels are operator actions, rare: the
  memory costs nothing on the hot path but a lookup per claimed step.
- Not the only line: a message lost (Redis down, the listener reconnecting) is covered by the
  worker's lease renewal, which finds the claims that are gone every third of a lease.

The same channel carries "these runs FAILED" (`announce_failed`, a body starting `failed `):
a worker that records a step failure ending its run tells every worker, which stops that run's
other steps before their next HTTP attempt and gives their claims back held, for the
operator's retry (`engine.execution.stops.RUN_FAILED`). Only the run's own steps, not its
children. No safety net backs it: a message lost lets those steps finish as they would have.

The ids announced are the run cancelled and every cancelled run with cancelled children (see
`engine.store.operator_actions.stopped_ids`); a step is covered when its run or its parent run
is named, so a fan-out of any size costs one id.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Unpack

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.channel import ChannelOptions, PubSubChannel

FAILED_PREFIX = "failed "
"""Starts a failed-runs message (a run id has no space; an older process reading one takes
`failed` for an unknown run id, which stops nothing)."""
REMEMBERED = 10_000
"""Cancelled run ids a process remembers (far more than the cancels of the longest claim)."""

Listener = Callable[[frozenset[str]], None]
"""Told the ids of each cancellation heard (locally or from another process)."""


class Cancellations(PubSubChannel):
    """One process's end of the cancellations channel; see the module docstring. Build one
    per process (the `Runtime` does), `start()` it, `stop()` it at the end."""

    what = "cancellations"
    default_channel = keys.CANCELLATIONS_CHANNEL

    def __init__(
        self,
        client: redis.Redis,
        *,
        remembered: int = REMEMBERED,
        **options: Unpack[ChannelOptions],
    ) -> None:
        super().__init__(client, **options)
        self._remembered = remembered
        self._heard: OrderedDict[str, float] = OrderedDict()
        """Run id → when it was heard of (monotonic), oldest first."""
        self._listeners: list[Listener] = []
        self._failed_listeners: list[Listener] = []

    async def announce(self, run_ids: Iterable[str]) -> bool:
        """Tell this process's listeners at once, and every other process by one PUBLISH
        (awaited). False when Redis could not be reached (the other processes learn it from
        their lease renewal instead); never raises for a coordination failure."""
        ids = frozenset(run_ids)
        if not ids:
            return True
        self._hear(ids)
        return await self._publish(" ".join(sorted(ids)).encode())

    async def announce_failed(self, run_ids: Iterable[str]) -> bool:
        """Tell this process's failed-run listeners at once, and every other process by one
        PUBLISH (awaited); False when Redis could not be reached. Never raises for a
        coordination failure."""
        ids = frozenset(run_ids)
        if not ids:
            return True
        self._tell(self._failed_listeners, ids)
        return await self._publish((FAILED_PREFIX + " ".join(sorted(ids))).encode())

    def heard_since(self, run_ids: Iterable[str | None], since: float) -> bool:
        """Whether one of `run_ids` was heard of as cancelled at `since` (monotonic) or later."""
        for run_id in run_ids:
            if run_id is not None and self._heard.get(run_id, -1.0) >= since:
                return True
        return False

    def listening(self, listener: Listener) -> contextlib.AbstractContextManager[None]:
        """`listener` hears of every cancellation while the block lasts."""
        return _registered(self._listeners, listener)

    def listening_failed(self, listener: Listener) -> contextlib.AbstractContextManager[None]:
        """`listener` hears of every run announced FAILED while the block lasts."""
        return _registered(self._failed_listeners, listener)

    @staticmethod
    def _tell(listeners: list[Listener], ids: frozenset[str]) -> None:
        for listener in list(listeners):
            listener(ids)

    def _hear(self, ids: frozenset[str]) -> None:
        now = time.monotonic()
        for run_id in ids:
            self._heard[run_id] = now
            self._heard.move_to_end(run_id)
        while len(self._heard) > self._remembered:
            self._heard.popitem(last=False)
        for listener in list(self._listeners):
            listener(ids)

    def _received(self, body: bytes) -> None:
        text = body.decode()
        if text.startswith(FAILED_PREFIX):
            failed = frozenset(text.removeprefix(FAILED_PREFIX).split())
            if failed:
                self._tell(self._failed_listeners, failed)
            return
        ids = frozenset(text.split())
        if ids:
            self._hear(ids)


@contextlib.contextmanager
def _registered(listeners: list[Listener], listener: Listener) -> Iterator[None]:
    listeners.append(listener)
    try:
        yield
    finally:
        listeners.remove(listener)
