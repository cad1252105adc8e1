"""Configuration of the admission library: one frozen object, built once and passed down.

The tenant window's and the retry budget's settings live here rather than beside the classes
that apply them, because those classes talk to Redis through `admission.backend`, which needs
the settings too: kept apart, the backend imports no module that imports it back. (AIMD's and
the breakers' settings stay with their pure arithmetic in `aimd` and `breaker`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from admission.aimd import AimdConfig
from admission.breaker import GLOBAL_DEFAULT, TENANT_DEFAULT, BreakerConfig


@dataclass(frozen=True)
class TenantRateConfig:
    """Every tenant's window."""

    limit: int = 1_000
    """Items per window for a tenant without an override. Default 1,000."""
    window_s: float = 60.0
    """Window length in seconds. Default 60 (one minute)."""
    delay_s: float = 5.0
    """How long a step at the limit is delayed. Default 5 s."""
    overrides: Mapping[str, int] = field(default_factory=dict)
    """Static per-tenant limits (tenant id → items per window)."""

    def __post_init__(self) -> None:
        if self.limit < 1 or any(v < 1 for v in self.overrides.values()):
            raise ValueError("tenant rate limits must be at least 1")
        if self.window_s <= 0 or self.delay_s < 0:
            raise ValueError("window_s must be positive and delay_s not negative")


@dataclass(frozen=True)
class RetryBudgetConfig:
    """Shape of every destination's retry budget."""

    max_tokens: float = 100.0
    """Bucket size. Default 100: retries stop after 50 net failures."""
    token_ratio: float = 0.1
    """Tokens a success earns back. Default 0.1 (retries sustain up to ~10 % failures)."""
    refill_per_s: float = 1.0
    """Tokens the bucket regains per second by itself. Default 1 (see `admission.retry_budget`)."""

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        if not 0 < self.token_ratio <= self.max_tokens:
            raise ValueError("token_ratio must be in (0, max_tokens]")
        if self.refill_per_s < 0:
            raise ValueError("refill_per_s must not be negative")


@dataclass(frozen=True)
class AdmissionConfig:
    """Everything `Admission` needs besides a Redis client and a clock."""

    aimd: AimdConfig = field(default_factory=AimdConfig)
    tenant_breaker: BreakerConfig = TENANT_DEFAULT
    """Tenant layer. Default 5 failures, 30 s reset, 2 half-open successes."""
    global_breaker: BreakerConfig = GLOBAL_DEFAULT
    """Global layer. Default 15 failures, 60 s reset, 3 half-open successes."""
    tenant_rate: TenantRateConfig = field(default_factory=TenantRateConfig)
    retry_budget: RetryBudgetConfig = field(default_factory=RetryBudgetConfig)
    default_max_concurrency: int = 100
    """Cap of a destination with no `DestinationCaps`. Default 100."""
    default_lease_s: float = 90.0
    """Slot (and probe permit) lease when `admit` is not given one. Default 90 s: longer than
    the longest timeout tier (60 s) plus margin. In a worker the engine's guard asks for the
    step's lease instead and renews it while the call runs; outside one, for the call's
    timeout plus 30 s when that is longer (`timeoutMs` goes up to 10 minutes)."""
    wait_poll_initial_s: float = 0.01
    """First pause between admission attempts while waiting for a slot. Default 10 ms."""
    wait_poll_max_s: float = 0.25
    """Longest pause between attempts (a release in this process wakes a waiter at once;
    the pause only bounds how late a release in another process is noticed). Default 250 ms."""
    max_wait_attempts: int = 10_000
    """Hard bound on attempts in one `admit`, whatever the timeout. Default 10,000."""
    state_ttl_s: float = 86_400.0
    """Real-time expiry of idle breaker and budget keys (garbage collection only; far longer
    than any reset timeout). Default one day."""

    def __post_init__(self) -> None:
        if self.default_max_concurrency < 1:
            raise ValueError("default_max_concurrency must be at least 1")
        if self.default_lease_s <= 0 or self.state_ttl_s <= 0:
            raise ValueError("default_lease_s and state_ttl_s must be positive")
        if not 0 < self.wait_poll_initial_s <= self.wait_poll_max_s:
            raise ValueError("need 0 < wait_poll_initial_s <= wait_poll_max_s")
        if self.max_wait_attempts < 1:
            raise ValueError("max_wait_attempts must be at least 1")
