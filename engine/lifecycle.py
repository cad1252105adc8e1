"""Graceful shutdown plumbing: signal handling and a supervisor for a service's tasks.

A service's main coroutine looks like this (docs/architecture.md, 'Graceful shutdown'):

    life = ServiceLifecycle()
    with life, HealthMarker(service, settings.health_dir) as marker:
        life.on_stop(marker.remove)                 # 1. first thing on SIGTERM
        supervisor = life.supervisor()
        supervisor.start("heartbeat", heartbeat.run(life.stop_event))
        supervisor.start("worker", worker.run(life.stop_event))
        await life.wait()
        await heartbeat.stop()                      # 2. stop the heartbeat
        await supervisor.shutdown(settings.shutdown_grace_s, force=life.force_event)  # 3. drain
    await close_redis(client)                       # 4. close Redis and the database
    return 0                                        # 5. exit 0

Signals: the first SIGINT/SIGTERM sets `stop_event` (and runs the `on_stop` callbacks); the
tasks see it and finish their in-flight work. A second signal sets `force_event`, which makes
`Supervisor.shutdown` stop waiting and cancel what is left, and restores the default signal
dispositions, so a third signal kills the process the ordinary way (a wedged shutdown can
always be interrupted). Queued work is untouched: it stays in the store for the next start.

`Supervisor` owns named tasks (docs/architecture.md, 'Supervised tasks'): it logs a task's
unexpected death and requests a stop, so one crashed loop takes the service down cleanly
instead of leaving it half-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class TaskFailure:
    """A supervised task that ended with an exception."""

    name: str
    error: BaseException


@dataclass(frozen=True)
class ShutdownReport:
    """What `Supervisor.shutdown` did, by task name."""

    finished: tuple[str, ...]
    """Tasks running when the shutdown began that ended on their own within the grace period
    (failed ones included)."""
    cancelled: tuple[str, ...]
    """Tasks still running after the grace period (or when forced), then cancelled."""
    stuck: tuple[str, ...]
    """Cancelled tasks that still had not ended after `cancel_timeout_s`; abandoned."""
    failures: tuple[TaskFailure, ...] = field(default=())
    """Every task that ever ended with an exception under this supervisor."""


class Supervisor:
    """Owns named asyncio tasks: start them, notice their death, shut them down in bounds.

    A task that raises is logged with its traceback, recorded in `failures`, and, unless a
    shutdown is already under way, triggers `on_death(reason)` (default: set `stop`). A task
    that returns normally is simply forgotten. Names are unique among live tasks.
    """

    def __init__(
        self,
        stop: asyncio.Event | None = None,
        *,
        on_death: Callable[[str], None] | None = None,
        cancel_timeout_s: float = 5.0,
    ) -> None:
        self.stop = stop if stop is not None else asyncio.Event()
        """Set when the service should stop; tasks are expected to watch it."""
        self.cancel_timeout_s = cancel_timeout_s
        """How long `shutdown` waits for cancelled tasks to end. Default 5 s."""
        self.failures: list[TaskFailure] = []
        self._on_death = on_death
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._closing = False

    @property
    def names(self) -> list[str]:
        """Names of the tasks still running."""
        return sorted(self._tasks)

    def start(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` as the task `name`. Raises ValueError if a live task has that name and
        RuntimeError once `shutdown` has begun (the coroutine is closed, never awaited)."""
        if self._closing or name in self._tasks:
            coro.close()
            if self._closing:
                raise RuntimeError(f"cannot start task {name!r}: the supervisor is shutting down")
            raise ValueError(f"a task named {name!r} is already running")
        task = asyncio.create_task(coro, name=name)
        self._tasks[name] = task
        task.add_done_callback(self._on_done)
        return task

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        name = task.get_name()
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if task.cancelled():
            logger.debug("task %s cancelled", name)
            return
        error = task.exception()  # also marks the exception retrieved
        if error is None:
            logger.debug("task %s finished", name)
            return
        self.failures.append(TaskFailure(name, error))
        if self._closing:
            logger.error("task %s failed while shutting down", name, exc_info=error)
            return
        logger.error("task %s died unexpectedly; stopping the service", name, exc_info=error)
        reason = f"task {name} died: {type(error).__name__}: {error}"
        if self._on_death is not None:
            self._on_death(reason)
        else:
            self.stop.set()

    async def shutdown(
        self, grace_s: float, *, force: asyncio.Event | None = None
    ) -> ShutdownReport:
        """Stop every task within bounds and report what happened.

        Sets `stop`, waits up to `grace_s` for the tasks to end on their own (less if `force`
        gets set), then cancels the rest and waits up to `cancel_timeout_s` for them. No new
        task may start afterwards. Returns at most `grace_s + cancel_timeout_s` later.
        """
        self._closing = True
        self.stop.set()
        pending = set(self._tasks.values())
        finished = await self._wait_within(pending, grace_s, force)
        pending -= finished
        for task in pending:
            task.cancel()
        stuck: set[asyncio.Task[Any]] = set()
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=self.cancel_timeout_s)
        for task in stuck:
            logger.error("task %s ignored cancellation; abandoning it", task.get_name())
        return ShutdownReport(
            finished=_names(finished),
            cancelled=_names(pending),
            stuck=_names(stuck),
            failures=tuple(self.failures),
        )

    @staticmethod
    async def _wait_within(
        tasks: set[asyncio.Task[Any]], grace_s: float, force: asyncio.Event | None
    ) -> set[asyncio.Task[Any]]:
        """The tasks that end within `grace_s`, stopping early once `force` is set."""
        if not tasks or grace_s <= 0 or (force is not None and force.is_set()):
            return {task for task in tasks if task.done()}
        # The supervisor's own helper, cancelled below; it only turns the event into a future.
        forced = asyncio.ensure_future(force.wait()) if force is not None else None
        extra: set[asyncio.Future[Any]] = {forced} if forced is not None else set()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace_s
            # Bounded by the deadline: each pass waits for the next task to end or for force.
            while (remaining := deadline - loop.time()) > 0:
                running = {task for task in tasks if not task.done()}
                if not running or (forced is not None and forced.done()):
                    break
                await asyncio.wait(
                    running | extra, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            if forced is not None:
                forced.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await forced
        return {task for task in tasks if task.done()}


def _names(tasks: set[asyncio.Task[Any]]) -> tuple[str, ...]:
    return tuple(sorted(task.get_name() for task in tasks))


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
        """The installed handler: first signal stops, second forces a fast exit."""
        self.signals_received += 1
        if self.signals_received == 1:
            self.request_stop(f"received {sig.name}")
            return
        if not self.forced:
            logger.warning("received %s again: cancelling in-flight work now", sig.name)
            self.force_event.set()
            self.request_stop(f"received {sig.name} twice")
            # From now on the default dispositions apply: a third signal is not ignored.
            self.uninstall()

    def supervisor(self, *, cancel_timeout_s: float = 5.0) -> Supervisor:
        """A supervisor whose task deaths request a stop of this service."""
        return Supervisor(
            self.stop_event, on_death=self.request_stop, cancel_timeout_s=cancel_timeout_s
        )

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
