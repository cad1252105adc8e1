"""`Admission`: the facade a GATEWAY step uses around each outbound HTTP call.

    ticket = await admission.admit(destination, tenant_id, wait_timeout_s=5.0)
    async with ticket:
        response = await client.send(request)
        if response.status_code == 429:
            await ticket.settle(CallOutcome.THROTTLED)
        elif response.status_code == 503:
            await ticket.overload()
        elif response.is_success:
            await ticket.success()
        else:
            await ticket.failure()

One ticket per HTTP attempt (not per step): every attempt is a sample for AIMD, the breakers
and the retry budget. An in-process retry or a redispatch is admitted with `retry=True`, so
it goes only while the destination's retry budget allows.

`admit` raises `StepFailure(EXTERNAL_OVERLOAD)` when a breaker blocks the call (with
`retry_after_s` = when probes will be let through), when the retry budget refuses a retry
(`RetryRefused`: the GATEWAY then fails with its previous attempt's failure), or when no slot
frees up within `wait_timeout_s` while the AIMD limit (cut by overload) holds the destination;
the engine redispatches such steps instead of holding a worker. A wait that runs out while the
destination's own cap holds it (its `maxConcurrency` at an uncut limit, or its
`ratePerSecond`) raises the subclass `DestinationPaced`: the operator's pacing, so the engine
parks the step to ask again, never fails it. A step's first attempt also takes an item from
the tenant's rate window (`take_item=True`, in the same atomic script); at the limit `admit` raises
`TenantRateLimited` and the step is delayed, not failed. `tenant_check` asks the same
question on its own.

Admits and settlements of the whole process are coalesced into one Redis script call at a
time (`admission.batching`): one round trip for every call that started or ended meanwhile.

Time: stored timestamps (leases, windows, breaker times) come from the injected `Clock`;
waiting for a slot is real waiting, bounded by the event loop's own clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import uuid
from collections.abc import Awaitable, Collection, Sequence

from redis.asyncio import Redis

from admission import keys
from admission.backend import (
    AdmitCode,
    AdmitOp,
    AdmitReply,
    CoordinationBackend,
    Reply,
    SettleOp,
    SettleReply,
)
from admission.batching import ExchangeBatcher
from admission.breaker import BreakerState, ClosedBreaker, Layer, Transition
from admission.caps import CapsSource, DestinationCaps, LoadOnce, RedisCapsStore
from admission.config import AdmissionConfig
from admission.handover import Views
from admission.rate_limit import (
    RateDecision,
    TenantLimitSource,
    TenantRateLimiter,
)
from admission.refusals import raise_if_refused, wait_exhausted
from admission.retry_budget import SharedRetryBudget
from admission.seeding import Reseeder, SettingsSource
from admission.ticket import CallOutcome, Ticket
from admission.visibility import AdmissionSnapshot, TenantUsage, destination_state
from admission.waiting import Backoff, SlotWaiters, Waiter, Wake
from schemas.clock import Clock

logger = logging.getLogger(__name__)

LIMIT_RAISES_LOGGED_EVERY_S = 60.0
"""A destination's limit raises are logged at most this often, unless it has doubled."""
LEASE_LOST_LOGGED_EVERY_S = 10.0
"""At most one "settled after its slot lease expired" (or "Redis held no lease") line per
destination this often; the calls in between are counted into the next line. A worker frozen
past its leases (SIGSTOP, a paused VM) wakes with every call it had in flight settling at once:
one line each was a flood of identical warnings."""
MAX_HANDOVERS = 4
"""A slot is handed over locally at most this many times in a row, then it goes back through
Redis, where waiters of other processes can take it: hand-overs must not let one process keep
a destination's slots while another's callers wait."""


