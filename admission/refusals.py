"""What `Admission.admit` raises when the admission script says no.

Refusals that waiting cannot cure end the admit at once; the others (no free slot, the
destination's rate) are waited out, and only a wait that runs out of time fails. Every failure
is a `StepFailure(EXTERNAL_OVERLOAD)` (a retry the budget refuses is its subclass
`RetryRefused`), so the call is not held on a worker; a full tenant window is
`TenantRateLimited`, which delays the step instead of failing it.
"""

from __future__ import annotations

from admission.backend import AdmitCode, AdmitReply
from admission.rate_limit import RateDecision, TenantRateLimited
from schemas.errors import BreakerOpen, FailureKind, RetryRefused, StepFailure


def raise_if_refused(
    destination: str, tenant_id: str, reply: AdmitReply, tenant_delay_s: float
) -> None:
    """Raise for a refusal that waiting for a slot cannot cure: an open breaker or an
    exhausted retry budget (`StepFailure(EXTERNAL_OVERLOAD)`), or a full tenant window
    (`TenantRateLimited`). Return for the others (no slot, the destination's rate)."""
    if reply.code is AdmitCode.BREAKER_BLOCKED:
        raise breaker_failure(destination, tenant_id, reply)
    if reply.code is AdmitCode.RETRY_BUDGET:
        raise RetryRefused(
            f"retry budget of {destination!r} is exhausted: not retrying now (retries resume "
            "as calls to it succeed again)"
        )
    if reply.code is AdmitCode.TENANT_LIMITED:
        decision = RateDecision(
            False, tenant_delay_s, reply.tenant_used, reply.tenant_limit, max(0.0, reply.hint_s)
        )
        raise TenantRateLimited(tenant_id, decision)


def breaker_failure(destination: str, tenant_id: str, reply: AdmitReply) -> StepFailure:
    """The failure of a call a breaker blocked; the engine redispatches it once probes are let
    through (`retry_after_s`)."""
    layer, _, state = reply.blocking_layer.partition(":")
    what = "open" if state == "open" else "half-open with every probe permit in use"
    scope = f"tenant {tenant_id!r}" if layer == "tenant" else "all tenants"
    return BreakerOpen(
        f"circuit open: the {layer} breaker of {destination!r} ({scope}) is {what}; "
        f"calls are let through again in {reply.hint_s:.1f} s",
        destination=destination,
        layer=layer,
        retry_after_s=max(0.0, reply.hint_s),
    )


def wait_exhausted(destination: str, waited_s: float, reply: AdmitReply | None) -> StepFailure:
    """The failure of a call that found no slot within `waited_s`; `reply` is the last answer."""
    detail = ""
    if reply is not None and reply.code is AdmitCode.RATE_LIMITED:
        detail = " (its ratePerSecond is reached)"
    elif reply is not None:
        detail = f" ({reply.in_flight} calls in flight, limit {reply.limit:.1f})"
    return StepFailure(
        FailureKind.EXTERNAL_OVERLOAD,
        f"admission wait exhausted: no slot for {destination!r} within {waited_s:.1f} s{detail}",
    )
