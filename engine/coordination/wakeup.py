"""Wake-ups: "ready steps may exist, claim now", without busy polling.

Whoever makes steps ready calls `notify()`; idle workers sit in `wait(timeout_s)`. The store
stays the source of truth: a wake-up is only a hint to look now rather than at the next slow
poll, so losing one costs latency, never work. That allows a cheap design:

- Local first. `notify()` sets this process's signal at once, so waiters in the same process
  wake without a Redis round trip.
- Remote by PUBLISH on `sb:wakeup` (`engine.coordination.keys.WAKEUP_CHANNEL`). Each `Wakeup`
  owns two background tasks: a publisher, which coalesces a burst of `notify()` calls into at
  most one PUBLISH per `coalesce_s` (default 5 ms; a notify during the window is published
  right after it, so the last one is never dropped), and a listener, subscribed on its own
  connection, which sets the local signal when another process publishes. The payload is the
  sender's random id, so a process ignores the echo of its own publications (it already woke
  locally).
- Level-triggered. The signal stays set until a `wait()` consumes it, so a notification that
  arrives while nobody waits makes the next `wait()` return at once; every waiter blocked at
  that moment wakes (broadcast). Spurious wake-ups are possible; callers re-check the store.
- Degrades to polling. If Redis is down, `notify()` still wakes local waiters and logs the
  failed publish; `wait()` simply times out, and the caller's `timeout_s` *is* the fallback
  poll interval. The listener is supervised: when it dies (connection lost, server gone) the
  death is logged and it is restarted with exponential backoff (`restart_backoff_s`, doubled
  up to `max_restart_backoff_s`). After it resubscribes it raises the local signal once,
  because notifications sent while it was away are lost.

Pub/sub channels are server-wide (not per database): tests and deployments sharing a Redis
should pass distinct `channel` names.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import redis.asyncio as redis
from redis.asyncio.client import PubSub

from engine.coordination import keys
from engine.coordination.redis_client import COORDINATION_ERRORS

logger = logging.getLogger(__name__)


UNSUBSCRIBE_ERRORS: tuple[type[BaseException], ...] = (*COORDINATION_ERRORS, AttributeError)
"""What a failed unsubscribe raises. AttributeError: redis-py's asyncio connection raises it
('NoneType' has no 'writelines') when the pub/sub connection was closed under it."""


class Wakeup:
    """One process's end of the wake-up channel; see the module docstring.

    Build one per process and share it between the components that notify and wait, so that
    local wake-ups and coalescing cover the whole process. Call `start()` before relying on
    remote delivery and `stop()` when done, or use it as an async context manager. While not
    running (before `start()`, after `stop()`), `notify()` publishes inline (no coalescing) and
    only local notifications wake `wait()`. The client is borrowed: the caller closes it after
    `stop()`.

    Defaults: `coalesce_s` 5 ms, `read_timeout_s` 1 s (how often the listener checks for
    shutdown and lets redis-py health-check the connection), `restart_backoff_s` 0.1 s doubled up
    to `max_restart_backoff_s` 5 s, `stop_timeout_s` 2 s (how long `stop()` waits for its tasks).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        channel: str = keys.WAKEUP_CHANNEL,
        coalesce_s: float = 0.005,
        read_timeout_s: float = 1.0,
        restart_backoff_s: float = 0.1,
        max_restart_backoff_s: float = 5.0,
        stop_timeout_s: float = 2.0,
    ) -> None:
        self.channel = channel
        self.coalesce_s = coalesce_s
        self.read_timeout_s = read_timeout_s
        self.restart_backoff_s = restart_backoff_s
        self.max_restart_backoff_s = max_restart_backoff_s
        self.stop_timeout_s = stop_timeout_s
        self.published = 0
        """PUBLISH commands that reached Redis."""
        self.received = 0
        """Notifications received from other `Wakeup` instances."""
        self.echoes = 0
        """This instance's own publications seen by its listener (ignored)."""
        self.restarts = 0
        """Times a background task died and was restarted."""
        self.subscriptions = 0
        """Subscriptions confirmed by the server (more than one: the listener reconnected)."""
        self._client = client
        self._sender = uuid.uuid4().hex.encode()
        self._signal = asyncio.Event()
        self._publish_wanted = asyncio.Event()
        self._stopping = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._publish_failing = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pubsub: PubSub | None = None

    # ── public surface ──────────────────────────────────────────────────────────────────────

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._stopping.is_set()

    @property
    def subscribed(self) -> bool:
        """True while the listener holds a live subscription."""
        return self._subscribed.is_set()

    async def start(self) -> None:
        """Start the listener and the publisher. Returns at once, without waiting for Redis
        (use `wait_ready` for that); a second call is a no-op."""
        if self._tasks:
            return
        self._stopping.clear()
        self._tasks = {
            "listener": asyncio.create_task(
                self._supervise("listener", self._listen), name=f"wakeup-listener:{self.channel}"
            ),
            "publisher": asyncio.create_task(
                self._supervise("publisher", self._publish_loop),
                name=f"wakeup-publisher:{self.channel}",
            ),
        }

    async def stop(self) -> None:
        """Unsubscribe, stop both tasks and wait for them (at most about twice
        `stop_timeout_s`). Idempotent. Wakes local waiters so that none outlives it."""
        self._stopping.set()
        tasks = self._tasks
        self._tasks = {}
        if "publisher" in tasks:
            tasks["publisher"].cancel()
        if self._pubsub is not None and self._subscribed.is_set():
            # Unsubscribing, rather than cancelling a read halfway through a reply, lets the
            # listener end on the server's confirmation with a clean connection (and makes
            # fakeredis drop the subscriber, which it does not do for a closed connection).
            await self._unsubscribe(self._pubsub)
        elif "listener" in tasks:
            # Not subscribed: backing off or (re)connecting to a server that may be gone.
            # Nothing to leave cleanly, and waiting out a connect timeout would slow shutdown.
            tasks["listener"].cancel()
        if tasks:
            await self._finish(list(tasks.values()))
        self._subscribed.clear()
        self._signal.set()

    async def _unsubscribe(self, pubsub: PubSub) -> None:
        unsubscribe: Callable[..., Awaitable[object]] = pubsub.unsubscribe  # unannotated upstream
        try:
            await asyncio.wait_for(unsubscribe(self.channel), self.stop_timeout_s)
        except UNSUBSCRIBE_ERRORS as error:
            logger.debug(
                "unsubscribing from %s failed; cancelling instead: %s", self.channel, error
            )

    async def _finish(self, tasks: list[asyncio.Task[None]]) -> None:
        """Give `tasks` `stop_timeout_s` to end (the listener sees the unsubscribe or its read
        timeout), then cancel the rest and give them as long again."""
        _, running = await asyncio.wait(tasks, timeout=self.stop_timeout_s)
        for task in running:
            task.cancel()
        if running:
            _, running = await asyncio.wait(running, timeout=self.stop_timeout_s)
        for task in running:
            logger.error("wake-up task %s ignored cancellation; abandoning it", task.get_name())

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until the listener is subscribed; False on timeout."""
        try:
            await asyncio.wait_for(self._subscribed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def notify(self) -> None:
        """Tell every waiter, here and in other processes, that ready work may exist.

        Wakes local waiters immediately. While running, the PUBLISH happens on the publisher
        task (coalesced), so this returns without a round trip; otherwise it publishes inline.
        Never raises for a coordination failure.
        """
        self._signal.set()
        if self.running:
            self._publish_wanted.set()
        else:
            await self._publish()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for a notification; True if one arrived (or was pending),
        False on timeout. Consumes the pending notification."""
        if not self._signal.is_set():
            try:
                await asyncio.wait_for(self._signal.wait(), timeout_s)
            except TimeoutError:
                return False
        self._signal.clear()
        return True

    async def __aenter__(self) -> Wakeup:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # ── background work ─────────────────────────────────────────────────────────────────────

    async def _supervise(self, role: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run `body` until stopping; log its death and restart it with capped backoff."""
        backoff_s = self.restart_backoff_s
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            try:
                await body()
            except Exception as error:
                self.restarts += 1
                logger.warning(
                    "wake-up %s on %s died (%s: %s); restarting in %.2f s, polling until then",
                    role,
                    self.channel,
                    type(error).__name__,
                    error,
                    backoff_s,
                )
            else:
                continue  # body returns only once stopping is set; the loop test ends it
            # A body that ran for a while was healthy: start the backoff over.
            if loop.time() - started > self.max_restart_backoff_s:
                backoff_s = self.restart_backoff_s
            try:
                await asyncio.wait_for(self._stopping.wait(), backoff_s)
            except TimeoutError:
                backoff_s = min(backoff_s * 2, self.max_restart_backoff_s)

    async def _listen(self) -> None:
        pubsub = self._client.pubsub()
        self._pubsub = pubsub
        try:
            # SUBSCRIBE is only written here; the server's confirmation arrives as a message,
            # and only then is a PUBLISH from elsewhere guaranteed to reach us (`_on_message`).
            await pubsub.subscribe(self.channel)
            while not self._stopping.is_set():
                message = await pubsub.get_message(timeout=self.read_timeout_s)
                if message is not None:
                    self._on_message(message)
        finally:
            self._pubsub = None
            self._subscribed.clear()
            # redis-py leaves PubSub.aclose unannotated; bind it to a typed name to call it.
            close: Callable[[], Awaitable[None]] = pubsub.aclose
            try:
                await close()
            except COORDINATION_ERRORS as error:
                logger.debug("closing the wake-up subscription failed: %s", error)

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            if self.subscriptions:
                # A resubscription, by redis-py's reconnect or by our restart: whatever was
                # published while we were away is lost, so tell waiters to look now.
                self._signal.set()
            self.subscriptions += 1
            self._subscribed.set()
            return
        if kind != "message":
            return
        if message.get("data") == self._sender:
            self.echoes += 1
            return
        self.received += 1
        self._signal.set()

    async def _publish_loop(self) -> None:
        while not self._stopping.is_set():
            await self._publish_wanted.wait()
            self._publish_wanted.clear()
            await self._publish()
            # Coalescing window: notify() calls landing now set `_publish_wanted` again and
            # are covered by one PUBLISH right after it.
            await asyncio.sleep(self.coalesce_s)

    async def _publish(self) -> None:
        try:
            await self._client.publish(self.channel, self._sender)
        except COORDINATION_ERRORS as error:
            if not self._publish_failing:
                logger.warning(
                    "wake-up publish on %s failed; other processes fall back to polling: %s",
                    self.channel,
                    error,
                )
            self._publish_failing = True
            return
        if self._publish_failing:
            logger.info("wake-up publish on %s works again", self.channel)
        self._publish_failing = False
        self.published += 1
