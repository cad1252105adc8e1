"""Operator settings: destination caps, tenant rate limits and run quotas, services.

Caps and rate limits have two copies: the durable one in the store and the operative one in
Redis, which admission reads atomically with its counters (every worker's next admission sees
a change). A change is written to the store first, then to Redis, after a probe that Redis
answers: when Redis is down the change is refused with nothing written. Should Redis fail
between the two writes, the operation is refused too (`coordination_unavailable`) and may be
sent again: every setting is idempotent. Caps and tenant rate limits reach Redis before the
store's transaction commits (the row locked), so concurrent changes leave both copies alike
and a Redis failure leaves the stored setting as it was. Quotas live in the store only.

Every change takes `actor` (who made it: `key:<id>`, `demo`, `cli`) and is an audit event
written in the store's transaction of the change (docs/security.md, 'Audit').
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from admission import DestinationCaps
from admission.breaker import candidate_layer_of
from engine.coordination.heartbeat import read_services
from engine.coordination.redis_client import COMMAND_TIMEOUT_S, COORDINATION_ERRORS, redis_ok
from engine.operations.boundary import store_boundary
from engine.operations.destination_keys import check_destination
from engine.operations.settings_views import (
    BreakersReset,
    CapsView,
    ClosedBreakerView,
    DestinationView,
    QuotaView,
    ServiceView,
    TenantRateView,
    TenantView,
)
from engine.store.models import AuditAction, AuditSubject
from engine.store.unreachable import STORE_ERRORS, store_unreachable
from schemas.close_names import close_names, did_you_mean
from schemas.errors import InvalidRequest, NotFound, Unavailable
from schemas.tenant_ids import SYSTEM_TENANT, TENANT_ID_RULE, check_tenant_id

if TYPE_CHECKING:
    from engine.runtime import Runtime

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _coordination(what: str) -> Iterator[None]:
    """Turn a failed Redis call into `Unavailable(code="coordination_unavailable")`."""
    try:
        yield
    except COORDINATION_ERRORS as error:
        raise Unavailable(
            f"{what}: Redis cannot be reached ({type(error).__name__}: {error}); send it again "
            "once Redis is back",
            code="coordination_unavailable",
        ) from error


MAX_SETTING = 2**31 - 1
"""The largest cap, rate or quota the store holds (a 32-bit integer column on PostgreSQL)."""


UNSET: Any = object()
"""A cap `change_caps` was not given, or a limit `set_limits` was not: it stays as it is."""


def _check_limited_tenant(tenant_id: str) -> None:
    """Refuse a limit set on a tenant no limit can act on: an id that cannot be a tenant's
    (`check_tenant_id`), and the reserved `system`, whose runs (a deployment's) make no
    GATEWAY call for a rate to count and take no quota, so a limit there would be shown and
    audited yet do nothing. `InvalidRequest(code="invalid_tenant")`, as a submission or a
    key for it is refused. A reset is not refused: it removes a limit stored before."""
    check_tenant_id(tenant_id)
    if tenant_id == SYSTEM_TENANT:
        raise InvalidRequest(
            f"{SYSTEM_TENANT!r} is the tenant of the engine's own runs (deployments' "
            "gradual_deploy runs), reserved: they make no calls and take no quota, so no rate "
            "limit or quota applies to it; set one on a tenant whose runs you mean to limit",
            code="invalid_tenant",
            details={"allowed": TENANT_ID_RULE, "reserved": [SYSTEM_TENANT]},
        )


def _rate(rate_per_second: float | None) -> float | None:
    """A destination's calls per second: a positive number, or None (no rate)."""
    if rate_per_second is not None and not (
        isinstance(rate_per_second, int | float)
        and math.isfinite(rate_per_second)
        and rate_per_second > 0
    ):
        raise InvalidRequest(
            f"ratePerSecond must be a positive number, got {rate_per_second!r}",
            code="invalid_caps",
        )
    return rate_per_second


def _whole(value: int, least: int, what: str, code: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_SETTING:
        raise InvalidRequest(
            f"{what} must be a whole number from {least} to {MAX_SETTING}, got {value!r}",
            code=code,
        )
    return value


class SettingsOperations:
    """Operator settings: destination caps, tenant rate limits and run quotas, services."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    # ── destination caps ─────────────────────────────────────────────────────────────────

    @store_boundary
    async def set_caps(
        self,
        destination: str,
        max_concurrency: int,
        rate_per_second: float | None = None,
        *,
        actor: str | None = None,
    ) -> CapsView:
        """Cap a destination for every worker: at most `max_concurrency` calls in flight (≥ 1)
        and, if given, `rate_per_second` calls started per second (> 0); both are replaced.
        Stored durably and applied at once. Refuses (`invalid_destination`) a key no call can
        have (see `engine.operations.destination_keys`), and (`invalid_caps`) bounds out of
        range."""
        return await self.change_caps(
            destination,
            max_concurrency=max_concurrency,
            rate_per_second=rate_per_second,
            actor=actor,
        )

    @store_boundary
    async def change_caps(
        self,
        destination: str,
        *,
        max_concurrency: int = UNSET,
        rate_per_second: float | None = UNSET,
        actor: str | None = None,
    ) -> CapsView:
        """Change only the caps given (`rate_per_second=None` removes the rate) and keep the
        other as the destination has it, atomically: two changes of different caps at once
        both survive, in the store and in Redis (`store.change_destination_caps` applies the
        merged caps to Redis while the row is locked). A destination without caps of its own
        needs `max_concurrency` (`caps_not_set` otherwise); nothing given is `invalid_caps`,
        as are bounds out of range; a key no call can have is `invalid_destination`."""
        check_destination(destination)
        changes: dict[str, Any] = {}
        if max_concurrency is not UNSET:
            changes["max_concurrency"] = _whole(
                max_concurrency, 1, "maxConcurrency", "invalid_caps"
            )
        if rate_per_second is not UNSET:
            changes["rate_per_second"] = _rate(rate_per_second)
        if not changes:
            raise InvalidRequest(
                "give what to change: maxConcurrency, ratePerSecond or both", code="invalid_caps"
            )
        await self._require_coordination(f"capping {destination}")

        async def apply(cap: int, rate: float | None) -> None:
            with _coordination(f"the caps of {destination} were not changed"):
                await self._runtime.admission.set_caps(destination, DestinationCaps(cap, rate))

        merged = await self._runtime.store.change_destination_caps(
            destination, changes, apply, actor=actor
        )
        if merged is None:
            raise InvalidRequest(
                f"{destination} has no caps of its own yet: give maxConcurrency with ratePerSecond",
                code="caps_not_set",
            )
        cap, rate = merged
        return CapsView(destination=destination, max_concurrency=cap, rate_per_second=rate)

    @store_boundary
    async def remove_caps(self, destination: str, *, actor: str | None = None) -> bool:
        """Remove a destination's caps, the durable copy and the one in Redis: the default cap
        applies again. True when it had caps; False when it had none (nothing to do). A key
        no call can have is refused (`invalid_destination`) unless caps are stored under it
        (stored before keys were checked: they can still be removed)."""
        store = self._runtime.store
        stored = await store.get_destination_caps(destination)
        if stored is None:
            check_destination(destination)
        await self._require_coordination(f"removing the caps of {destination}")
        await store.remove_destination_caps(destination, actor=actor)
        with _coordination(f"the caps of {destination} were removed from the store only"):
            operative = await self._runtime.admission.get_caps(destination)
            await self._runtime.admission.remove_caps(destination)
        return stored is not None or operative is not None

    async def reset_breakers(
        self, destination: str, tenant_id: str | None = None, *, actor: str | None = None
    ) -> BreakersReset:
        """Close the destination's open or half-open breakers for every worker at once (the
        global layer and every tenant layer, or only `tenant_id`'s tenant layer), once the
        destination is fixed: retried steps then call it now, not after the reset timeout.
        Answers what was closed (nothing: all were closed already). A destination admission
        never saw is `destination_not_found`, a key no call can have `invalid_destination`
        (as for caps: `check_destination`), a `tenant_id` no tenant has (nothing closed)
        `tenant_not_found`; Redis down, `coordination_unavailable`.
        The steps waiting behind those breakers become claimable at once and the workers are
        woken (`steps_released`: how many). Closing any is an audit event of `actor`
        (`destination.breakers_reset`), written after Redis changed: a database down then is
        logged, not answered (the reset held)."""
        check_destination(destination)
        if tenant_id is not None:
            check_tenant_id(tenant_id)
        await self._require_coordination(f"closing the breakers of {destination}")
        with _coordination(f"the breakers of {destination} were not closed"):
            closed = await self._runtime.admission.reset_breakers(destination, tenant_id)
        if closed is None:
            known = [d.destination for d in (await self._runtime.admission.snapshot()).destinations]
            close = close_names(destination, known)
            meant = f"; {did_you_mean(close)}" if close else ""
            raise NotFound(
                f"no call has reached {destination}, so it has no breakers{meant} "
                "(`schemabridge destinations list` shows the known ones)",
                code="destination_not_found",
            )
        if tenant_id is not None and not closed:
            await self._require_known_tenant(destination, tenant_id)
        reset = BreakersReset(
            destination=destination,
            tenant_id=tenant_id,
            closed=[
                ClosedBreakerView(layer=c.layer.value, tenant_id=c.tenant_id, was=c.was.value)
                for c in closed
            ],
            steps_released=await self._release_parks(destination, tenant_id),
        )
        if reset.closed:
            await self._audit_reset(reset, actor)
        return reset

    async def _require_known_tenant(self, destination: str, tenant_id: str) -> None:
        """A tenant layer found closed of a tenant the engine does not know (no runs, API
        keys or settings, never seen by the rate limiter: what `tenants` lists) is a typo's,
        not a closed breaker: "closed already" would send the operator away while the
        tenant meant still waits behind its open breaker. `tenant_not_found`, naming the
        known tenants close to it."""
        known = [view.tenant_id for view in await self.tenants()]
        if tenant_id in known or candidate_layer_of(tenant_id) in known:
            return
        close = close_names(tenant_id, known)
        meant = f"; {did_you_mean(close)}" if close else ""
        raise NotFound(
            f"no tenant {tenant_id!r} is known (no runs, API keys or settings), so no call of "
            f"it has reached {destination} and it has no breaker there{meant} "
            "(`schemabridge tenants list` names the known tenants)",
            code="tenant_not_found",
            details={"tenantId": tenant_id, "meant": close},
        )

    async def _release_parks(self, destination: str, tenant_id: str | None) -> int:
        """The steps waiting behind the breakers just closed run now, not at their redispatch
        or park's end (a reset says the destination is fixed), even when every layer was
        closed already (they may still wait out a park taken while it was open); the workers
        are woken to claim them. A database down then is logged, not answered: the reset
        held, and the steps run at their own time."""
        try:
            released = await self._runtime.store.release_breaker_parks(destination, tenant_id)
        except STORE_ERRORS as exc:
            if not store_unreachable(exc):
                raise
            logger.error(
                "the breakers of %s were closed, but the steps waiting behind them could not "
                "be released (database unavailable: %s); they run at their own time",
                destination,
                exc,
            )
            return 0
        if released:
            await self._runtime.wakeup.notify()
        return released

    async def _audit_reset(self, reset: BreakersReset, actor: str | None) -> None:
        closed = [c.model_dump(mode="json", by_alias=True) for c in reset.closed]
        try:
            await self._runtime.store.append_alone(
                actor=actor,
                action=AuditAction.BREAKERS_RESET,
                subject=AuditSubject.DESTINATION,
                subject_id=reset.destination,
                detail={"tenantId": reset.tenant_id, "closed": closed},
            )
        except STORE_ERRORS as exc:
            if not store_unreachable(exc):
                raise
            logger.error(
                "the breakers of %s were closed by %s, but the audit event could not be "
                "written (database unavailable: %s)",
                reset.destination,
                actor,
                exc,
            )

    @store_boundary
    async def destinations(self) -> list[DestinationView]:
        """Every destination admission has seen or that has stored caps, by key: its cap,
        AIMD limit, calls in flight, breaker layers and retry budget."""
        stored = {
            destination: CapsView(
                destination=destination, max_concurrency=cap, rate_per_second=rate
            )
            for destination, cap, rate in await self._runtime.store.list_destination_caps()
        }
        with _coordination("reading the admission state"):
            snapshot = await self._runtime.admission.snapshot(also=stored.keys())
        return [DestinationView.of(d, stored.get(d.destination)) for d in snapshot.destinations]

    @store_boundary
    async def admission_state(self) -> dict[str, Any]:
        """Admission's raw state, JSON-ready (`AdmissionSnapshot.as_dict()`: every destination
        and tenant it has seen), with the stored caps (`configuredCaps`) and tenant rate
        limits (`configuredTenantRates`): what `schemabridge destinations show` prints."""
        with _coordination("reading the admission state"):
            data = (await self._runtime.admission.snapshot()).as_dict()
        data["configuredCaps"] = [
            {"destination": d, "maxConcurrency": c, "ratePerSecond": r}
            for d, c, r in await self._runtime.store.list_destination_caps()
        ]
        data["configuredTenantRates"] = [
            {"tenantId": t, "perMinute": n}
            for t, n in await self._runtime.store.list_tenant_rates()
        ]
        return data

    # ── tenants ──────────────────────────────────────────────────────────────────────────

    @store_boundary
    async def set_tenant_rate(
        self, tenant_id: str, per_minute: int, *, actor: str | None = None
    ) -> TenantRateView:
        """Limit a tenant to `per_minute` GATEWAY steps a minute (≥ 1; each step counted once
        however many attempts it takes), for every worker at once (`invalid_rate` below 1;
        the reserved tenant `system`, `invalid_tenant`)."""
        _check_limited_tenant(tenant_id)
        _whole(per_minute, 1, "the rate (GATEWAY steps a minute)", "invalid_rate")
        await self._apply_tenant_rate(tenant_id, per_minute, actor)
        return await self._rate_view(tenant_id, per_minute)

    @store_boundary
    async def reset_tenant_rate(
        self, tenant_id: str, *, actor: str | None = None
    ) -> TenantRateView:
        """Remove a tenant's rate limit: the default (`TENANT_RATE_PER_MINUTE`) applies again.
        Idempotent: a tenant without one is left as it is."""
        check_tenant_id(tenant_id)
        await self._apply_tenant_rate(tenant_id, None, actor)
        return await self._rate_view(tenant_id, None)

    @store_boundary
    async def set_quota(
        self, tenant_id: str, max_runs: int, *, actor: str | None = None
    ) -> QuotaView:
        """Let a tenant create `max_runs` runs (≥ 0): root runs submitted and started over
        take one each as they are created, and a spawner checks it before a fan-out, whose
        children take one each. Changing an existing quota keeps its count of runs used
        (`invalid_quota` below 0; the reserved tenant `system`, `invalid_tenant`)."""
        _check_limited_tenant(tenant_id)
        _whole(max_runs, 0, "the quota", "invalid_quota")
        return _quota_view(*await self._runtime.store.set_quota(tenant_id, max_runs, actor=actor))

    @store_boundary
    async def reset_quota(self, tenant_id: str, *, actor: str | None = None) -> bool:
        """Remove a tenant's run quota: unlimited again, and its count of runs used restarts
        from 0 if a quota is set later. True when it had one; False when it had none."""
        check_tenant_id(tenant_id)
        return await self._runtime.store.reset_quota(tenant_id, actor=actor)

    @store_boundary
    async def set_limits(
        self,
        tenant_id: str,
        *,
        rate_per_minute: int | None = UNSET,
        max_runs: int | None = UNSET,
        actor: str | None = None,
    ) -> TenantView:
        """Set a tenant's rate limit and run quota (`PUT /tenants/{id}/limits`): each one
        given is set (None: back to the default, unlimited for the quota), each on its own
        and idempotently; one left `UNSET` stays as it is. Answers the tenant's settings
        after. A limit set on a tenant none can act on is refused before anything is
        changed (`_check_limited_tenant`), also the reset given beside it."""
        if any(value is not UNSET and value is not None for value in (rate_per_minute, max_runs)):
            _check_limited_tenant(tenant_id)
        if rate_per_minute is None:
            await self.reset_tenant_rate(tenant_id, actor=actor)
        elif rate_per_minute is not UNSET:
            await self.set_tenant_rate(tenant_id, rate_per_minute, actor=actor)
        if max_runs is None:
            await self.reset_quota(tenant_id, actor=actor)
        elif max_runs is not UNSET:
            await self.set_quota(tenant_id, max_runs, actor=actor)
        return await self.tenant(tenant_id)

    @store_boundary
    async def tenants(self) -> list[TenantView]:
        """Every tenant that has runs, API keys, a stored rate limit or quota, or that the
        rate limiter has seen, by id."""
        store = self._runtime.store
        rates = dict(await store.list_tenant_rates())
        quotas = {t: (m, u) for t, m, u in await store.list_quotas()}
        known = await store.tenants_with_runs_or_keys()
        with _coordination("reading the tenants' rate windows"):
            seen = await self._runtime.admission.backend.tenants()
        return [
            TenantView(
                tenant_id=tenant_id,
                rate=await self._rate_view(tenant_id, rates.get(tenant_id)),
                quota=None if tenant_id not in quotas else _quota_view(*quotas[tenant_id]),
                reserved=tenant_id == SYSTEM_TENANT,
            )
            for tenant_id in sorted({*known, *seen, *rates, *quotas})
        ]

    @store_boundary
    async def tenant(self, tenant_id: str) -> TenantView:
        """One tenant's rate limit and its use in the current window, and its quota. Any id
        has settings (the defaults until an operator sets some)."""
        check_tenant_id(tenant_id)
        store = self._runtime.store
        quota = await store.get_quota(tenant_id)
        return TenantView(
            tenant_id=tenant_id,
            rate=await self._rate_view(tenant_id, await store.get_tenant_rate(tenant_id)),
            quota=None if quota is None else _quota_view(*quota),
            reserved=tenant_id == SYSTEM_TENANT,
        )

    # ── services ─────────────────────────────────────────────────────────────────────────

    async def services(self) -> list[ServiceView]:
        """Every service that ever sent a heartbeat, by name: up while its heartbeat is at
        most `HEARTBEAT_TTL_S` old, else down with when it was last seen."""
        runtime = self._runtime
        ttl_s = float(runtime.settings.heartbeat_ttl_s)
        with _coordination("reading the services' heartbeats"):
            statuses = await read_services(runtime.redis, runtime.clock, ttl_s=ttl_s)
        return [ServiceView.of(status) for status in statuses]

    # ── internals ────────────────────────────────────────────────────────────────────────

    async def _require_coordination(self, what: str) -> None:
        """Refuse before anything is written when Redis does not answer. The probe gets the
        time any command gets: the first one on a client also connects, and a 1 s probe
        refused operators' changes on a loaded host with Redis up."""
        if not await redis_ok(self._runtime.admission_redis, timeout_s=COMMAND_TIMEOUT_S):
            raise Unavailable(
                f"{what}: Redis cannot be reached; nothing was changed, send it again once "
                "Redis is back",
                code="coordination_unavailable",
            )

    async def _apply_tenant_rate(
        self, tenant_id: str, per_minute: int | None, actor: str | None
    ) -> None:
        """Store the tenant's rate limit and write it to Redis while its row is locked
        (`store.change_tenant_rate`): concurrent changes leave both copies alike, and Redis
        failing rolls the stored change back."""
        await self._require_coordination(f"setting the rate limit of tenant {tenant_id}")

        async def apply(limit: int | None) -> None:
            with _coordination(f"the rate limit of tenant {tenant_id} was not changed"):
                await self._runtime.admission.set_tenant_limit(tenant_id, limit)

        await self._runtime.store.change_tenant_rate(tenant_id, per_minute, apply, actor=actor)

    async def _rate_view(self, tenant_id: str, stored: int | None) -> TenantRateView:
        """`stored`, the durable limit (None: none), wins over Redis's copy: it is the one
        the next admission of the tenant's steps anywhere loads."""
        rate = self._runtime.admission.rate
        with _coordination(f"reading the rate window of tenant {tenant_id}"):
            used, operative = await rate.usage(tenant_id)
        return TenantRateView(
            per_minute=operative if stored is None else stored,
            configured=stored is not None,
            used=used,
            window_s=rate.config.window_s,
        )


def _quota_view(max_runs: int, used_runs: int) -> QuotaView:
    return QuotaView(max_runs=max_runs, used_runs=used_runs, runs_left=max(0, max_runs - used_runs))
