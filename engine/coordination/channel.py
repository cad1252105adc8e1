"""The machinery of a hint channel over Redis pub/sub, shared by wake-ups and run events.

A hint says "look now" to other processes; the store stays the source of truth, so a lost hint
costs latency, never work. `PubSubChannel` owns two supervised background tasks:

- a publisher, which coalesces a burst of hints into at most one PUBLISH per `coalesce_s` (a
  hint during the window is published right after it, so the last one is never dropped);
- a listener, subscribed on its own connection, which hands other processes' messages to the
  subclass. A message is the sender's random id, then (when there is one) a newline and a
  body; a process ignores the echo of its own messages (it told its local waiters already).

When a task dies (connection lost, server gone) it is restarted with exponential backoff
(`restart_backoff_s`, doubled up to `max_restart_backoff_s`). After the listener resubscribes
the subclass is told (`_resubscribed`): messages sent while it was away are lost. While not
running (before `start()`, after `stop()`) a hint is published inline.

An outage of the listener is logged twice, whatever its length: one warning when the
subscription is lost (the restarts that fail while Redis stays away log at debug level), and
one info line, "listening again … after N s", once it is subscribed again. A connection that
redis-py repairs in place (a killed connection, Redis still up) is not seen until the
resubscription confirms, so both lines come then.

Pub/sub channels are server-wide (not per database): tests and deployments sharing a Redis
should pass distinct `channel` names.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

import redis.asyncio as redis
from redis.asyncio.client import PubSub

from engine.coordination import keys
from engine.coordination.redis_client import COORDINATION_ERRORS


class Signal:
    """A level-triggered hint: once set, it stays set until a `wait()` consumes it, and every
    waiter blocked at that moment wakes."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s`; True if the signal was set (now or before), False on
        timeout. Consumes it."""
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), timeout_s)
            except TimeoutError:
                return False
        self._event.clear()
        return True


class ChannelOptions(TypedDict, total=False):
    """Where and how a `PubSubChannel` talks (defaults in its docstring)."""

    channel: str
    coalesce_s: float
    read_timeout_s: float
    restart_backoff_s: float
    max_restart_backoff_s: float
    stop_timeout_s: float


UNSUBSCRIBE_ERRORS: tuple[type[BaseException], ...] = (*COORDINATION_ERRORS, AttributeError)
"""What a failed unsubscribe raises. AttributeError: redis-py's asyncio connection raises it
('NoneType' has no 'writelines') when the pub/sub connection was closed under it."""


class PubSubChannel:
    """One process's end of a hint channel; see the module docstring. Subclasses say what a
    message carries (`_body`) and what receiving one means (`_received`, `_resubscribed`,
    `_stopped`), and call `_hint()` when they have something to publish.

    Options (`ChannelOptions`), with their defaults: `channel` (the class's `default_channel`
    in the client's Redis database, `keys.database_channel`),
    `coalesce_s` (the class's `default_coalesce_s`, 5 ms), `read_timeout_s` 1 s (how often the
    listener checks for shutdown and lets redis-py health-check the connection),
    `restart_backoff_s` 0.1 s doubled up to `max_restart_backoff_s` 5 s, `stop_timeout_s` 2 s
    (how long `stop()` waits for its tasks). The client is borrowed: the caller closes it after
    `stop()`.
    """

    what = "hint"
    """What the channel carries, in log lines (a subclass logs under its own module's name)."""
    default_channel = "sb:hints"
    """The channel when `options` name none."""
    default_coalesce_s = 0.005

    def __init__(self, client: redis.Redis, **options: Unpack[ChannelOptions]) -> None:
        self.channel = options.get("channel") or keys.database_channel(self.default_channel, client)
        self.coalesce_s = options.get("coalesce_s", self.default_coalesce_s)
        self.read_timeout_s = options.get("read_timeout_s", 1.0)
        self.restart_backoff_s = options.get("restart_backoff_s", 0.1)
        self.max_restart_backoff_s = options.get("max_restart_backoff_s", 5.0)
        self.stop_timeout_s = options.get("stop_timeout_s", 2.0)
        self.published = 0
        """PUBLISH commands that reached Redis."""
        self.received = 0
        """Messages received from other instances."""
        self.echoes = 0
        """This instance's own publications seen by its listener (ignored)."""
        self.restarts = 0
        """Times a background task died and was restarted."""
        self.subscriptions = 0
        """Subscriptions confirmed by the server (more than one: the listener reconnected)."""
        self._client = client
        self._sender = uuid.uuid4().hex.encode()
        self._publish_wanted = asyncio.Event()
        self._stopping = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._listener_lost_at: float | None = None
        """When the listener lost its subscription (loop time), until it has one again."""
        self._publish_failing = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pubsub: PubSub | None = None
        self._logger = logging.getLogger(type(self).__module__)

    # ── what subclasses define ──────────────────────────────────────────────────────────────

    def _body(self) -> bytes:
        """What to publish now (called just before each PUBLISH; may consume pending state)."""
        return b""

    def _received(self, body: bytes) -> None:
        """Another process published `body`."""

    def _resubscribed(self) -> None:
        """The listener subscribed again: whatever was published meanwhile is lost."""

    def _stopped(self) -> None:
        """`stop()` is done: wake whoever waits, so that nobody outlives it."""

    # ── public surface ──────────────────────────────────────────────────────────────────────

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._stopping.is_set()

    @property
    def subscribed(self) -> bool:
        """True while the listener holds a live subscription."""
        return self._subscribed.is_set()

    listens_at_start = True
    """False: the listener starts on the first `_listen_now()` (a process that only publishes,
    like a worker for run events, never pays for reading the channel)."""

    async def start(self) -> None:
        """Start the publisher and (unless `listens_at_start` is False) the listener. Returns
        at once, without waiting for Redis (use `wait_ready` for that); a second call is a
        no-op."""
        if self._tasks:
            return
        self._stopping.clear()
        self._tasks = {
            "publisher": asyncio.create_task(
                self._supervise("publisher", self._publish_loop),
                name=f"{self.what}-publisher:{self.channel}",
            ),
        }
        if self.listens_at_start:
            self._listen_now()

    def listen(self) -> None:
        """Read the channel from now on, whatever `listens_at_start` says: for a process
        that is about to wait on it (a worker, before its first claim)."""
        self._listen_now()

    def _listen_now(self) -> None:
        """Start the listener, if running and not listening yet."""
        if self._tasks and not self._stopping.is_set() and "listener" not in self._tasks:
            self._tasks["listener"] = asyncio.create_task(
                self._supervise("listener", self._listen),
                name=f"{self.what}-listener:{self.channel}",
            )

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
        self._stopped()

    async def _unsubscribe(self, pubsub: PubSub) -> None:
        unsubscribe: Callable[..., Awaitable[object]] = pubsub.unsubscribe  # unannotated upstream
        try:
            await asyncio.wait_for(unsubscribe(self.channel), self.stop_timeout_s)
        except UNSUBSCRIBE_ERRORS as error:
            self._logger.debug(
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
            self._logger.error("task %s ignored cancellation; abandoning it", task.get_name())

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until the listener is subscribed; False on timeout."""
        try:
            await asyncio.wait_for(self._subscribed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _hint(self) -> None:
        """Publish `_body()`: on the publisher task (coalesced) while running, else inline."""
        if self.running:
            self._publish_wanted.set()
        else:
            await self._publish()

    async def __aenter__(self) -> Self:
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
                self._died(role, error, backoff_s)
            else:
                continue  # body returns only once stopping is set; the loop test ends it
            # A body that ran for a while was healthy: start the backoff over.
            if loop.time() - started > self.max_restart_backoff_s:
                backoff_s = self.restart_backoff_s
            try:
                await asyncio.wait_for(self._stopping.wait(), backoff_s)
            except TimeoutError:
                backoff_s = min(backoff_s * 2, self.max_restart_backoff_s)

    def _died(self, role: str, error: Exception, backoff_s: float) -> None:
        """Log a task's death: a warning, except for the listener's further deaths in an
        outage already told (one warning an outage, not one a retry). The error itself is
        among the record's arguments, so a process's outage filter (`api.cli.log_setup`) sees
        a Redis outage in it and makes it part of that outage's one line: each channel's
        listener (wake-ups, cancellations, run events, row changes) dies of the same outage."""
        text = f"{type(error).__name__}: {error}"
        if role == "listener":
            if self._listener_lost_at is not None:
                self._logger.debug(
                    "%s listener on %s still cannot subscribe (%s); next try in %.2f s",
                    self.what,
                    self.channel,
                    text,
                    backoff_s,
                )
                return
            self._listener_lost_at = asyncio.get_running_loop().time()
        self._logger.warning(
            "%s %s on %s died (%s: %s); restarting in %.2f s, polling until then",
            self.what,
            role,
            self.channel,
            type(error).__name__,
            error,
            backoff_s,
        )

    def _listening_again(self) -> None:
        """The listener subscribed again (or at last, when Redis was away at `start()`): say
        so once, closing the outage its warning opened. A connection redis-py repaired in
        place was not seen going: warn of it now."""
        now = asyncio.get_running_loop().time()
        if self._listener_lost_at is None:
            self._logger.warning(
                "%s listener on %s lost its connection to Redis (reconnected in place)",
                self.what,
                self.channel,
            )
            self._listener_lost_at = now
        self._logger.info(
            "%s listener on %s listening again after %.1f s; what was published meanwhile is "
            "lost, so waiters look now",
            self.what,
            self.channel,
            now - self._listener_lost_at,
        )
        self._listener_lost_at = None

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
                self._logger.debug("closing the subscription to %s failed: %s", self.channel, error)

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            if self.subscriptions or self._listener_lost_at is not None:
                self._listening_again()
            if self.subscriptions:
                # A resubscription, by redis-py's reconnect or by our restart: whatever was
                # published while we were away is lost, so tell waiters to look now.
                self._resubscribed()
            self.subscriptions += 1
            self._subscribed.set()
            return
        data = message.get("data")
        if kind != "message" or not isinstance(data, bytes):
            return
        sender, _, body = data.partition(b"\n")
        if sender == self._sender:
            self.echoes += 1
            return
        self.received += 1
        self._received(body)

    async def _publish_loop(self) -> None:
        while not self._stopping.is_set():
            await self._publish_wanted.wait()
            self._publish_wanted.clear()
            await self._publish()
            # Coalescing window: notify() calls landing now set `_publish_wanted` again and
            # are covered by one PUBLISH right after it.
            await asyncio.sleep(self.coalesce_s)

    async def _publish(self, body: bytes | None = None) -> bool:
        """PUBLISH `body` (default: `_body()`); False when Redis could not be reached."""
        if body is None:
            body = self._body()
        message = self._sender + b"\n" + body if body else self._sender
        try:
            await self._client.publish(self.channel, message)
        except COORDINATION_ERRORS as error:
            if not self._publish_failing:
                self._logger.warning(
                    "%s publish on %s failed; other processes fall back to polling: %s",
                    self.what,
                    self.channel,
                    error,
                )
            self._publish_failing = True
            return False
        if self._publish_failing:
            self._logger.info("%s publish on %s works again", self.what, self.channel)
        self._publish_failing = False
        self.published += 1
        return True
