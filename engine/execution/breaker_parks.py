"""One redispatch per breaker opening, not per refusal (docs/architecture.md, 'Redispatch').

A breaker refusal is an `external_overload`, redispatched up to the vertex's
`maxAutoRetries`. But an open breaker refuses every step that asks, and half-open it lets
only a few probes through: counted per refusal, a fan-out's children would spend all their
redispatches on one outage without sending anything. So a step counts one redispatch per
opening it is refused under (the layer and its stored `opened_at`, remembered in the error of
its counted redispatch) and parks, without counting, when the same opening refuses it again,
until the breaker lets probes through again (the refusal's Retry-After).

Bounds: a park is at least `MIN_PARK_S`; an opening parks a step only while it is younger
than `OPENING_PARK_LIMIT_S` (a breaker kept half-open by probes that settle nothing, e.g.
429s, would otherwise hold it for ever), after which a refusal counts again. So a step dies
only after `maxAutoRetries + 1` openings (or counted refusals), and spends at most about
`OPENING_PARK_LIMIT_S` parked per counted one.
"""

from __future__ import annotations

from schemas.errors import BreakerOpen, StepFailure

MIN_PARK_S = 1.0
"""The shortest breaker park: a half-open breaker whose probe permits are all in use answers
"try again shortly" (under 1 s), and thousands of parked children must not spin on it."""

OPENING_PARK_LIMIT_S = 600.0
"""How long after a breaker opened its refusals still park a step that was counted under it
(rather than count again). Well above the default reset timeouts (30 s and 60 s) plus a
probe's lease, so in practice only a breaker stuck half-open reaches it."""

PARK_JITTER = 0.2
"""A park waits up to this share longer (uniformly at random), so children refused together
do not all ask again in the same instant when the breaker half-opens."""


def repeat_refusal(failure: StepFailure, counted: object, now: float) -> BreakerOpen | None:
    """`failure` when it is a breaker refusal by the opening `counted` (the step's
    `breaker_opening`), recent enough to park behind; None when it must count."""
    if not isinstance(failure, BreakerOpen) or failure.opening != counted:
        return None
    if now - failure.opened_at > OPENING_PARK_LIMIT_S:
        return None
    return failure


def park_delay(refusal: BreakerOpen, spread: float) -> float:
    """Seconds to park behind `refusal`: until its Retry-After, at least `MIN_PARK_S`. Behind
    an open breaker that is exactly when it half-opens (so "half-open in N s" counted down to
    the park's end is true); a short wait behind a half-open one (its probe permits taken)
    gets up to `PARK_JITTER` more (`spread` is random in [0, 1)), so the children it refused
    together spread out instead of asking again all at once, second after second."""
    after = refusal.retry_after_s or 0.0
    if after > MIN_PARK_S:
        return after
    return MIN_PARK_S * (1.0 + PARK_JITTER * spread)


def park_message(refusal: BreakerOpen, counted_retries: int, allowed: int) -> str:
    """What a step parked behind a breaker says. No countdown: front doors add
    "half-open in N s" from the park's `until` (`schemas.waiting.wait_text`)."""
    return (
        f"{refusal.message}; this opening already counted as redispatch "
        f"{counted_retries}/{allowed}, so the step waits without spending another"
    )