class Admission:
    """Admission control for every destination, shared with other workers through Redis.

    Build one per process (it keeps the in-process wait queues) and pass it down. Give it a
    client that never resends a command after a connection failure (`engine.coordination.
    open_redis(..., retries=False)`): its exchange script must not run twice.
    `caps_source`, if given, is asked once per destination and process for caps to copy
    into Redis; `tenant_limits` likewise once per tenant for its rate-limit override (the
    durable copies live in the database; Redis holds the operative ones). `settings`, if
    given, is read whole when Redis has lost them all (a restart without its data), before
    any admission decides with the defaults (`admission.seeding`). `rng` seeds the
    wait jitter (tests).
    """

    def __init__(
        self,
        redis: Redis,
        clock: Clock,
        config: AdmissionConfig | None = None,
        *,
        caps_source: CapsSource | None = None,
        tenant_limits: TenantLimitSource | None = None,
        settings: SettingsSource | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or AdmissionConfig()
        self._clock = clock
        self.backend = CoordinationBackend(redis)
        self.caps = RedisCapsStore(self.backend)
        self.rate = TenantRateLimiter(self.backend, clock, self.config.tenant_rate)
        self.budget = SharedRetryBudget(self.backend, clock, self.config.retry_budget)
        self._caps_source = caps_source
        self._tenant_limits = tenant_limits
        self.reseeder = None if settings is None else Reseeder(self.backend, settings)
        if self.reseeder is not None:
            self.backend.reseed = self.reseeder.reseed
        self._loaded = LoadOnce()
        self._waiters = SlotWaiters()
        self._views = Views()
        self._last_wait: dict[str, AdmitReply] = {}
        """Per destination, this process's latest refusal that waiting cures (no slot, its
        rate): what holds the callers that queued behind it without asking."""
        self.handovers = 0
        """Slots handed from a finished call to a waiting one in this process."""
        self._limit_logged: dict[str, tuple[float, float]] = {}
        """Per destination, the limit this process last logged and when (see `_log_limit`)."""
        self._lease_lost_logged: dict[str, tuple[float, int]] = {}
        """Per destination, when a lost lease was last logged and how many were not since
        (see `_log_lease_lost`)."""
        # Public for tests and benchmarks (its `exchanges` counts script calls).
        self.batcher = ExchangeBatcher(
            lambda ops: self.backend.exchange(ops, self._clock.now(), self.config)
        )
        self._backoff = Backoff(
            self.config.wait_poll_initial_s, self.config.wait_poll_max_s, rng or random.Random()
        )

    # ── admission ───────────────────────────────────────────────────────────────────────

    async def admit(
        self,
        destination: str,
        tenant_id: str,
        *,
        wait_timeout_s: float,
        lease_s: float | None = None,
        take_item: bool = False,
        retry: bool = False,
        breaker_scope: str = "",
    ) -> Ticket:
        """Wait for permission to call `destination` for `tenant_id`.

        Waits at most `wait_timeout_s` seconds for a slot (0 = one attempt only). The slot is
        leased for `lease_s` seconds (default `config.default_lease_s`, 90 s). `take_item`:
        the call also takes one item from the tenant's rate window, in the same atomic step
        (a step's first attempt does). `retry`: the call is a retry (in-process or a
        redispatch) and goes only while the destination's retry budget allows.
        `breaker_scope`: the call is a deployment candidate's (`workflow@vN`): its tenant
        breaker layer is one of its own (`admission.breaker.scoped_tenant`), so the
        candidate's failures never open the layer the serving version's calls go through.

        Raises `StepFailure(EXTERNAL_OVERLOAD)` if a breaker blocks the call, the retry
        budget refuses it or no slot frees up in time (its subclass `DestinationPaced` when
        the destination's own cap, not a cut AIMD limit, held it), and `TenantRateLimited`
        when the tenant's window is full. The returned `Ticket` must be settled exactly once.
        """
        if wait_timeout_s < 0:
            raise ValueError("wait_timeout_s must not be negative")
        lease = self.config.default_lease_s if lease_s is None else lease_s
        if lease <= 0:
            raise ValueError("lease_s must be positive")
        await self._load_caps(destination)
        if take_item:
            await self._load_tenant_limit(tenant_id)
        op = AdmitOp(
            destination,
            tenant_id,
            uuid.uuid4().hex,
            lease,
            take_item=take_item,
            retry=retry,
            tenant_default_limit=self.rate.default_limit(tenant_id),
            breaker_scope=breaker_scope,
        )
        return await self._admit_waiting(op, wait_timeout_s)

    async def _admit_waiting(self, op: AdmitOp, wait_timeout_s: float) -> Ticket:
        """Ask until granted, refused for good, handed a slot or out of time (see
        `admission.waiting`: only the head of the queue polls; a caller that finds a queue
        joins it without asking first; a new head pauses before its first poll)."""
        destination = op.destination
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_timeout_s
        reply: AdmitReply | None = None
        waiter = (
            self._waiters.join(destination, op) if self._joins_queue(op, wait_timeout_s) else None
        )
        ask = waiter is None
        head_pause, polls, refused = self._backoff.pause_s(0), 0, False
        try:
            for _ in range(self.config.max_wait_attempts):
                if ask:
                    reply = await self._admit_once(op, waiter)
                    if reply.code is AdmitCode.GRANTED:
                        if waiter is not None:
                            # Out of the queue first, so the baton goes to the next waiter.
                            self._waiters.leave(destination, waiter)
                            waiter = None
                        return self._granted(op, reply)
                    refused = True
                    raise_if_refused(
                        destination,
                        op.tenant_id,
                        reply,
                        self.rate.config.delay_s,
                        breaker_scope=op.breaker_scope,
                    )
                    refused = False
                    head_pause, polls = self._head_pause(reply, polls), polls + 1
                if waiter is None:
                    waiter = self._waiters.join(destination, op)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wake = await waiter.pause(head_pause_s=head_pause, remaining_s=remaining)
                if waiter.handed is not None:
                    handed: Ticket = waiter.handed
                    waiter.handed = None
                    return handed
                # Promoted to head: the previous head asked moments ago or was just handed
                # the slot that freed up, so a poll now would be refused; pause first.
                ask = wake is not Wake.PROMOTED
        finally:
            if waiter is not None:
                self._waiters.leave(destination, waiter)
                if refused:
                    # Refused for a reason the next waiter may share (an open breaker): it
                    # asks now instead of pausing first, so a queue learns it in one pass.
                    self._waiters.notify_one(destination)
                if waiter.handed is not None:
                    # Handed a slot while being cancelled: give it back, never leak it.
                    await waiter.handed.ignore()
        # A caller that queued and never asked judges by this process's latest refusal.
        raise wait_exhausted(destination, wait_timeout_s, reply or self._last_wait.get(destination))

    def _joins_queue(self, op: AdmitOp, wait_timeout_s: float) -> bool:
        """Whether a new caller takes its place in the queue without asking first. Behind
        callers of this process that wait for a slot (or the destination's rate) it would
        only hear no, or overtake them with a yes. Any other refusal (an open breaker, an
        exhausted budget) it must hear at once, and a caller that cannot wait asks once."""
        return (
            wait_timeout_s > 0
            and self._waiters.waiting(op.destination) > 0
            and self._views.get(op.destination).waiting_cures
        )

    def _granted(self, op: AdmitOp, reply: AdmitReply) -> Ticket:
        if reply.free_slots > 0:  # pass the baton: more slots are free
            self._waiters.notify_one(op.destination)
        return self._ticket(op, reply.epoch, probe=reply.tenant_probe or reply.global_probe)

    def _head_pause(self, reply: AdmitReply, polls: int) -> float:
        """The head's pause after a refusal: exactly the wait the destination's rate names,
        else the backoff."""
        if reply.code is AdmitCode.RATE_LIMITED:
            return max(reply.hint_s, 0.001)
        return self._backoff.pause_s(polls)

    async def _admit_once(self, op: AdmitOp, waiter: Waiter | None) -> AdmitReply:
        # While asking Redis itself, a waiter must not also be handed a slot.
        if waiter is not None:
            waiter.busy = True
        try:
            reply = await self.batcher.submit(op)
        finally:
            if waiter is not None:
                waiter.busy = False
        if not isinstance(reply, AdmitReply):
            raise TypeError(f"admit answered {reply!r}")
        waiting_cures = reply.code in {AdmitCode.NO_SLOT, AdmitCode.RATE_LIMITED}
        self._views.get(op.destination).waiting_cures = waiting_cures
        if waiting_cures:
            self._last_wait[op.destination] = reply
        self._saw_admit(op, reply)
        return reply

    def _saw_admit(self, op: AdmitOp, reply: AdmitReply) -> None:
        self._log_transitions(op.destination, op.breaker_tenant, reply.events)
        took_item = op.take_item and reply.code in {AdmitCode.GRANTED, AdmitCode.TENANT_LIMITED}
        # (global layer closed, tenant layer closed) as far as this reply tells: the global
        # layer is checked first, so a tenant-layer refusal means the global one passed.
        breakers: tuple[bool | None, bool | None] = (None, None)
        if reply.code is AdmitCode.GRANTED and not op.handover:
            # (A hand-over's record skips the checks, so its grant says nothing about them.)
            breakers = (not reply.global_probe, not reply.tenant_probe)
        elif reply.code is AdmitCode.BREAKER_BLOCKED:
            breakers = (False, None) if reply.blocking_layer.startswith("global") else (True, False)
        # (A candidate's call is keyed by its own layer's id: it is never handed a slot.)
        self._views.saw_admit(
            op.destination,
            op.breaker_tenant,
            free_slots=reply.free_slots,
            epoch=reply.epoch,
            rate_capped=reply.rate_capped,
            breakers=breakers,
            tenant_window=(reply.tenant_used, reply.tenant_limit) if took_item else None,
            events=reply.events,
        )

    async def tenant_check(self, tenant_id: str) -> RateDecision:
        """Take one item from the tenant's rate window; at the limit, delay (5 s) instead."""
        decision = await self.rate.check(tenant_id)
        if not decision.allowed:
            # DEBUG: a flooding tenant is refused on every check; its window usage is in
            # `snapshot()`.
            logger.debug(
                "tenant %s at its rate limit (%d/%d); delaying %.1f s",
                tenant_id,
                decision.used,
                decision.limit,
                decision.delay_s,
                extra={
                    "event": "admission.tenant_limited",
                    "tenant_id": tenant_id,
                    "used": decision.used,
                    "limit": decision.limit,
                },
            )
        return decision

    # ── configuration ───────────────────────────────────────────────────────────────────

    async def set_caps(self, destination: str, caps: DestinationCaps) -> None:
        """Set a destination's caps for every worker (the database copy is the caller's)."""
        await self.caps.set_caps(destination, caps)
        self._loaded.mark(("caps", destination))
        logger.info(
            "caps of %s set to max_concurrency=%d rate_per_second=%s",
            destination,
            caps.max_concurrency,
            caps.rate_per_second,
            extra={
                "event": "admission.caps_changed",
                "destination": destination,
                "max_concurrency": caps.max_concurrency,
                "rate_per_second": caps.rate_per_second,
            },
        )

    async def remove_caps(self, destination: str) -> None:
        """Forget a destination's caps for every worker: the default cap applies to its next
        admission anywhere (the database copy is the caller's)."""
        await self.caps.delete_caps(destination)
        self._loaded.mark(("caps", destination))
        logger.info(
            "caps of %s removed",
            destination,
            extra={"event": "admission.caps_removed", "destination": destination},
        )

    async def reset_breakers(
        self, destination: str, tenant_id: str | None = None
    ) -> list[ClosedBreaker] | None:
        """Close the breakers of `destination` that are open or half-open, for every worker at
        once: its global layer and every tenant layer, or only `tenant_id`'s tenant layer
        when one is given (the global layer is every tenant's). An operator does this once
        the destination is fixed, so that calls go at once instead of after the reset
        timeout. The layers closed (none: all were closed already); None when admission has
        never seen `destination`.

        Its retry budget is filled too, even when every layer was closed already: the calls
        that failed in the outage emptied it, and the steps a reset releases are
        redispatches, which it holds while at or under half. Left so, a tour's 500 released
        children were refused by it (each refusal spending a redispatch) until 120 of them
        failed, none having called the destination the operator had just said was fixed."""
        if not await self.backend.known_destination(destination):
            return None
        tokens = await self.budget.tokens(destination)
        await self.backend.refill_budget(destination)
        if tokens < self.budget.config.max_tokens:
            logger.warning(
                "retry budget of %s filled by an operator's breaker reset (was %.0f tokens)",
                destination,
                tokens,
                extra={"event": "admission.budget_reset", "destination": destination},
            )
        # Per layer: (layer, its tenant or None, its keys' prefix).
        layers: list[tuple[Layer, str | None, str]] = []
        if tenant_id is None:
            layers.append((Layer.GLOBAL, None, keys.breaker_global(destination)))
        tenants = (
            [tenant_id]
            if tenant_id is not None
            else await self.backend.breaker_tenants(destination)
        )
        layers += [(Layer.TENANT, t, keys.breaker_tenant(destination, t)) for t in tenants]
        was = await self.backend.close_breakers(
            [(layer.value, prefix) for layer, _, prefix in layers], self.config.state_ttl_s
        )
        closed = [
            ClosedBreaker(layer, tenant, state)
            for (layer, tenant, _), state in zip(layers, was, strict=True)
            if state is not BreakerState.CLOSED
        ]
        for breaker in closed:
            logger.warning(
                "%s breaker of %s%s closed by an operator (was %s)",
                breaker.layer.value,
                destination,
                f" (tenant {breaker.tenant_id})" if breaker.tenant_id else "",
                breaker.was.value,
                extra={
                    "event": "admission.breaker_reset",
                    "destination": destination,
                    "tenant_id": breaker.tenant_id,
                    "layer": breaker.layer.value,
                    "state_from": breaker.was.value,
                    "state_to": BreakerState.CLOSED.value,
                },
            )
        return closed

    async def get_caps(self, destination: str) -> DestinationCaps | None:
        return await self.caps.get_caps(destination)

    async def set_tenant_limit(self, tenant_id: str, limit: int | None) -> None:
        """Override a tenant's items per window for every worker (None = default); the
        database copy is the caller's."""
        await self.rate.set_limit(tenant_id, limit)
        self._loaded.mark(("tenant", tenant_id))

    # ── visibility ──────────────────────────────────────────────────────────────────────

    async def snapshot(self, *, also: Collection[str] = ()) -> AdmissionSnapshot:
        """Every destination's limit, in-flight count, cap, breakers and retry budget (those
        admission has seen, and the destinations in `also`), and every tenant's window usage."""
        now = self._clock.now()
        names = sorted({*await self.backend.destinations(), *also})
        destinations = [
            destination_state(d, await self.backend.read_destination(d, now), now, self.config)
            for d in names
        ]
        tenants = []
        for tenant_id in await self.backend.tenants():
            used, limit = await self.rate.usage(tenant_id)
            tenants.append(TenantUsage(tenant_id, used, limit, self.rate.config.window_s))
        return AdmissionSnapshot(now, destinations, tenants)

    # ── internals ───────────────────────────────────────────────────────────────────────

    async def _load_caps(self, destination: str) -> None:
        if self._caps_source is not None:
            await self._loaded.once(("caps", destination), self._copy_caps, destination)

    async def _copy_caps(self, destination: str) -> None:
        if self._caps_source is None:
            return
        caps = await self._caps_source.get_caps(destination)
        # The database is the truth: caps it no longer has go from Redis too, so a copy that
        # raced an operator's removal is undone within a refresh.
        if caps is not None:
            await self.caps.set_caps(destination, caps)
        else:
            await self.caps.delete_caps(destination)

    async def _load_tenant_limit(self, tenant_id: str) -> None:
        if self._tenant_limits is not None:
            await self._loaded.once(("tenant", tenant_id), self._copy_tenant_limit, tenant_id)

    async def _copy_tenant_limit(self, tenant_id: str) -> None:
        if self._tenant_limits is None:
            return
        limit = await self._tenant_limits.get_tenant_limit(tenant_id)
        await self.rate.set_limit(tenant_id, limit)  # None: the database has none, nor Redis

    def _ticket(self, op: AdmitOp, epoch: int, *, probe: bool, handovers: int = 0) -> Ticket:
        return Ticket(
            handovers=handovers,
            destination=op.destination,
            tenant_id=op.tenant_id,
            token=op.token,
            epoch=epoch,
            lease_s=op.lease_s,
            probe=probe,
            settle=self._settle,
            renew=self._renew,
            lease_until=self._clock.now() + op.lease_s,
            breaker_scope=op.breaker_scope,
        )

    def _settle(
        self, ticket: Ticket, outcome: CallOutcome, retry_after_s: float, cause: str = ""
    ) -> Awaitable[None]:
        """Queue the settlement and hand the slot over *now* (not a scheduling step later,
        when the returned awaitable first runs): every loop iteration between a call's answer
        and the next call on its slot is time the destination serves nobody. The awaitable
        waits for Redis's reply and applies it."""
        op = SettleOp(
            ticket.destination,
            ticket.tenant_id,
            ticket.token,
            outcome,
            ticket.epoch,
            retry_after_s,
            cause,
            ticket.breaker_scope,
        )
        answer = self.batcher.enqueue(op)
        overload = outcome in {CallOutcome.THROTTLED, CallOutcome.OVERLOAD}
        if overload:
            # The destination is at capacity: no hand-overs until Redis has applied the cut.
            self._views.saw_overload(ticket.destination)
        # The view learns the reply as soon as it arrives (before the awaiting task resumes)
        # and whether or not anybody awaits it.
        answer.add_done_callback(lambda done: self._settle_answered(ticket, overload, done))
        if not (outcome is CallOutcome.SUCCESS and self._hand_over(ticket)):
            # Wake a local waiter now: its admit joins the same exchange, after this
            # settlement, so the slot changes hands in one round trip. If Redis fails, a
            # waiter retrying costs little and the lease still expires.
            self._waiters.notify_one(ticket.destination)
        return self._settled(ticket, outcome, answer)

    async def _settled(
        self, ticket: Ticket, outcome: CallOutcome, answer: asyncio.Future[Reply]
    ) -> None:
        reply = await answer
        if not isinstance(reply, SettleReply):
            raise TypeError(f"settle answered {reply!r}")
        # The limit may have grown: let the slots it leaves unused be taken now (one waiter
        # was woken above already).
        self._waiters.notify(ticket.destination, reply.free_slots - 1)
        self._log_transitions(ticket.destination, ticket.breaker_tenant, reply.events)
        self._log_settle(ticket, outcome, reply)

    def _settle_answered(self, ticket: Ticket, overload: bool, done: asyncio.Future[Reply]) -> None:
        failed = done.cancelled() or done.exception() is not None
        if overload:
            # No reply (Redis failed): whether the cut happened is unknown, so the view stays
            # 'over the limit' until a later exchange's reply says how many slots are free.
            self._views.overload_answered(ticket.destination, replied=not failed)
        if failed:
            return
        reply = done.result()
        if isinstance(reply, SettleReply):
            self._views.saw_settle(
                ticket.destination,
                ticket.breaker_tenant,
                free_slots=reply.free_slots,
                epoch=reply.epoch,
                breakers=(reply.global_state == "closed", reply.tenant_state == "closed"),
            )

    def _hand_over(self, ended: Ticket) -> bool:
        """Give the slot of a call that just succeeded to a waiter of the same destination
        and tenant, without a round trip (see `admission.handover`). True if it was."""
        if ended.probe or ended.handovers >= MAX_HANDOVERS or ended.breaker_scope:
            return False
        view = self._views.get(ended.destination)

        def accepts(request: AdmitOp) -> bool:
            return (
                request.tenant_id == ended.tenant_id
                and not request.breaker_scope
                and not request.retry
                and view.allows(request.tenant_id, request.take_item)
            )

        waiter = self._waiters.first_idle(ended.destination, accepts)
        if waiter is None or waiter.request is None:
            return False
        op = dataclasses.replace(waiter.request, handover=True)
        recorded = self.batcher.enqueue(op)
        recorded.add_done_callback(lambda done: self._handover_recorded(op, done))
        # The latest reply's epoch, not the ended call's: after Redis lost its state (epoch 0
        # again) an older, higher epoch would let this call's overload cut a second time.
        epoch = view.epoch
        ticket = self._ticket(op, epoch, probe=False, handovers=ended.handovers + 1)
        ticket.recorded = recorded
        waiter.hand(ticket)
        self.handovers += 1
        return True

    def _handover_recorded(self, op: AdmitOp, done: asyncio.Future[Reply]) -> None:
        if done.cancelled():
            return
        if done.exception() is not None:
            # The call runs anyway; its lease was never written, so nothing can leak.
            logger.warning("could not record a slot handed over for %s", op.destination)
            return
        reply = done.result()
        if isinstance(reply, AdmitReply):
            self._saw_admit(op, reply)

    async def renew(self, tickets: Sequence[Ticket], lease_s: float) -> list[bool]:
        """Extend the leases of `tickets` (and their probe permits) to `lease_s` from now, in
        one Redis call; per ticket, False when it is settled already or its lease was lost
        (expired: its slot may be someone else's now). A slot handed over whose record is
        still on its way to Redis is left for the next renewal: its lease is being written,
        from about now."""
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        now = self._clock.now()
        live, writing = [], set()
        for ticket in tickets:
            if ticket.recorded is not None and not ticket.recorded.done():
                writing.add(id(ticket))
            elif ticket.outcome is None:
                live.append(ticket)
        replies = await self.backend.renew(
            [(t.destination, t.breaker_tenant, t.token) for t in live], now=now, lease_s=lease_s
        )
        renewed = {id(t) for t, ok in zip(live, replies, strict=True) if ok}
        for ticket in live:
            if id(ticket) in renewed:
                ticket.lease_until = now + lease_s
        return [id(ticket) in renewed or id(ticket) in writing for ticket in tickets]

    def lease_expired(self, ticket: Ticket) -> bool:
        """Whether `ticket`'s slot lease ended before now by this process's clock: nothing
        renewed it for a whole lease (its process was frozen, or Redis was out)."""
        return self._clock.now() >= ticket.lease_until

    async def _renew(self, ticket: Ticket, lease_s: float) -> bool:
        (renewed,) = await self.renew([ticket], lease_s)
        return renewed

    def _log_settle(self, ticket: Ticket, outcome: CallOutcome, reply: SettleReply) -> None:
        if not reply.lease_held:
            # Either the call outlived its lease, or Redis lost the record (a restart without
            # persistence, or a hand-over whose record failed): say which.
            self._log_lease_lost(ticket)
        self._log_limit(ticket, outcome, reply)

    def _log_lease_lost(self, ticket: Ticket) -> None:
        """Log a call that settled without its lease, aggregated per destination
        (`LEASE_LOST_LOGGED_EVERY_S`)."""
        now = self._clock.now()
        logged_at, unlogged = self._lease_lost_logged.get(ticket.destination, (None, 0))
        if logged_at is not None and now - logged_at < LEASE_LOST_LOGGED_EVERY_S:
            self._lease_lost_logged[ticket.destination] = (logged_at, unlogged + 1)
            return
        self._lease_lost_logged[ticket.destination] = (now, 0)
        expired = now >= ticket.lease_until
        more = f" (and {unlogged} more calls to it since the last such line)" if unlogged else ""
        logger.warning(
            "call to %s settled %s%s; further ones are counted into one line every %g s",
            ticket.destination,
            "after its slot lease expired (not renewed in time, or lease_s too short)"
            if expired
            else "but Redis held no lease for it (Redis lost its state, or the slot's "
            "record was never written)",
            more,
            LEASE_LOST_LOGGED_EVERY_S,
            extra={
                "event": "admission.lease_lost",
                "destination": ticket.destination,
                "expired": expired,
                "unlogged": unlogged,
            },
        )

    def _log_limit(self, ticket: Ticket, outcome: CallOutcome, reply: SettleReply) -> None:
        """Log every cut (INFO), but aggregate the raises (DEBUG): a raise is logged only once
        the limit has doubled since the last line, or `LIMIT_RAISES_LOGGED_EVERY_S` later
        (slow start would otherwise log every +1)."""
        if not reply.cut and math.floor(reply.old_limit) == math.floor(reply.new_limit):
            return
        now = self._clock.now()
        logged = self._limit_logged.get(ticket.destination)
        if not reply.cut and logged is not None:
            logged_limit, logged_at = logged
            grown = reply.new_limit >= 2 * logged_limit
            if not grown and now - logged_at < LIMIT_RAISES_LOGGED_EVERY_S:
                return
        since = reply.old_limit if reply.cut or logged is None else logged[0]
        self._limit_logged[ticket.destination] = (reply.new_limit, now)
        if reply.new_limit == since:
            return
        # A cut is news (the destination pushed back); a raise is the limit working as
        # designed, so it is logged only for whoever turns DEBUG on.
        logger.log(
            logging.INFO if reply.cut else logging.DEBUG,
            "limit of %s %s: %.2f -> %.2f",
            ticket.destination,
            "cut" if reply.cut else "raised",
            since,
            reply.new_limit,
            extra={
                "event": "admission.limit_changed",
                "destination": ticket.destination,
                "old_limit": since,
                "new_limit": reply.new_limit,
                "cut": reply.cut,
                "epoch": reply.epoch,
                "outcome": outcome.value,
            },
        )

    @staticmethod
    def _log_transitions(destination: str, tenant_id: str, events: tuple[str, ...]) -> None:
        """Log breaker transitions. Each happens inside one script run, so exactly one
        process logs it."""
        for event in events:
            change = Transition.parse(event)
            # Opening is news an operator must see; half-opening and closing are recovery.
            level = logging.WARNING if change.after is BreakerState.OPEN else logging.INFO
            logger.log(
                level,
                "%s breaker of %s%s: %s -> %s",
                change.layer.value,
                destination,
                f" (tenant {tenant_id})" if change.layer.value == "tenant" else "",
                change.before.value,
                change.after.value,
                extra={
                    "event": "admission.breaker_changed",
                    "destination": destination,
                    "tenant_id": tenant_id,
                    "layer": change.layer.value,
                    "state_from": change.before.value,
                    "state_to": change.after.value,
                },
            )
