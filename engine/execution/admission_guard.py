"""Admission around every GATEWAY attempt: the engine's `vertices.gateway.CallGuard`.

One guard per step execution. Before each attempt it takes an admission ticket for the
destination (breakers, AIMD slot, destination rate; a retry also needs the retry budget, and
the first attempt takes the step's item from the tenant's rate window — all in one atomic
script call). After the attempt it settles the ticket with what the destination's answer says
about its health:

    429                         → throttled (AIMD cut; breakers count nothing)
    503, timeout                → overload  (AIMD cut, breaker failure)
    other 5xx, I/O error, junk  → failure   (breaker failure, no cut)
    anything else answered      → success   (a 4xx is the caller's problem, not an outage)
    cancelled, internal error   → ignored   (says nothing about the destination)
    no answer, slot lease ended → ignored   (this worker was frozen: its own stall, `stalled`)

The first attempt of a redispatched step is a retry too: redispatches and in-process retries
spend the same budget, so a dead destination never sees every item's full retry schedule. The
tenant's rate window counts a step once: the first attempt that is admitted takes the item,
and the step remembers it (`tenant_item_taken`, durable) so that its redispatches and
re-runs after a park do not take another — while a step refused before anything was sent
(an open breaker, no slot in time) still takes its item when it is finally admitted.

A wait for a slot that runs out while the destination's own cap holds it (`DestinationPaced`)
parks the step, as a full tenant window does; only on an in-process retry does it fail as an
overload, as an exhausted wait under a cut AIMD limit always does.

A coordination failure (Redis down) before the call becomes `CoordinationDown`, which the
executor turns into a short park; after the call it is logged and dropped, so a call that was
answered is never turned into a failure by admission bookkeeping (the slot's lease expires).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from redis.exceptions import ResponseError

from admission import (
    Admission,
    CallOutcome,
    DestinationCaps,
    DestinationPaced,
    TenantRateLimited,
    Ticket,
)
from admission.breaker import breaker_cause
from engine.coordination.redis_client import COORDINATION_ERRORS
from engine.store import Store
from schemas.errors import BreakerOpen, RetryRefused, StepDeferred, StepFailure

logger = logging.getLogger(__name__)

LEASE_MARGIN_S = 30.0
"""A slot's lease outlasts its call's timeout by this much (settling takes a moment)."""
THROTTLE_STATUS = 429
OVERLOAD_STATUSES = frozenset({503})
REFUSED = "refused"
"""An attempt's outcome (`AttemptMeter`) when admission said no before anything was sent."""
ADMISSION_UNAVAILABLE = "admission_unavailable"
"""An attempt's outcome when Redis did not answer admission (nothing was sent)."""
STALLED = "stalled"
"""An attempt's outcome when it ended without an answer after its slot's lease had run out:
this worker was frozen (see `AdmissionGuard._stalled`), not the destination slow."""

BREAKER_OPEN = "breaker_open"
"""A refusal's reason (`refusal_reason`): a breaker layer of the destination is open (or
half-open with every probe permit in use)."""
RETRY_BUDGET = "retry_budget"
"""A refusal's reason: the destination's retry budget let no retry through."""
TENANT_RATE = "tenant_rate"
"""A refusal's reason: the tenant's window of GATEWAY steps a minute is full."""
DESTINATION_CAP = "destination_cap"
"""A refusal's reason: the destination's own cap (`maxConcurrency`, `ratePerSecond`) held the
call for the whole admission wait."""
NO_SLOT = "no_slot"
"""A refusal's reason: no slot within the admission wait at the AIMD limit overload cut."""


def refusal_reason(error: BaseException) -> str:
    """Why admission refused a call, as the `reason` label of its refusal."""
    if isinstance(error, BreakerOpen):
        return BREAKER_OPEN
    if isinstance(error, RetryRefused):
        return RETRY_BUDGET
    if isinstance(error, TenantRateLimited):
        return TENANT_RATE
    if isinstance(error, DestinationPaced):
        return DESTINATION_CAP
    return NO_SLOT


