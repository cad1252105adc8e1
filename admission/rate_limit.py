"""Tenant rate limiter: a sliding window of items per tenant (docs/architecture.md,
'Tenant rate window').

Each `check` takes one item from the tenant's window, a Redis sorted set whose members are
unique per call (two calls at the same timestamp are two items) and whose scores are the
injected clock's time. An item counts while `now - window_s < t`, so it stops counting
exactly `window_s` after it was taken. The default is 1,000 items per 60 s; a tenant's limit
can be overridden statically (`TenantRateConfig.overrides`) or at run time in Redis
(`set_limit`, shared by every worker; it wins over the static value).

At the limit the caller is told to delay the step by `delay_s` (5 s): a tenant that floods
the system is slowed down, never failed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from admission.backend import CoordinationBackend
from admission.config import TenantRateConfig
from schemas.clock import Clock
from schemas.errors import StepDeferred


@dataclass(frozen=True)
class RateDecision:
    """Whether a tenant's item may go now; if not, how long to delay it."""

    allowed: bool
    delay_s: float
    """0 when allowed; otherwise the configured delay (5 s by default)."""
    used: int
    """Items in the tenant's window (including this one if allowed)."""
    limit: int
    """Items the tenant may have in one window."""
    retry_after_s: float
    """0 when allowed; otherwise when the oldest item leaves the window (informational)."""


class TenantLimitSource(Protocol):
    """Where operator-set tenant limits come from (the database)."""

    async def get_tenant_limit(self, tenant_id: str) -> int | None:
        """The tenant's items per window, or None if it has no override."""
        ...


class TenantRateLimited(StepDeferred):
    """The tenant's window is full: delay the step by `decision.delay_s`, do not fail it."""

    code = "tenant_rate_limited"

    def __init__(self, tenant_id: str, decision: RateDecision) -> None:
        super().__init__(
            f"tenant {tenant_id} at its rate limit ({decision.used}/{decision.limit} items per "
            "window)"
        )
        self.tenant_id = tenant_id
        self.decision = decision


class TenantRateLimiter:
    """Checks and configures tenants' windows."""

    def __init__(
        self, backend: CoordinationBackend, clock: Clock, config: TenantRateConfig | None = None
    ) -> None:
        self._backend = backend
        self._clock = clock
        self.config = config or TenantRateConfig()

    def default_limit(self, tenant_id: str) -> int:
        """The tenant's items per window unless Redis holds an override for it."""
        return self.config.overrides.get(tenant_id, self.config.limit)

    async def check(self, tenant_id: str) -> RateDecision:
        """Take one item from the tenant's window if it has room."""
        allowed, used, limit, wait_s = await self._backend.tenant_take(
            tenant_id,
            member=uuid.uuid4().hex,
            now=self._clock.now(),
            window_s=self.config.window_s,
            default_limit=self.default_limit(tenant_id),
        )
        if allowed:
            return RateDecision(True, 0.0, used, limit, 0.0)
        return RateDecision(False, self.config.delay_s, used, limit, max(0.0, wait_s))

    async def set_limit(self, tenant_id: str, limit: int | None) -> None:
        """Override the tenant's items per window for every worker; None removes it."""
        if limit is not None and limit < 1:
            raise ValueError("a tenant rate limit must be at least 1")
        await self._backend.write_tenant_limit(tenant_id, limit)

    async def usage(self, tenant_id: str) -> tuple[int, int]:
        """(items in the tenant's window now, its limit), without taking an item."""
        used, override = await self._backend.read_tenant_usage(
            tenant_id, self._clock.now(), self.config.window_s
        )
        return used, override if override is not None else self.default_limit(tenant_id)
