"""Retry budget per destination: a token bucket in the style of gRPC retry throttling.

The bucket starts full (`max_tokens`). Every failed call to the destination (overload or
other failure) spends one token; every success earns `token_ratio` back, up to the maximum.
Retries — in-process HTTP retries and redispatches alike — are allowed only while the bucket
holds more than half of `max_tokens`.

Why this bounds retry traffic: in a steady state retries continue only while failures stay
below about `token_ratio` * successes (10 % by default), so retries can add at most that
fraction of traffic. When a destination is dead successes earn nothing back: after
`max_tokens / 2` failures (50 by default) retries stop, however many items are queued — a
dead destination never sees every item's full retry schedule.

The bucket also refills with time (`refill_per_s`, 1 token a second by default). Without it
a destination that recovers while only retries are left (every item already failed once
during the outage) would never see a retry, hence never a success that refills the bucket:
the budget would stay exhausted for good. With it, a dead destination still gets at most
`refill_per_s` retries a second once the bucket is down to half.

`RetryBudget` here is the pure arithmetic; `lua/lib_budget.lua` applies the same arithmetic
atomically in Redis (the shared bucket is updated by every settled ticket), and
`SharedRetryBudget` reads it or records outcomes that happen outside a ticket.
"""

from __future__ import annotations

from admission.backend import CoordinationBackend
from admission.config import RetryBudgetConfig
from schemas.clock import Clock


class RetryBudget:
    """Pure token-bucket arithmetic (no I/O)."""

    def __init__(self, config: RetryBudgetConfig | None = None) -> None:
        self.config = config or RetryBudgetConfig()

    def full(self) -> float:
        """Tokens of a destination never seen before."""
        return self.config.max_tokens

    def refilled(self, tokens: float, elapsed_s: float) -> float:
        """Tokens after `elapsed_s` seconds without any outcome."""
        return min(self.config.max_tokens, tokens + max(0.0, elapsed_s) * self.config.refill_per_s)

    def on_success(self, tokens: float) -> float:
        """Tokens after a successful call."""
        return min(self.config.max_tokens, tokens + self.config.token_ratio)

    def on_failure(self, tokens: float) -> float:
        """Tokens after a failed call (overload or any other failure)."""
        return max(0.0, tokens - 1.0)

    def allows_retry(self, tokens: float) -> bool:
        """Whether a retry may be sent: strictly more than half the bucket is left."""
        return tokens > self.config.max_tokens / 2


class SharedRetryBudget:
    """The Redis-backed bucket every worker shares, one per destination."""

    def __init__(
        self,
        backend: CoordinationBackend,
        clock: Clock,
        config: RetryBudgetConfig | None = None,
    ) -> None:
        self._backend = backend
        self._clock = clock
        self._budget = RetryBudget(config)

    @property
    def config(self) -> RetryBudgetConfig:
        return self._budget.config

    async def tokens(self, destination: str) -> float:
        """Tokens left in `destination`'s bucket."""
        return await self._backend.budget(destination, "peek", self.config, now=self._clock.now())

    async def allowed(self, destination: str) -> bool:
        """Whether a retry to `destination` may be sent now."""
        return self._budget.allows_retry(await self.tokens(destination))

    async def record_success(self, destination: str) -> float:
        """Earn tokens for a success seen outside a ticket; returns the tokens left."""
        return await self._backend.budget(
            destination, "success", self.config, now=self._clock.now()
        )

    async def record_failure(self, destination: str) -> float:
        """Spend a token for a failure seen outside a ticket; returns the tokens left."""
        return await self._backend.budget(
            destination, "failure", self.config, now=self._clock.now()
        )
