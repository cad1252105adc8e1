"""Every Redis key admission uses, in one place (heartbeats and wake-ups have theirs in
`engine.coordination.keys`).

The breaker namespaces (`cb:tenant:…`, `cb:global:…`) are part of the operator contract
(docs/architecture.md, 'Redis keys'): monitoring and scripts read them. Everything else is
prefixed `sb:`. Functions, not string concatenation at call sites, so a key's shape is defined
once.
"""

from __future__ import annotations

# ── circuit breakers (key names are part of the operator contract) ─────────────────────────


def breaker_tenant(destination: str, tenant_id: str) -> str:
    """Prefix of the tenant-layer breaker's keys: `cb:tenant:{key}:{tenantId}`."""
    return f"cb:tenant:{destination}:{tenant_id}"


def breaker_global(destination: str) -> str:
    """Prefix of the global-layer breaker's keys: `cb:global:{key}`."""
    return f"cb:global:{destination}"


# ── admission, limits, budgets ─────────────────────────────────────────────────────────────


def aimd(destination: str) -> str:
    """Hash with the destination's AIMD state (limit, in-flight accounting)."""
    return f"sb:aimd:{destination}"


def slots(destination: str) -> str:
    """Sorted set of admission slot leases (member = token, score = lease expiry)."""
    return f"sb:slots:{destination}"


def destination_caps(destination: str) -> str:
    """Hash `{maxConcurrency, ratePerSecond}` cached from the store."""
    return f"sb:caps:{destination}"


def destination_rate(destination: str) -> str:
    """Sorted set window for the destination's `ratePerSecond`."""
    return f"sb:rate:{destination}"


def tenant_rate(tenant_id: str) -> str:
    """Sorted set sliding window of the tenant's items (1,000/min by default)."""
    return f"sb:tenant-rate:{tenant_id}"


def retry_budget(destination: str) -> str:
    """Token bucket limiting retries to a fraction of traffic."""
    return f"sb:retry-budget:{destination}"


DESTINATIONS_SET = "sb:destinations"
"""Set of every destination key seen, for the visibility API."""


# ── breaker sub-keys, visibility sets, tenant overrides ────────────────────────────────────


def breaker_state(layer_prefix: str) -> str:
    """Hash `{state, failures, opened_at, successes, cause}` of one breaker layer.

    `layer_prefix` is `breaker_tenant(...)` or `breaker_global(...)`, so the key stays inside
    the operator contract's `cb:tenant:{key}:{tenantId}:*` / `cb:global:{key}:*` namespaces.
    """
    return f"{layer_prefix}:state"


def breaker_probes(layer_prefix: str) -> str:
    """Sorted set of one layer's half-open probe permits (member = token, score = expiry)."""
    return f"{layer_prefix}:probes"


def breaker_tenants(destination: str) -> str:
    """Set of tenant ids that have sent to `destination`, for the visibility API."""
    return f"sb:breaker-tenants:{destination}"


TENANTS_SET = "sb:tenants"
"""Set of every tenant id seen by the rate limiter, for the visibility API."""

TENANT_RATE_LIMITS = "sb:tenant-rate-limits"
"""Hash tenant id → items allowed per window, overriding the configured default."""

SETTINGS_SEEDED = "sb:settings-seeded"
"""Set once the operator settings (tenant rate limits, destination caps) were copied from the
database into this Redis. Absent: Redis lost them (a restart without its data) or never had
them, and the exchange script refuses to apply defaults until they are copied back."""
