"""Wake-ups: "ready steps may exist, claim now", without busy polling.

Whoever makes steps ready calls `notify()`; idle workers sit in `wait(timeout_s)`. The store
stays the source of truth: a wake-up is only a hint to look now rather than at the next slow
poll, so losing one costs latency, never work. That allows a cheap design:

- Local first. `notify()` sets this process's signal at once, so waiters in the same process
  wake without a Redis round trip.
- Remote by PUBLISH on `sb:wakeup` (`engine.coordination.keys.WAKEUP_CHANNEL`), through the
  machinery of `engine.coordination.channel.PubSubChannel`: a burst of `notify()` calls is
  coalesced into at most one PUBLISH per `coalesce_s` (default 5 ms), and a listener sets the
  local signal when another process publishes. The message is the sender's random id alone,
  so a process ignores the echo of its own publications (it already woke locally).
- Level-triggered. The signal stays set until a `wait()` consumes it, so a notification that
  arrives while nobody waits makes the next `wait()` return at once; every waiter blocked at
  that moment wakes (broadcast). Spurious wake-ups are possible; callers re-check the store.
- Only waiters read the channel: the listener starts with `listen()` (a worker, as the runtime
  builds it) or the process's first `wait()`, so an API process, which only notifies, never
  reads every process's PUBLISH (about 200 a second under the submission benchmark, each one
  a read, a parse and an echo check for nothing).
- Degrades to polling. If Redis is down, `notify()` still wakes local waiters and logs the
  failed publish; `wait()` simply times out, and the caller's `timeout_s` *is* the fallback
  poll interval. The listener is supervised (restarted with backoff when it dies); after it
  resubscribes it raises the local signal once, because notifications sent while it was away
  are lost.
"""

from __future__ import annotations

from typing import Unpack

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.channel import ChannelOptions, PubSubChannel, Signal


class Wakeup(PubSubChannel):
    """One process's end of the wake-up channel; see the module docstring.

    Build one per process and share it between the components that notify and wait, so that
    local wake-ups and coalescing cover the whole process. Call `start()` before relying on
    remote delivery and `stop()` when done, or use it as an async context manager. While not
    running (before `start()`, after `stop()`), `notify()` publishes inline (no coalescing) and
    only local notifications wake `wait()`. Timing parameters: see `PubSubChannel`.
    """

    what = "wake-up"

    default_channel = keys.WAKEUP_CHANNEL
    default_coalesce_s = 0.005
    listens_at_start = False

    def __init__(self, client: redis.Redis, **options: Unpack[ChannelOptions]) -> None:
        super().__init__(client, **options)
        self._signal = Signal()

    async def notify(self) -> None:
        """Tell every waiter, here and in other processes, that ready work may exist.

        Wakes local waiters immediately. While running, the PUBLISH happens on the publisher
        task (coalesced), so this returns without a round trip; otherwise it publishes inline.
        Never raises for a coordination failure.
        """
        self._signal.set()
        await self._hint()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for a notification; True if one arrived (or was pending),
        False on timeout. Consumes the pending notification."""
        self._listen_now()
        return await self._signal.wait(timeout_s)

    def _received(self, body: bytes) -> None:
        self._signal.set()

    def _resubscribed(self) -> None:
        self._signal.set()

    def _stopped(self) -> None:
        self._signal.set()
