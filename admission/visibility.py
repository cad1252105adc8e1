"""Read-only views of admission state, for the API, the UI and operators (issue 5, item 6)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from admission.aimd import Aimd, slots
from admission.backend import DestinationRecord
from admission.breaker import BreakerConfig, BreakerState, LayerView, cause_words
from admission.config import AdmissionConfig
from admission.retry_budget import RetryBudget


@dataclass(frozen=True)
class LayerStatus:
    """One breaker layer as the next request would see it."""

    state: BreakerState
    """Effective state: an open layer past its reset timeout shows as half-open."""
    failures: int
    """Consecutive failures while closed."""
    successes: int
    """Probe successes in the current half-open trial."""
    probes: int
    """Probe permits held now."""
    opened_at: float | None
    """Epoch seconds of the latest opening; None if it never opened."""
    seconds_until_half_open: float
    """0 unless open."""
    opened_by: str | None = None
    """What the failure that last opened it was, in words ("an HTTP 500", "a timeout"); None
    when it is closed or opened before causes were kept."""

    @classmethod
    def of(cls, view: LayerView, now: float, config: BreakerConfig) -> LayerStatus:
        return cls(
            state=view.effective(now, config),
            failures=view.failures,
            successes=view.successes,
            probes=view.probes,
            opened_at=view.opened_at or None,
            seconds_until_half_open=view.seconds_until_half_open(now, config),
            opened_by=cause_words(view.cause)
            if view.cause and view.state is not BreakerState.CLOSED
            else None,
        )

    @property
    def pristine(self) -> bool:
        """Closed with nothing counted: not worth listing per tenant."""
        return self.state is BreakerState.CLOSED and self.failures == 0


@dataclass(frozen=True)
class DestinationState:
    """Everything admission knows about one destination."""

    destination: str
    limit: float
    """AIMD limit (fractional), clamped to the cap."""
    slots: int
    """Calls the limit admits at once (⌊limit⌋, within [1, cap])."""
    in_flight: int
    """Live slot leases (expired ones excluded)."""
    cap: int
    """`max_concurrency` in force (the default cap if none is configured)."""
    cap_configured: bool
    rate_per_second: float | None
    cuts: int
    """Multiplicative decreases so far (the AIMD epoch)."""
    growth_held_s: float
    """Seconds until the limit may grow again (the last cut's Retry-After); 0 if it may."""
    retry_tokens: float
    retry_allowed: bool
    global_breaker: LayerStatus
    tenant_breakers: dict[str, LayerStatus]
    """Tenant layers that are not closed-with-zero-failures, by tenant id."""


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's sliding rate window."""

    tenant_id: str
    used: int
    """Items in the window now."""
    limit: int
    window_s: float


@dataclass(frozen=True)
class AdmissionSnapshot:
    """Admission state at `taken_at` (epoch seconds)."""

    taken_at: float
    destinations: list[DestinationState]
    tenants: list[TenantUsage]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: nested dicts and lists, enums as their string values."""
        data: dict[str, Any] = asdict(self, dict_factory=_plain)
        return data


def _plain(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value.value if isinstance(value, Enum) else value for key, value in items}


def destination_state(
    destination: str, record: DestinationRecord, now: float, config: AdmissionConfig
) -> DestinationState:
    """Combine a destination's raw record with the configuration's defaults."""
    cap = record.max_concurrency or config.default_max_concurrency
    aimd = Aimd(config.aimd)
    limit = aimd.clamp(record.limit, cap) if record.limit is not None else aimd.initial(cap).limit
    budget = RetryBudget(config.retry_budget)
    tokens = budget.full()
    if record.budget_tokens is not None:
        elapsed = now - (record.budget_at if record.budget_at is not None else now)
        tokens = budget.refilled(record.budget_tokens, elapsed)
    tenant_layers = {
        tenant_id: LayerStatus.of(view, now, config.tenant_breaker)
        for tenant_id, view in record.tenant_layers.items()
    }
    return DestinationState(
        destination=destination,
        limit=limit,
        slots=slots(limit, cap),
        in_flight=record.in_flight,
        cap=cap,
        cap_configured=record.max_concurrency is not None,
        rate_per_second=record.rate_per_second,
        cuts=record.epoch,
        growth_held_s=max(0.0, record.hold_until - now),
        retry_tokens=tokens,
        retry_allowed=budget.allows_retry(tokens),
        global_breaker=LayerStatus.of(record.global_layer, now, config.global_breaker),
        tenant_breakers={t: s for t, s in tenant_layers.items() if not s.pristine},
    )