class CoordinationDown(StepDeferred):
    """Admission could not reach Redis before the call: nothing was sent; try again soon."""

    code = "admission_unavailable"


_SAYS_NOTHING = frozenset(
    {
        "cancelled",
        "internal_error",
        "invalid_config",
        "egress_denied",
        REFUSED,
        ADMISSION_UNAVAILABLE,
        STALLED,
    }
)
"""Attempt endings that say nothing about the destination: never sent, or cut by ourselves."""


def outcome_of(status: int | None, error_kind: str | None) -> CallOutcome:
    if error_kind in _SAYS_NOTHING:
        return CallOutcome.IGNORE
    if status == THROTTLE_STATUS and error_kind is None:
        return CallOutcome.THROTTLED
    if status in OVERLOAD_STATUSES or error_kind == "timeout":
        return CallOutcome.OVERLOAD
    if error_kind is not None or (status is not None and status >= 500):
        return CallOutcome.FAILURE
    return CallOutcome.SUCCESS


class AttemptMeter(Protocol):
    """Counts the attempts (`engine.execution.worker_metrics.WorkerMetrics`)."""

    def attempt(
        self, destination: str, status: int | None, error_kind: str | None, duration_s: float
    ) -> None: ...

    def refusal(self, destination: str, reason: str) -> None: ...


@dataclass
class AdmissionWaits:
    """The steps of one worker that are waiting for an admission slot right now, by claim
    token: the lease renewer records the long waits on the steps (docs/architecture.md, 'Why
    a step waits'), so a wait that happens in memory is still visible to every front door."""

    _waiting: dict[str, tuple[str, float]] = field(default_factory=dict)

    def start(self, claim_token: str, destination: str, at: float) -> None:
        self._waiting[claim_token] = (destination, at)

    def stop(self, claim_token: str) -> None:
        self._waiting.pop(claim_token, None)

    def since(self, before: float) -> dict[str, str]:
        """Claim token → destination of the steps waiting since `before` or earlier."""
        return {token: dest for token, (dest, at) in self._waiting.items() if at <= before}


@dataclass
class AdmissionTickets:
    """The admission slots one worker holds right now, for calls under way: the worker's
    slot renewer extends them all every third of its steps' lease, so a slot's lease can be
    as short as a step's. A worker killed mid-call frees its slots when its steps' leases
    expire, not a 90 s default later (during which its destinations would lose that
    capacity)."""

    lease_s: float | None = None
    """The lease a slot is taken with; None until a renewing worker sets it (`renewed_by`):
    then a slot is leased for its call's whole timeout, as nothing renews it."""
    _held: dict[Ticket, float] = field(default_factory=dict)
    """Each slot held, and until when (monotonic) it may be renewed: its call's timeout and
    a margin, so a ticket a defect left here is not kept alive for ever."""

    def renewed_by(self, lease_s: float) -> None:
        """A worker that renews these slots every third of `lease_s` runs here."""
        self.lease_s = max(self.lease_s or 0.0, lease_s)

    def hold(self, ticket: Ticket, timeout_s: float) -> None:
        self._held[ticket] = time.monotonic() + timeout_s + LEASE_MARGIN_S

    def drop(self, ticket: Ticket) -> None:
        self._held.pop(ticket, None)

    async def renew(self, admission: Admission) -> int:
        """Extend every held slot by `lease_s` from now, all in one Redis call; the number
        whose lease was lost (expired already, or Redis lost it). Raises what Redis raises."""
        now = time.monotonic()
        stale: dict[str, int] = {}
        for ticket in [t for t, until in self._held.items() if until < now]:
            # Its call's timeout passed long ago, yet nothing settled it: a defect, or this
            # process was frozen (SIGSTOP, a paused VM) past it and its calls have not yet
            # run their timeouts. One line per destination: a frozen worker wakes with every
            # call it had out in this state, and a line each was a flood.
            stale[ticket.destination] = stale.get(ticket.destination, 0) + 1
            del self._held[ticket]
        for destination, count in stale.items():
            logger.warning(
                "let go of the admission slots of %d call%s to %s, unsettled past their "
                "timeout (this worker was frozen past it, or a defect)",
                count,
                "" if count == 1 else "s",
                destination,
            )
        if self.lease_s is None or not self._held:
            return 0
        held = list(self._held)
        renewed = await admission.renew(held, self.lease_s)
        return sum(
            1 for ticket, ok in zip(held, renewed, strict=True) if not ok and ticket in self._held
        )


