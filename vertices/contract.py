"""The contract between the engine and a vertex implementation.

The engine claims a step, builds a `StepContext` and calls the vertex. A vertex returns a
`VertexOutcome` (its decision) or raises `schemas.errors.StepFailure`; any other exception is
recorded by the engine as an `internal_error`. Vertices never touch the store: the engine turns
the decision into a `StepResult` (`engine.store.records`) and records that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from schemas.redaction import Redactor
from schemas.waiting import WaitReason


class TimeoutTier(StrEnum):
    """Which default timeout a GATEWAY call gets (docs/architecture.md, 'Timeout tiers')."""

    COLLECT = "collect"
    """A run that feeds a spawner: 60 s."""
    PROCESS = "process"
    """A child run started by a spawner, or any other run: 30 s."""
    GATEWAY = "gateway"
    """A run submitted with a synchronous REST wait: 15 s."""


LogFn = Callable[[str, str, dict[str, Any]], Awaitable[None]]
"""`await log(level, message, data)` appends a line to the run's log."""


async def _discard_log(level: str, message: str, data: dict[str, Any]) -> None:
    return None


RetryWaitFn = Callable[[float, str], Awaitable[None]]
"""`await retry_wait(wait_s, message)` says the step now sleeps `wait_s` before its next
in-process attempt, for `message`'s reason; the engine may record it (the wait goes on either
way)."""


async def _ignore_retry_wait(wait_s: float, message: str) -> None:
    return None


class StopSignal(Protocol):
    """The engine's word that a step must send nothing more: its claim is gone (its run was
    cancelled, or its lease lost). A vertex checks `reason` before each HTTP attempt and waits
    inside `interruptible()` (docs/architecture.md, 'Cancelling a run')."""

    @property
    def reason(self) -> str | None:
        """Why the step must stop ("its run was cancelled"); None while it may go on."""
        ...

    def interruptible(self) -> AbstractContextManager[None]:
        """A wait that a stop ends: the stop cancels the awaiting task, and the block raises
        `StepStopped` instead (a cancellation from elsewhere passes through). No task is
        created: entering and leaving cost two assignments."""
        ...


class StepStopped(Exception):
    """Raised by a vertex that stopped at its `StopSignal`; the message says what was not
    done ("attempt 3/4 not sent"). The engine records nothing but the step's log lines."""


@dataclass(frozen=True)
class StepContext:
    """Everything a vertex may know about the step it executes."""

    run_id: str
    vertex_id: str
    tenant_id: str
    attempt: int
    """1 for the first execution of this step; bumps on every redispatch or retry."""
    context: dict[str, Any]
    """The expression context `{input, vertices, run, item?, index?}`, and `secrets` (the
    values the vertex references) in a GATEWAY step that uses any."""
    timeout_tier: TimeoutTier = TimeoutTier.PROCESS
    idempotency_key: str = ""
    """Stable across attempts of this step: derived from run id and vertex id."""
    log: LogFn = field(default=_discard_log)
    retry_wait: RetryWaitFn = field(default=_ignore_retry_wait)
    """Called by a GATEWAY step before it sleeps between attempts, after logging the attempt."""
    redactor: Redactor = field(default_factory=Redactor)
    """Values the step must not record: its secrets, and what the vertex adds (a URL's
    password). The engine redacts everything the step records with it; a vertex uses it
    where it cuts text (a body excerpt), so no value is left cut in half."""
    stop: StopSignal | None = None
    """Set by the engine when the step must send nothing more (None: it never stops)."""
    worker: str | None = None
    """The service id of the worker executing the step (None: one that runs as no service),
    which a GATEWAY records on each attempt's log line: the step's `claimed_by` is cleared
    when it ends, and which host made a failed call is an operator's first question."""


@dataclass(frozen=True)
class Succeeded:
    """The step is done with `output`."""

    output: Any


@dataclass(frozen=True)
class Parked:
    """The step cannot proceed yet; the engine sets `not_before = now + delay_s` and records
    why (`code`, with `reason` as its message) so every front door can say it."""

    delay_s: float
    reason: str
    code: WaitReason


@dataclass(frozen=True)
class AwaitingChildren:
    """A spawner created its `total` children; the step now waits for them to end."""

    total: int


VertexOutcome = Succeeded | Parked | AwaitingChildren
"""What a vertex decided about its step (a failure is raised as `StepFailure` instead)."""
