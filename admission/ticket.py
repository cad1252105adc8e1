"""The token of one admitted call, settled exactly once (concurrency-limits' `Listener`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import StrEnum
from types import TracebackType
from typing import Any

from admission.breaker import scoped_tenant
from schemas.errors import SchemaBridgeError


class CallOutcome(StrEnum):
    """How an admitted call ended, as admission sees it. The values are also what the
    exchange script receives for a settlement (`admission.backend.SettleOp.outcome`)."""

    SUCCESS = "success"
    """The destination answered as expected: AIMD may grow; breakers count a success."""
    OVERLOAD = "overload"
    """503 or a timeout: AIMD cuts (once per window); breakers count a failure."""
    THROTTLED = "throttled"
    """429: the destination is healthy but at capacity. AIMD cuts (once per window); the
    breakers count nothing (a busy destination must not be shut off for a reset period);
    the retry budget counts it as a failure."""
    FAILURE = "failure"
    """Any other failure of the destination: breakers count a failure; no AIMD cut."""
    IGNORE = "ignore"
    """Says nothing about the destination (e.g. cancelled before sending): only the slot and
    any probe permit are given back."""


class TicketAlreadySettled(SchemaBridgeError, RuntimeError):
    """A ticket was settled twice; the first outcome stands."""

    code = "ticket_already_settled"


SettleFn = Callable[["Ticket", CallOutcome, float, str], Awaitable[None]]
RenewFn = Callable[["Ticket", float], Awaitable[bool]]


class Ticket:
    """Holds one slot (a lease) on a destination until settled.

    Settle it exactly once with `success()`, `overload()`, `failure()` or `ignore()`; that
    releases the slot, gives back probe permits and records the outcome atomically. A second
    settlement raises `TicketAlreadySettled`. The settlement write is shielded from
    cancellation, so a cancelled step still gives its slot back.

    Used as `async with`, a ticket left unsettled is settled on exit: `ignore()` after a
    clean exit or a cancellation, `failure()` after any other exception. Timeouts should be
    settled explicitly as `overload()` (the ticket cannot tell a timeout from a bug).

    The slot is a lease of `lease_s` seconds: a call that may outlive it calls `renew()`;
    if the worker dies, the lease expires and the slot returns to the pool.
    """

    def __init__(
        self,
        *,
        destination: str,
        tenant_id: str,
        token: str,
        epoch: int,
        lease_s: float,
        probe: bool,
        settle: SettleFn,
        renew: RenewFn,
        handovers: int = 0,
        lease_until: float = float("inf"),
        breaker_scope: str = "",
    ) -> None:
        self.destination = destination
        self.tenant_id = tenant_id
        self.breaker_scope = breaker_scope
        """A deployment candidate's calls (`AdmitOp.breaker_scope`); "" for the others."""
        self.breaker_tenant = scoped_tenant(tenant_id, breaker_scope)
        """The id of the tenant breaker layer the call went through."""
        self.token = token
        """Unique id of the slot lease (also the probe permit's id)."""
        self.epoch = epoch
        """AIMD cut epoch at acquisition (decides whether an overload may cut)."""
        self.lease_s = lease_s
        self.probe = probe
        """Whether this call is a half-open breaker probe (in either layer)."""
        self.lease_until = lease_until
        """When the slot lease ends (the admission clock's time), unless renewed."""
        self.handovers = handovers
        """How many times in a row this slot was handed from a finished call to a waiting one
        in this process without going back through Redis (see `admission.handover`)."""
        self.recorded: asyncio.Future[Any] | None = None
        """A slot handed over in this process: its record in Redis, on its way until this is
        done (None for a slot Redis granted). Renewing it before would find no lease."""
        self._settle_fn = settle
        self._renew_fn = renew
        self._outcome: CallOutcome | None = None

    @property
    def outcome(self) -> CallOutcome | None:
        """The outcome it was settled with, or None while it is still held."""
        return self._outcome

    async def success(self) -> None:
        await self.settle(CallOutcome.SUCCESS)

    async def overload(self) -> None:
        await self.settle(CallOutcome.OVERLOAD)

    async def failure(self) -> None:
        await self.settle(CallOutcome.FAILURE)

    async def ignore(self) -> None:
        await self.settle(CallOutcome.IGNORE)

    async def settle(
        self, outcome: CallOutcome, *, retry_after_s: float = 0.0, cause: str = ""
    ) -> None:
        """Settle with `outcome` (exactly once). `retry_after_s`: the destination's
        Retry-After on this answer, if any (a cut it causes also holds AIMD growth). `cause`:
        what a failure was ("HTTP 500", `admission.breaker.breaker_cause`), kept by a breaker
        layer it opens."""
        if self._outcome is not None:
            raise TicketAlreadySettled(
                f"ticket {self.token} for {self.destination!r} was already settled as "
                f"{self._outcome.value}"
            )
        self._outcome = outcome
        # The settle function does its immediate part (queueing, hand-over) when called; the
        # awaitable it returns is shielded, so a cancelled step still gives its slot back.
        await asyncio.shield(self._settle_fn(self, outcome, retry_after_s, cause))

    async def renew(self, lease_s: float | None = None) -> bool:
        """Extend the lease to `lease_s` (default: the original lease) from now.

        False if the lease had already expired (its slot may be in use by another call).
        """
        if self._outcome is not None:
            return False
        return await self._renew_fn(self, lease_s if lease_s is not None else self.lease_s)

    async def __aenter__(self) -> Ticket:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._outcome is not None:
            return
        if exc is None or isinstance(exc, asyncio.CancelledError):
            await self.ignore()
        else:
            await self.failure()