@dataclass
class AdmissionGuard:
    admission: Admission
    tenant_id: str
    wait_timeout_s: float
    redispatch: bool = False
    """This execution is a redispatch: its first attempt is a retry for the budget."""
    item_taken: bool = False
    """The step's tenant item is taken (by an earlier execution, or by an attempt of this
    one): no attempt takes another."""
    waits: AdmissionWaits | None = None
    """Where this step's waits for a slot are announced (None: nowhere)."""
    tickets: AdmissionTickets | None = None
    """Where this step's slot is held while its call runs, to be renewed (None: nowhere, so
    its lease covers the call's whole timeout)."""
    claim_token: str = ""
    meter: AttemptMeter | None = None
    """Where every attempt, and every refusal, is counted (None: nowhere)."""
    breaker_scope: str = ""
    """A deployment candidate's run (`candidate_scope`): its calls go through a tenant
    breaker layer of their own; "" for every other run."""
    _ticket: Ticket | None = field(default=None, init=False)
    _attempts: int = field(default=0, init=False)

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None:
        first = self._attempts == 0
        self._attempts += 1
        # A call may run for its whole timeout (`timeoutMs` up to 10 minutes): its slot (and
        # a half-open probe's permit) must not expire under it, or the cap is exceeded and a
        # slow but successful probe counts as hung.
        # Renewed with the step's lease, a slot needs no more than that lease.
        renewed = self.tickets.lease_s if self.tickets is not None else None
        lease_s = renewed or max(self.admission.config.default_lease_s, timeout_s + LEASE_MARGIN_S)
        if self.waits is not None:
            self.waits.start(self.claim_token, destination, time.monotonic())
        try:
            self._ticket = await self.admission.admit(
                destination,
                self.tenant_id,
                wait_timeout_s=self.wait_timeout_s,
                lease_s=lease_s,
                # The step's item: once per step, not again on each redispatch.
                take_item=not self.item_taken,
                retry=retry or (first and self.redispatch),
                breaker_scope=self.breaker_scope,
            )
            self.item_taken = True  # admitted: the item (if it was still due) went with it
            if self.tickets is not None:
                self.tickets.hold(self._ticket, timeout_s)
        except DestinationPaced as paced:
            self._refused(destination, paced)
            if not first:
                # An in-process retry has an answer already: parking would start the step's
                # attempts over, so it fails as an overload (a redispatch) as it always did.
                raise StepFailure(paced.kind, paced.message) from paced
            raise
        except ResponseError:
            # Redis answered with an error (a script bug, wrong arguments): not an outage to
            # wait out but a defect that must fail the step visibly.
            raise
        except COORDINATION_ERRORS as exc:
            self._count(destination, ADMISSION_UNAVAILABLE)
            # Not the error's text: it names Redis's address, and what a step waits for is
            # read by the run's tenant too (never told where the deployment's parts run). The
            # worker's `redis.unreachable` line says it, for operators.
            raise CoordinationDown(
                f"admission unavailable: Redis does not answer ({type(exc).__name__}); the "
                "step waits and tries again (the workers' log says why)"
            ) from exc
        except (StepFailure, StepDeferred) as refused:
            # An open breaker, the retry budget, no slot in time, the tenant's window.
            self._refused(destination, refused)
            raise
        finally:
            if self.waits is not None:
                self.waits.stop(self.claim_token)

    async def after_attempt(
        self,
        destination: str,
        status: int | None,
        error_kind: str | None,
        duration_s: float,
        *,
        retry_after_s: float | None = None,
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is not None and self._stalled(ticket, status, error_kind):
            error_kind = STALLED
        if self.meter is not None:
            self.meter.attempt(destination, status, error_kind, duration_s)
        if ticket is None:
            return
        if self.tickets is not None:
            self.tickets.drop(ticket)
        try:
            outcome = outcome_of(status, error_kind)
            # What the failure was, kept by a breaker layer it opens (its refusals say it).
            failed = outcome in {CallOutcome.FAILURE, CallOutcome.OVERLOAD}
            await ticket.settle(
                outcome,
                retry_after_s=retry_after_s or 0.0,
                cause=breaker_cause(status, error_kind) if failed else "",
            )
        except COORDINATION_ERRORS:
            logger.warning(
                "could not settle the admission slot of a call to %s; its lease will expire",
                destination,
                exc_info=True,
            )

    def _stalled(self, ticket: Ticket, status: int | None, error_kind: str | None) -> bool:
        """Whether a call ended without an answer (a timeout, a connection error) after its
        slot's lease had run out: the worker renews its slots every third of a lease, so
        nothing renewed this one for a whole lease, which means this process was frozen
        (SIGSTOP, a paused VM, a swap storm). A frozen process wakes with every call it had
        on the wire past its timeout, the answers perhaps waiting unread in its sockets: its
        own stall, which must not cut a healthy destination's limit, open its breakers for
        every tenant, or count as the destination's timeouts in the attempts metric (its
        error-ratio alert). An answer it did read (a 503) is the destination's."""
        # Not logged per call: the controller's `admission.lease_lost` line, one per
        # destination every 10 s, already says these calls outlived their slots.
        return (
            status is None
            and outcome_of(status, error_kind) is not CallOutcome.IGNORE
            and self.admission.lease_expired(ticket)
        )

    def _count(self, destination: str, outcome: str) -> None:
        if self.meter is not None:
            self.meter.attempt(destination, None, outcome, 0.0)

    def _refused(self, destination: str, error: BaseException) -> None:
        if self.meter is not None:
            self.meter.attempt(destination, None, REFUSED, 0.0)
            self.meter.refusal(destination, refusal_reason(error))


def candidate_scope(route: str | None, workflow: str, version: int) -> str:
    """The breaker scope of a run's calls: `workflow@vN` for a run a deployment routed to its
    candidate, "" for every other run.

    A candidate that fails (a wrong path, a bad body: answered 500) would otherwise open its
    tenant's breaker of the destination it shares with the serving version, and the serving
    version's runs, the traffic a gradual deployment exists to protect, would be refused
    with it for the whole reset period: the candidate's share of traffic would become all
    of it. With a layer of its own, its failures open only that layer (and count in the
    global layer only until it opens, as any tenant layer's do), so the serving version's
    calls go on and the verdict judges the candidate on its own failures. Child runs are
    not routed (they run their pinned versions) and are not scoped.
    """
    return f"{workflow}@v{version}" if route == "candidate" else ""


@dataclass(frozen=True)
class StoreSettingsSource:
    """Destination caps and tenant rate limits from the database (the durable copies), for
    `Admission` (its `CapsSource`, `TenantLimitSource` and `SettingsSource`)."""

    store: Store

    async def get_tenant_limit(self, tenant_id: str) -> int | None:
        return await self.store.get_tenant_rate(tenant_id)

    async def all_tenant_limits(self) -> dict[str, int]:
        return dict(await self.store.list_tenant_rates())

    async def all_caps(self) -> dict[str, DestinationCaps]:
        return {
            destination: DestinationCaps(max_concurrency=cap, rate_per_second=rate)
            for destination, cap, rate in await self.store.list_destination_caps()
        }

    async def get_caps(self, destination: str) -> DestinationCaps | None:
        row = await self.store.get_destination_caps(destination)
        if row is None:
            return None
        max_concurrency, rate_per_second = row
        return DestinationCaps(max_concurrency=max_concurrency, rate_per_second=rate_per_second)
