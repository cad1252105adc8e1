"""Graceful shutdown plumbing: SIGINT/SIGTERM handling for one service process.

`schemabridge worker` and `serve` (api/cli/services.py) install a `ServiceLifecycle` and hand
its `stop_event` to `engine.runtime.run_service`, which runs the worker, its heartbeat and its
health marker under one `asyncio.TaskGroup` (`api`, `serve` and a worker's health port also
hand it to `api.rest.ApiServer.serve`, which drains the HTTP server on it):

    lifecycle = ServiceLifecycle()
    with lifecycle:
        runtime = await Runtime.open(settings)
        try:
            await run_service(runtime, name, lifecycle.stop_event)
        finally:
            await runtime.close()                   # closes Redis and the database

The first SIGINT/SIGTERM sets `stop_event` (and runs the `on_stop` callbacks). `run_service`
then removes the health marker and stops the heartbeat first, while the worker stops claiming,
lets its in-flight steps finish within `shutdown_grace_s` and records their results; the command
exits 0. Steps still running at the deadline are cancelled and keep their claims: their leases
expire and another worker (or the next start) runs them again. Queued work is untouched: it
stays in the store.

A second signal sets `force_event` and restores the default dispositions, so a third signal
kills the process the ordinary way (a wedged shutdown can always be interrupted). The worker's
drain does not watch `force_event`; its grace period bounds it on its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class ServiceLifecycle:
    """SIGINT/SIGTERM handling for one service process; see the module docstring.

    `install()` (or `with lifecycle:`) must run inside the event loop, in the main thread;
    `uninstall()` restores the default dispositions. `stop_event` is set by the first signal or
    by `request_stop`; `force_event` by the second signal.
    """

    def __init__(self, *, signals: tuple[signal.Signals, ...] = DEFAULT_SIGNALS) -> None:
        self.signals = signals
        self.stop_event = asyncio.Event()
        self.force_event = asyncio.Event()
        self.reason: str | None = None
        """Why the stop was requested (first request wins)."""
        self.signals_received = 0
        self._callbacks: list[Callable[[], object]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    @property
    def forced(self) -> bool:
        return self.force_event.is_set()

    def install(self) -> None:
        """Handle `signals` on the running loop. Idempotent."""
        if self._loop is not None:
            return
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            loop.add_signal_handler(sig, self.handle_signal, sig)
        self._loop = loop

    def uninstall(self) -> None:
        """Restore the default handlers (SIGINT raises KeyboardInterrupt, SIGTERM terminates)."""
        if self._loop is None:
            return
        for sig in self.signals:
            self._loop.remove_signal_handler(sig)
        self._loop = None

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Run `callback` (synchronously, once) when the stop is requested; at once if it
        already was. Exceptions are logged, not raised: shutdown must go on."""
        self._callbacks.append(callback)
        if self.stopping:
            self._run_callback(callback)

    def request_stop(self, reason: str) -> None:
        """Begin a graceful stop. Later requests are ignored (the first reason is kept)."""
        if self.stopping:
            logger.debug("stop already requested (%s); ignoring: %s", self.reason, reason)
            return
        self.reason = reason
        logger.info("stopping: %s", reason)
        self.stop_event.set()
        for callback in self._callbacks:
            self._run_callback(callback)

    def handle_signal(self, sig: signal.Signals) -> None:
        """The installed handler: the first signal stops; the second sets `force_event` and
        gives the signals back to their default handling, so a third ends the process at once.
        The second does not shorten the drain, and its line says so."""
        self.signals_received += 1
        if self.signals_received == 1:
            self.request_stop(f"received {sig.name}")
            return
        if not self.forced:
            # The drain is bounded by the grace period alone (docs/architecture.md, 'Graceful
            # shutdown'): the line says so, and what ends it sooner.
            logger.warning(
                "received %s again: in-flight work still has the rest of the grace period "
                "(SCHEMABRIDGE_SHUTDOWN_GRACE_S) to finish; a third signal ends the process "
                "at once, without giving its claims back",
                sig.name,
            )
            self.force_event.set()
            self.request_stop(f"received {sig.name} twice")
            # From now on the default dispositions apply: a third signal is not ignored.
            self.uninstall()

    async def wait(self) -> None:
        """Return once a stop has been requested."""
        await self.stop_event.wait()

    def _run_callback(self, callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception:
            logger.exception("stop callback %r failed; continuing the shutdown", callback)

    def __enter__(self) -> ServiceLifecycle:
        self.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.uninstall()
