"""Layered circuit breakers per destination (docs/architecture.md, 'Circuit breakers').

Two layers guard every call, and both must let it through:

    layer    keys                                 threshold  reset   half-open successes
    tenant   cb:tenant:{destination}:{tenant}:*   5          30 s    2
    global   cb:global:{destination}:*            15         60 s    3

Both layers record every outcome except a 429: a throttled call says the destination is
healthy and busy, which AIMD answers (a cut), while counting it as a failure would shut a busy
destination off for a whole reset period (a 429 probe gives its permit back undecided). The
tenant layer catches what only one tenant suffers (bad credentials, a per-account quota at the
destination) without blocking the others; the global layer catches the destination being
down for everyone. A failure the tenant layer does not count (it is open, or half-open and the
call is none of its probes: the call was sent before the layer opened) is not counted in the
global layer either, and a global probe permit it holds goes back undecided: otherwise one
tenant's calls in flight when its layer opened would open the global layer for every tenant.

The state machine of one layer, one function per transition in `lua/lib_breaker.lua`:

    state       event                                            transition → state
    closed      failure; `threshold` consecutive reached         trip        → open
    closed      success                                          (failure count reset)
    open        request after `reset_s` since opened_at          attempt_reset → half_open
    half_open   probe success; `successes_to_close` reached      reclose     → closed
    half_open   probe failure                                    reopen      → open
    half_open   a probe's lease expires without an outcome       reopen      → open (at expiry)
    open, half  an operator closes it (`Admission.reset_breakers`) force_close → closed

- open → half-open is decided lazily, on each request, from the stored `opened_at`: no
  timers, so it happens the same in a process started after the breaker opened.
- Half-open admits at most `max_probes` concurrent calls. Each holds a probe permit that is
  a lease (it expires with the call's slot lease); a probe that hangs past it counts as a
  failure, so no breaker stays half-open forever behind a stuck call.
- In half-open only the probes' own outcomes count; in open, late outcomes of calls admitted
  before it opened change nothing.
- Opening (trip, reopen), a layer keeps its `cause`: what the failure that opened it was, as
  its settlement named it (`breaker_cause`: "HTTP 500", "timeout"), so a refusal can say what
  the destination had been answering rather than only "circuit open".

The machine runs inside Redis scripts rather than as Python read-then-write: every worker
checks and records concurrently, and a failure storm (the moment a breaker matters) is
exactly when optimistic retries would pile up. This module holds the configuration, the
states, the decoding of transitions for logs, and the read-only view used for visibility.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    """State of one breaker layer."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Layer(StrEnum):
    """Which breaker layer."""

    TENANT = "tenant"
    GLOBAL = "global"


@dataclass(frozen=True)
class BreakerConfig:
    """One layer's thresholds."""

    threshold: int
    """Consecutive failures (while closed) that open the breaker."""
    reset_s: float
    """Seconds an open breaker waits before letting probes through (half-open)."""
    successes_to_close: int
    """Probe successes in half-open that close it again."""
    max_probes: int
    """Probe calls allowed in flight at once while half-open."""

    def __post_init__(self) -> None:
        if min(self.threshold, self.successes_to_close, self.max_probes) < 1:
            raise ValueError("threshold, successes_to_close and max_probes must be at least 1")
        if self.reset_s <= 0:
            raise ValueError("reset_s must be positive")


TENANT_DEFAULT = BreakerConfig(threshold=5, reset_s=30.0, successes_to_close=2, max_probes=2)
"""Tenant layer defaults: 5 failures, 30 s, 2 half-open successes (2 probes at once)."""
GLOBAL_DEFAULT = BreakerConfig(threshold=15, reset_s=60.0, successes_to_close=3, max_probes=3)
"""Global layer defaults: 15 failures, 60 s, 3 half-open successes (3 probes at once)."""


@dataclass(frozen=True)
class Transition:
    """One layer changed state (decoded from a script's `layer:from:to` event)."""

    layer: Layer
    before: BreakerState
    after: BreakerState

    @classmethod
    def parse(cls, event: str) -> Transition:
        layer, before, after = event.split(":")
        return cls(Layer(layer), BreakerState(before), BreakerState(after))


