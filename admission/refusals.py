"""What `Admission.admit` raises when the admission script says no.

Refusals that waiting cannot cure end the admit at once; the others (no free slot, the
destination's rate) are waited out, and only a wait that runs out of time ends it. Every failure
is a `StepFailure(EXTERNAL_OVERLOAD)` (a retry the budget refuses is its subclass
`RetryRefused`), so the call is not held on a worker; a full tenant window is
`TenantRateLimited`, which delays the step instead of failing it. A wait that ran out while
the destination's own cap (not its AIMD limit) held it is `DestinationPaced`, the failure's
subclass the engine turns into a delay too.
"""

from __future__ import annotations

import shlex

from admission.backend import AdmitCode, AdmitReply
from admission.breaker import opened_by, scoped_tenant
from admission.rate_limit import RateDecision, TenantRateLimited
from schemas.errors import BreakerOpen, FailureKind, RetryRefused, StepFailure
from schemas.waiting import BREAKER_IS_OPEN, WaitReason


def raise_if_refused(
    destination: str,
    tenant_id: str,
    reply: AdmitReply,
    tenant_delay_s: float,
    *,
    breaker_scope: str = "",
) -> None:
    """Raise for a refusal that waiting for a slot cannot cure: an open breaker or an
    exhausted retry budget (`StepFailure(EXTERNAL_OVERLOAD)`), or a full tenant window
    (`TenantRateLimited`). Return for the others (no slot, the destination's rate).
    `breaker_scope`: a deployment candidate's calls, whose tenant layer is their own
    (`scoped_tenant`)."""
    if reply.code is AdmitCode.BREAKER_BLOCKED:
        raise breaker_failure(destination, tenant_id, reply, breaker_scope)
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


def breaker_failure(
    destination: str, tenant_id: str, reply: AdmitReply, breaker_scope: str = ""
) -> StepFailure:
    """The failure of a call a breaker blocked; the engine redispatches it once probes are let
    through (`retry_after_s`), counting one redispatch per opening (`opened_at`), not per
    refusal. The message says no time: it is read later, as the step's error or beside a
    wait's countdown to `until` (which the front doors count down as "half-open in N s"),
    where a second, frozen countdown would only contradict the live one. It says what opened
    the layer when the layer kept it ("circuit open (opened by an HTTP 500 at 19:01:12 UTC):
    …", a clock time, not a countdown), first, so that a failed child, a join's summary (which cuts
    a child's message) and the run's error name what the destination had been answering,
    not only that a breaker refused."""
    layer, _, state = reply.blocking_layer.partition(":")
    what = (
        BREAKER_IS_OPEN
        if state == "open"
        else "is half-open with every probe permit in use: it refuses other calls until a probe "
        "ends"
    )
    scope = f"tenant {tenant_id!r}" if layer == "tenant" else "all tenants"
    if layer == "tenant" and breaker_scope:
        scope += f", the calls of the deployment candidate {breaker_scope} only"
    cause = opened_by(reply.cause, reply.opened_at)
    opened = f"circuit open ({cause})" if cause else "circuit open"
    reset = f"schemabridge destinations reset-breaker {shlex.quote(destination)}"
    if layer == "tenant":
        reset += f" --tenant {shlex.quote(scoped_tenant(tenant_id, breaker_scope))}"
    return BreakerOpen(
        f"{opened}: the {layer} breaker of {destination!r} ({scope}) {what} (once the "
        f"destination is fixed, close it with `{reset}`)",
        destination=destination,
        layer=layer,
        retry_after_s=max(0.0, reply.hint_s),
        opened_at=reply.opened_at,
    )


PACED_DELAY_S = 1.0
"""How long a step held back by its destination's own cap is parked before it asks again. It
has just waited its whole admission wait in the queue; it parks (freeing its worker) only
briefly, so it is soon back in the running for the next slot."""


class DestinationPaced(StepFailure):
    """The admission wait ran out while the destination's own cap held the call: its
    `maxConcurrency` was reached at an AIMD limit no overload had cut below it, or its
    `ratePerSecond` was. That is the pacing the operator asked for, not an overloaded
    destination: the engine parks the step for `delay_s` and it asks again, like a full tenant
    window (it is not failed, nor counted against `maxAutoRetries`; nothing was sent, so no
    AIMD cut, breaker or retry budget hears of it). It is a `StepFailure` (the exhausted wait's
    `external_overload`, the same message as ever) so that callers outside the engine that
    treat any refusal alike still do; `wait_message` is what the parked step says."""

    def __init__(self, message: str, wait_message: str, delay_s: float = PACED_DELAY_S) -> None:
        super().__init__(FailureKind.EXTERNAL_OVERLOAD, message)
        self.wait_message = wait_message
        self.delay_s = delay_s

    @property
    def wait_reason(self) -> WaitReason:
        return WaitReason.DESTINATION_CAP


def wait_exhausted(destination: str, waited_s: float, reply: AdmitReply | None) -> StepFailure:
    """What a call that found no slot within `waited_s` raises; `reply` is the last answer
    about the destination. `DestinationPaced` when the destination's own cap is what holds it
    (its rate, or its maxConcurrency at a limit AIMD never cut below it); otherwise the AIMD
    limit holds it (the destination signalled overload): a plain `EXTERNAL_OVERLOAD`."""
    detail = ""
    if reply is not None and reply.code is AdmitCode.RATE_LIMITED:
        detail = " (its ratePerSecond is reached)"
    elif reply is not None:
        detail = f" ({reply.in_flight} calls in flight, limit {reply.limit:.1f})"
    message = (
        f"admission wait exhausted: no slot for {destination!r} within {waited_s:.1f} s{detail}"
    )
    cap = _cap_holding(reply)
    if cap is None:
        return StepFailure(FailureKind.EXTERNAL_OVERLOAD, message)
    return DestinationPaced(
        message,
        f"waiting for the destination's cap ({cap}): no slot for {destination!r} within "
        f"{waited_s:.1f} s; the step asks again in {PACED_DELAY_S:g} s and runs when its turn "
        f"comes (raise the cap with `schemabridge destinations set-cap {destination} ...`)",
    )


def _cap_holding(reply: AdmitReply | None) -> str | None:
    """The destination's own cap that refused `reply` (e.g. `0.2/s`, `maxConcurrency 1`), or
    None when the refusal was the AIMD limit's (or there is no refusal to judge)."""
    if reply is None:
        return None
    if reply.code is AdmitCode.RATE_LIMITED:
        return f"{reply.rate_per_second:g}/s"
    if reply.code is AdmitCode.NO_SLOT and reply.at_cap:
        return f"maxConcurrency {reply.cap}"
    return None
