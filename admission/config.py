"""Configuration of the admission library: one frozen object, built once and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

from admission.aimd import AimdConfig
from admission.breaker import GLOBAL_DEFAULT, TENANT_DEFAULT, BreakerConfig
from admission.rate_limit import TenantRateConfig
from admission.retry_budget import RetryBudgetConfig


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
    the longest timeout tier (60 s) plus margin. The engine's guard asks for the call's
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