@dataclass(frozen=True)
class LayerView:
    """What one layer's keys hold, as read for visibility: no transition applied, except that
    a half-open layer whose probe's lease has ended reads as reopened then (as the script's
    `bk_refresh` will make it at the next request)."""

    state: BreakerState
    failures: int
    """Consecutive failures counted while closed."""
    opened_at: float
    """Epoch seconds of the latest opening (0 if never opened)."""
    successes: int
    """Probe successes so far in the current half-open trial."""
    probes: int
    """Probe permits currently held."""
    cause: str = ""
    """What the failure that last opened it was (`breaker_cause`); "" if unknown."""

    @classmethod
    def closed(cls) -> LayerView:
        return cls(BreakerState.CLOSED, 0, 0.0, 0, 0)

    def effective(self, now: float, config: BreakerConfig) -> BreakerState:
        """The state the next request would see: an open layer past its reset timeout is
        already half-open, even though no request has moved it yet."""
        if self.state is BreakerState.OPEN and now - self.opened_at >= config.reset_s:
            return BreakerState.HALF_OPEN
        return self.state

    def seconds_until_half_open(self, now: float, config: BreakerConfig) -> float:
        """0 unless the layer is open; then how long until probes are let through."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.opened_at + config.reset_s - now)


@dataclass(frozen=True)
class ClosedBreaker:
    """A breaker layer an operator closed (`Admission.reset_breakers`)."""

    layer: Layer
    tenant_id: str | None
    """The tenant of a tenant layer; None for the global layer."""
    was: BreakerState
    """`OPEN` or `HALF_OPEN`: the state it was closed from."""


def scoped_tenant(tenant_id: str, scope: str) -> str:
    """The id a tenant layer is kept under: the tenant's own, or with a `scope` (the calls of
    a deployment's candidate: `workflow@vN`) a layer of its own, `tenant/workflow@vN`
    (docs/architecture.md, 'Circuit breakers'). A candidate's failing calls then open that
    layer, not the one the serving version's calls of the same tenant go through."""
    return f"{tenant_id}/{scope}" if scope else tenant_id


def candidate_layer_of(layer_tenant: str) -> str | None:
    """The tenant whose deployment candidate's layer `layer_tenant` is (`scoped_tenant`'s
    `tenant/workflow@vN`), or None when it is not of that form."""
    tenant, _, scope = layer_tenant.rpartition("/")
    name, _, version = scope.rpartition("@v")
    return tenant if tenant and name and version.isdigit() else None


PROBE_HUNG = "probe_hung"
"""The cause of a layer reopened because a half-open probe's lease ended without an answer."""

_CAUSE_WORDS = {
    "timeout": "a timeout",
    "network_error": "an I/O error",
    "invalid_response": "an unusable answer",
    PROBE_HUNG: "a probe that got no answer within its lease",
}


def breaker_cause(status: int | None, error_kind: str | None) -> str:
    """What a failed call was, as a breaker layer it opens keeps it: its error kind when it
    has one ("timeout"), else its status ("HTTP 500"); "" when neither is known."""
    if error_kind:
        return error_kind
    return f"HTTP {status}" if status is not None else ""


def cause_words(cause: str) -> str:
    """A layer's `cause` as a person reads it: "an HTTP 500", "a timeout"."""
    return _CAUSE_WORDS.get(cause, f"an {cause}" if cause.startswith("HTTP ") else cause)


def opened_by(cause: str, opened_at: float) -> str:
    """How a refusal says what opened its layer: "opened by an HTTP 500 at 19:01:12 UTC";
    "" when the cause is unknown (a layer opened before causes were kept)."""
    if not cause:
        return ""
    at = f" at {time.strftime('%H:%M:%S', time.gmtime(opened_at))} UTC" if opened_at else ""
    return f"opened by {cause_words(cause)}{at}"
