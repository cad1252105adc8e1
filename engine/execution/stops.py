"""Stopping the steps a worker holds whose claims are gone (docs/architecture.md, 'Cancelling a
run').

A cancel clears the claims of its runs' steps in the store; a worker holding one of them learns
it two ways and stops the step before its next HTTP attempt (`vertices.contract.StopSignal`):

* the cancellation is announced (`engine.coordination.cancellations`): the worker's listener
  stops its steps whose run or parent run is named, at once; a step whose claim was under way
  as the announcement arrived is stopped as it starts (`Stops.start` asks `heard_since`);
* its lease renewal renews fewer claims than it holds: the worker asks the store which claims
  are gone (`Store.lost_claims`, a read only then) and stops those steps — the safety net when
  Redis is down or a message was lost.

Everything here is in memory; a stop costs a dict lookup per step held.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol

from engine.store.records import ClaimedStep
from vertices.contract import StepStopped

CANCELLED = "its run was cancelled"
CLAIM_LOST = "its claim was lost (its lease expired; another worker may run it)"
RUN_FAILED = "its run failed"
"""Another step of the run failed it. Unlike a cancel, the claim is still the step's: an
outcome it already has is recorded, and a step stopped before its next attempt is given back
held (PENDING), so the operator's retry of the run runs it again."""
CLAIM_KEPT = frozenset({RUN_FAILED})
"""Stop reasons under which the step still holds its claim."""
FAILED_REMEMBERED = 10_000
"""Failed run ids a worker remembers, for steps whose claim was under way as it heard."""


class CancelledRuns(Protocol):
    """What a worker needs of `engine.coordination.cancellations.Cancellations`."""

    def heard_since(self, run_ids: Iterable[str | None], since: float) -> bool: ...


class StepStop:
    """One step's `StopSignal`: set once, with the first reason given. A stop while the step
    waits inside `interruptible()` cancels its task; the block turns that cancellation into
    `StepStopped`. No task or event per step: an attempt pays two assignments a wait."""

    def __init__(self) -> None:
        self._reason: str | None = None
        self._waiting: asyncio.Task[Any] | None = None
        """The step's task while it waits inside `interruptible()`."""
        self._interrupting = False
        """This stop cancelled `_waiting` (rather than a shutdown)."""

    @property
    def reason(self) -> str | None:
        return self._reason

    def stop(self, reason: str) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        # Not the step's own task (a stop from inside its wait): it sees `reason` on its way.
        if self._waiting is not None and self._waiting is not asyncio.current_task():
            self._interrupting = True
            self._waiting.cancel()

    def interruptible(self) -> StepStop:
        """Itself: a context manager by hand, not `contextlib`'s generator (a third of the
        cost, on every wait of every attempt)."""
        return self

    def __enter__(self) -> None:
        self._waiting = asyncio.current_task()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        task, self._waiting = self._waiting, None
        if not self._interrupting or task is None:
            return
        self._interrupting = False
        remaining = task.uncancel()
        if kind is asyncio.CancelledError and remaining == 0:
            raise StepStopped("") from None
        # Otherwise the waited-on code swallowed the cancellation (the request is taken back
        # above, so it does not hit a later await; the caller sees `reason` set), or the task
        # is cancelled from elsewhere too (the worker stopping), which goes on.


class Stops:
    """The stop signals of the steps one worker holds, by claim token."""

    def __init__(self, cancelled: CancelledRuns | None) -> None:
        self._cancelled = cancelled
        self._held: dict[str, tuple[ClaimedStep, StepStop]] = {}
        self._failed: OrderedDict[str, float] = OrderedDict()
        """Run id → when this worker heard it failed (monotonic), oldest first."""
        self.stopped = 0
        """Steps stopped (each once)."""

    @staticmethod
    def now() -> float:
        """The clock of `start(claimed_since=…)`: read it before claiming."""
        return time.monotonic()

    def start(self, step: ClaimedStep, *, claimed_since: float) -> StepStop:
        """The stop signal of a step just claimed (the claim began at `claimed_since`),
        already set when its run was announced cancelled since then."""
        signal = StepStop()
        self._held[step.claim_token] = (step, signal)
        runs = (step.run_id, step.parent_run_id)
        if self._cancelled is not None and self._cancelled.heard_since(runs, claimed_since):
            self._stop(signal, CANCELLED)
        elif self._failed.get(step.run_id, -1.0) >= claimed_since:
            self._stop(signal, RUN_FAILED)
        return signal

    def signal(self, claim_token: str) -> StepStop | None:
        """The stop signal of a step held (None: not held)."""
        held = self._held.get(claim_token)
        return held[1] if held is not None else None

    def end(self, claim_token: str) -> None:
        """The step's result is recorded (or dropped): nothing more to stop."""
        self._held.pop(claim_token, None)

    def runs_cancelled(self, run_ids: frozenset[str]) -> None:
        """Stop the steps of these runs, and the children of these runs (a listener of
        `Cancellations`)."""
        for step, signal in self._held.values():
            if step.run_id in run_ids or step.parent_run_id in run_ids:
                self._stop(signal, CANCELLED)

    def runs_failed(self, run_ids: frozenset[str]) -> None:
        """Stop the steps of these runs, which another step failed (a listener of
        `Cancellations`' failed runs). Not their children: a child run is a run of its own,
        which goes on (it counts in its parent's join, reopened by a retry)."""
        now = time.monotonic()
        for run_id in run_ids:
            self._failed[run_id] = now
            self._failed.move_to_end(run_id)
        while len(self._failed) > FAILED_REMEMBERED:
            self._failed.popitem(last=False)
        for step, signal in self._held.values():
            if step.run_id in run_ids:
                self._stop(signal, RUN_FAILED)

    def claims_lost(self, lost: dict[str, bool]) -> None:
        """Stop the steps whose claims are gone (token → whether the step was cancelled)."""
        for token, cancelled in lost.items():
            held = self._held.get(token)
            if held is not None:
                self._stop(held[1], CANCELLED if cancelled else CLAIM_LOST)

    def _stop(self, signal: StepStop, reason: str) -> None:
        if signal.reason is None:
            self.stopped += 1
        signal.stop(reason)
