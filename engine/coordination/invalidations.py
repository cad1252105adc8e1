"""Invalidations: "rows of this kind changed; drop your copies", between processes.

Some rows are read on every request and change rarely: an API key is looked up by its hash on
each call, a workflow's routing row on each submission. A process may keep such rows in memory
(`engine.operations.row_cache.RowCache`) only as long as it would hear of a change at once, so
that a revoked key stops working on every process when the revocation returns. This channel
says so:

- `announce(topic)` drops this process's copies, then PUBLISHes the topic on
  `sb:invalidations` inline (not coalesced on the publisher task): when it returns, every
  process subscribed has been sent the message. `announce_soon(topic)` does the same from
  synchronous code (the store's report of a committed change), publishing on a task.
- Each process's listener drops the copies of the topic it receives. A cache is trusted only
  while the listener holds a live subscription (`trusted`): before it is confirmed, after the
  connection is lost, and while Redis is down, every read goes to the store. A resubscription
  drops everything, since whatever was published meanwhile is lost.
- `generation` counts the drops. A cache notes it before reading the store and keeps the row
  only if no drop happened meanwhile: a read that raced a change is used once, never kept.

If the PUBLISH itself fails (Redis went down between the store's commit and the announcement),
the other processes' listeners are most likely down too, so their caches are not trusted; the
caches' own age limit bounds the rest. The listener starts on the first `watch` (workers never
read the channel).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Unpack

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.channel import ChannelOptions, PubSubChannel


class Invalidations(PubSubChannel):
    """One process's end of the invalidation channel; see the module docstring."""

    what = "invalidation"
    default_channel = keys.INVALIDATIONS_CHANNEL
    listens_at_start = False

    def __init__(self, client: redis.Redis, **options: Unpack[ChannelOptions]) -> None:
        super().__init__(client, **options)
        self._drops: dict[str, list[Callable[[], None]]] = {}
        self._announcing: list[bytes] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.generation = 0
        """Bumped on every drop: a cache keeps a row it read only if this did not move."""

    def watch(self, topic: str, drop: Callable[[], None]) -> None:
        """Call `drop` whenever rows of `topic` change anywhere (and whenever changes may have
        been missed). Starts the listener."""
        self._drops.setdefault(topic, []).append(drop)
        self._listen_now()

    @property
    def trusted(self) -> bool:
        """True while a change anywhere would reach this process at once."""
        return self.subscribed

    async def announce(self, topic: str) -> None:
        """Rows of `topic` changed (and are committed): drop the copies here and tell every
        other process before returning. Never raises for a coordination failure."""
        self._drop(topic)
        await self._send(topic)

    def announce_soon(self, topic: str) -> None:
        """`announce` from synchronous code (the store's hook on committed changes): drops the
        copies here at once and publishes on a task of its own."""
        self._drop(topic)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a connection returned by the garbage collector: nobody to tell
            return
        task = loop.create_task(self._send(topic))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, topic: str) -> None:
        self._announcing.append(topic.encode())
        await self._publish()  # takes the topic from `_body()` before its first await

    def _drop(self, topic: str) -> None:
        self.generation += 1
        for drop in self._drops.get(topic, ()):
            drop()

    def _drop_all(self) -> None:
        self.generation += 1
        for drops in self._drops.values():
            for drop in drops:
                drop()

    def _body(self) -> bytes:
        return self._announcing.pop(0) if self._announcing else b""

    def _received(self, body: bytes) -> None:
        self._drop(body.decode(errors="replace"))

    def _resubscribed(self) -> None:
        self._drop_all()

    def _stopped(self) -> None:
        for task in self._sending:
            task.cancel()  # the client is about to close; nobody listens to this one any more
        self._drop_all()
