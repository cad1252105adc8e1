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
  while the listener holds a subscription it has heard from lately (`trusted`): it PINGs
  every `PING_S` and counts as deaf after `LIVENESS_S` without a word, so a half-open
  connection is found in seconds, not when TCP gives up; a connection known lost is not
  trusted while redis-py reconnects it. Its client never resends, so after that reconnection
  the listener ends and subscribes again rather than go on reading. Before the
  subscription is confirmed, after the connection is lost, and while Redis is down, every
  read goes to the store. A resubscription drops everything, since whatever was published
  meanwhile is lost.
- `generation` counts the drops. A cache notes it before reading the store and keeps the row
  only if no drop happened meanwhile: a read that raced a change is used once, never kept.

`announce` says whether the PUBLISH reached Redis: when it did not, other processes may hold
copies until the caches' own age limit, and the caller decides what that means (a revocation
waits it out before it returns). The listener starts on the first `watch` (workers never read
the channel).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Unpack

import redis.asyncio as redis
from redis.asyncio.client import PubSub

from engine.coordination import keys
from engine.coordination.channel import ChannelOptions, PubSubChannel

PING_S = 0.5
"""The listener PINGs the server this often."""
LIVENESS_S = 1.5
"""A listener that heard nothing (not even a PONG) for this long is not trusted."""


class Invalidations(PubSubChannel):
    """One process's end of the invalidation channel; see the module docstring."""

    what = "invalidation"
    default_channel = keys.INVALIDATIONS_CHANNEL
    listens_at_start = False

    def __init__(self, client: redis.Redis, **options: Unpack[ChannelOptions]) -> None:
        super().__init__(client, **options)
        if "read_timeout_s" not in options:
            self.read_timeout_s = PING_S / 2  # the listener's turn comes often enough to PING
        self._last_ping = float("-inf")
        self._drops: dict[str, list[Callable[[], None]]] = {}
        self._announcing: list[bytes] = []
        self._sending: set[asyncio.Task[bool]] = set()
        self.generation = 0
        """Bumped on every drop: a cache keeps a row it read only if this did not move."""

    def watch(self, topic: str, drop: Callable[[], None]) -> None:
        """Call `drop` whenever rows of `topic` change anywhere (and whenever changes may have
        been missed). Starts the listener."""
        self._drops.setdefault(topic, []).append(drop)
        self._listen_now()

    @property
    def trusted(self) -> bool:
        """True while a change anywhere would reach this process at once: subscribed, and
        heard from within `LIVENESS_S`."""
        pubsub = self._pubsub
        if not self.subscribed or pubsub is None or pubsub.connection is None:
            return False
        if not pubsub.connection.is_connected:  # lost, and being reconnected under us
            return False
        return asyncio.get_running_loop().time() - self.last_heard < LIVENESS_S

    async def announce(self, topic: str) -> bool:
        """Rows of `topic` changed (and are committed): drop the copies here and tell every
        other process before returning. True when the PUBLISH reached Redis; never raises
        for a coordination failure."""
        self._drop(topic)
        return await self._send(topic)

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

    async def _send(self, topic: str) -> bool:
        self._announcing.append(topic.encode())
        return await self._publish()  # takes the topic from `_body()` before its first await

    async def _listening(self, pubsub: PubSub) -> None:
        now = asyncio.get_running_loop().time()
        if self.subscribed and now - self._last_ping >= PING_S:
            self._last_ping = now
            await pubsub.ping()  # the PONG arrives as a message: `last_heard`

    async def stop(self) -> None:
        if self._sending:  # announcements of changes committed just before: let them go out
            await asyncio.wait(set(self._sending), timeout=self.stop_timeout_s)
        await super().stop()

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
