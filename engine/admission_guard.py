"""Admission around every GATEWAY attempt: the engine's `vertices.gateway.CallGuard`.

One guard per step execution. Before each attempt it spends retry budget (retries only) and
takes an admission ticket for the destination (breakers, AIMD slot, destination rate); after
the attempt it settles the ticket with what the destination's answer says about its health:

    429, 503, timeout           → overload  (AIMD cut, breaker failure)
    other 5xx, I/O error, junk  → failure   (breaker failure, no cut)
    anything else answered      → success   (a 4xx is the caller's problem, not an outage)
    cancelled, internal error   → ignored   (says nothing about the destination)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from admission import Admission, DestinationCaps, Outcome, Ticket
from engine.store import Store
from schemas.errors import FailureKind, StepFailure

OVERLOAD_STATUSES = frozenset({429, 503})


def outcome_of(status: int | None, error_kind: str | None) -> Outcome:
    if error_kind in {"cancelled", "internal_error", "invalid_config"}:
        return Outcome.IGNORE
    if status in OVERLOAD_STATUSES or error_kind == "timeout":
        return Outcome.OVERLOAD
    if error_kind is not None or (status is not None and status >= 500):
        return Outcome.FAILURE
    return Outcome.SUCCESS


@dataclass
class AdmissionGuard:
    admission: Admission
    tenant_id: str
    wait_timeout_s: float
    _ticket: Ticket | None = field(default=None, init=False)

    async def before_attempt(self, destination: str, retry: bool) -> None:
        if retry and not await self.admission.retry_allowed(destination):
            raise StepFailure(
                FailureKind.EXTERNAL_OVERLOAD,
                f"retry budget of {destination} is exhausted: not retrying now",
            )
        self._ticket = await self.admission.admit(
            destination, self.tenant_id, wait_timeout_s=self.wait_timeout_s
        )

    async def after_attempt(
        self, destination: str, status: int | None, error_kind: str | None, duration_s: float
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is not None:
            await ticket.settle(outcome_of(status, error_kind))


@dataclass(frozen=True)
class StoreCapsSource:
    """Destination caps from the database (the durable copy), for `Admission`."""

    store: Store

    async def get_caps(self, destination: str) -> DestinationCaps | None:
        row = await self.store.get_destination_caps(destination)
        if row is None:
            return None
        max_concurrency, rate_per_second = row
        return DestinationCaps(max_concurrency=max_concurrency, rate_per_second=rate_per_second)
