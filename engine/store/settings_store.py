"""Operator settings in the store: tenant run quotas, destination caps, tenant rate limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import audit
from engine.store import operator_settings as settings_
from engine.store.core import (
    StoreCore,
)
from engine.store.models import AuditAction, AuditSubject


class OperatorSettingsStore(StoreCore):
    """The durable copies of operator settings (admission caches caps and rates in Redis)."""

    async def quota_left(self, tenant_id: str) -> int | None:
        async with self._engines.read.connect() as conn:
            return await settings_.quota_left(conn, tenant_id)

    async def set_quota(
        self, tenant_id: str, max_runs: int, *, actor: str | None = None
    ) -> tuple[int, int]:
        """Set the tenant's run quota (its count of used runs is kept when it had one), with
        its audit event (`tenant.quota_set` by `actor`). Returns (max_runs, used_runs)."""
        async with self._engines.write.begin() as conn:
            quota = await settings_.set_quota(conn, tenant_id, max_runs)
            await self._audit(
                conn,
                actor,
                AuditAction.QUOTA_SET,
                AuditSubject.TENANT,
                tenant_id,
                detail={"maxRuns": max_runs},
            )
            return quota

    async def get_quota(self, tenant_id: str) -> tuple[int, int] | None:
        """(max_runs, used_runs) of the tenant's quota; None = unlimited."""
        async with self._engines.read.connect() as conn:
            return await settings_.read_quota(conn, tenant_id)

    async def list_quotas(self) -> list[tuple[str, int, int]]:
        """(tenant id, max_runs, used_runs) of every quota, by tenant id."""
        async with self._engines.read.connect() as conn:
            return await settings_.list_quotas(conn)

    async def tenants_with_runs_or_keys(self) -> set[str]:
        """Every tenant id that has a run or an API key (a cheap scan: one index seek per
        tenant)."""
        async with self._engines.read.connect() as conn:
            return await settings_.tenants_with_runs_or_keys(conn)

    async def reset_quota(self, tenant_id: str, *, actor: str | None = None) -> bool:
        """Remove the tenant's quota: unlimited again, with its audit event
        (`tenant.quota_reset` by `actor`). False, and no event, when it had none."""
        async with self._engines.write.begin() as conn:
            removed = await settings_.delete_quota(conn, tenant_id)
            if removed:
                await self._audit(
                    conn, actor, AuditAction.QUOTA_RESET, AuditSubject.TENANT, tenant_id
                )
            return removed

    # ── destination caps (the durable copy; admission caches them in Redis) ──────────────────

    async def change_destination_caps(
        self,
        destination: str,
        changes: Mapping[str, Any],
        apply: Callable[[int, float | None], Awaitable[None]],
        *,
        actor: str | None = None,
    ) -> tuple[int, float | None] | None:
        """Set the caps in `changes` (`max_concurrency`, `rate_per_second`; the others are
        kept) atomically, then `apply` the caps that result (to Redis) before the transaction
        commits: the row stays locked meanwhile, so concurrent changes reach Redis in the order
        they reached the store and the cache ends as the durable row does. `apply` raising
        rolls the change back. None, with nothing changed or applied, when only the rate was
        given and the destination has no caps of its own. The change is an audit event
        (`destination.caps_set` by `actor`: what was asked, and the caps that result)."""
        async with self._engines.write.begin() as conn:
            merged = await settings_.change_caps(conn, destination, changes, self._clock.now())
            if merged is not None:
                asked = {_CAP_NAMES[column]: value for column, value in changes.items()}
                cap, rate = merged
                await self._audit(
                    conn,
                    actor,
                    AuditAction.CAPS_SET,
                    AuditSubject.DESTINATION,
                    destination,
                    detail={"changed": asked, "maxConcurrency": cap, "ratePerSecond": rate},
                )
                await apply(*merged)
            return merged

    async def remove_destination_caps(self, destination: str, *, actor: str | None = None) -> bool:
        """Remove the destination's stored caps, with an audit event
        (`destination.caps_removed` by `actor`, naming the caps removed); False, and no
        event, when it had none."""
        async with self._engines.write.begin() as conn:
            removed = await settings_.delete_caps(conn, destination)
            if removed is not None:
                cap, rate = removed
                await self._audit(
                    conn,
                    actor,
                    AuditAction.CAPS_REMOVED,
                    AuditSubject.DESTINATION,
                    destination,
                    detail={"maxConcurrency": cap, "ratePerSecond": rate},
                )
            return removed is not None

    async def get_destination_caps(self, destination: str) -> tuple[int, float | None] | None:
        async with self._engines.read.connect() as conn:
            return await settings_.read_caps(conn, destination)

    async def list_destination_caps(self) -> list[tuple[str, int, float | None]]:
        async with self._engines.read.connect() as conn:
            return await settings_.list_caps(conn)

    async def change_tenant_rate(
        self,
        tenant_id: str,
        per_minute: int | None,
        apply: Callable[[int | None], Awaitable[None]],
        *,
        actor: str | None = None,
    ) -> None:
        """Store a tenant's rate limit (None: back to the default), then `apply` it (to
        Redis) before the transaction commits: the tenant's row stays locked meanwhile, so
        concurrent changes reach Redis in the order they reached the store and the cache ends
        as the durable row does. `apply` raising rolls the change back, its audit event
        (`tenant.rate_set` or `tenant.rate_reset` by `actor`) with it."""
        async with self._engines.write.begin() as conn:
            await settings_.change_tenant_rate(conn, tenant_id, per_minute, self._clock.now())
            if per_minute is None:
                await self._audit(
                    conn, actor, AuditAction.RATE_RESET, AuditSubject.TENANT, tenant_id
                )
            else:
                await self._audit(
                    conn,
                    actor,
                    AuditAction.RATE_SET,
                    AuditSubject.TENANT,
                    tenant_id,
                    detail={"perMinute": per_minute},
                )
            await apply(per_minute)

    async def get_tenant_rate(self, tenant_id: str) -> int | None:
        async with self._engines.read.connect() as conn:
            return await settings_.read_tenant_rate(conn, tenant_id)

    async def list_tenant_rates(self) -> list[tuple[str, int]]:
        async with self._engines.read.connect() as conn:
            return await settings_.list_tenant_rates(conn)

    async def _audit(
        self,
        conn: AsyncConnection,
        actor: str | None,
        action: AuditAction,
        subject: AuditSubject,
        subject_id: str,
        *,
        detail: dict[str, Any] | None = None,
    ) -> None:
        await audit.append(
            conn,
            at=self._clock.now(),
            actor=actor,
            action=action,
            subject=subject,
            subject_id=subject_id,
            detail=detail,
        )


_CAP_NAMES = {"max_concurrency": "maxConcurrency", "rate_per_second": "ratePerSecond"}
"""A cap's column, as the API and the audit name it."""
