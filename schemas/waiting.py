"""Why a step waits: the closed set of reasons every front door shows (docs/architecture.md,
'Why a step waits').

A step that cannot go on now is not failed: it is parked (READY again later, a durable timer)
or redispatched after an overload, or, inside its execution, waits for an admission slot. The
engine records the reason on the step with the result it writes anyway, and clears it when
the step is claimed again or ends, so the API, the CLI and the UI say why work is waiting
instead of showing a bar that does not move.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum


class WaitReason(StrEnum):
    """Why a step waits. Stable values: clients switch on them."""

    TENANT_RATE_LIMIT = "tenant_rate_limit"
    """The tenant's rate window is full (GATEWAY steps a minute); the step parks 5 s at a time.
    Raised per tenant with `schemabridge tenants set-rate` or, as the default of every tenant,
    `SCHEMABRIDGE_TENANT_RATE_PER_MINUTE`."""
    BACKPRESSURE = "backpressure"
    """A SPAWNER found the ready queue deeper than `BACKPRESSURE_MAX_DEPTH`; it parks 10 s."""
    PAYLOAD_STORE = "payload_store"
    """A SPAWNER found the payload store over its high-water mark; it parks 10 s."""
    BREAKER_OPEN = "breaker_open"
    """A circuit breaker of the step's destination refused the call; the step runs again once
    the breaker lets probes through. The first refusal by one opening of the breaker counts as
    a redispatch (n of `maxAutoRetries`); a refusal by the same opening again parks the step
    without counting (docs/architecture.md, 'Redispatch')."""
    REDISPATCH = "redispatch"
    """The destination was overloaded (a final 429/503, no admission slot in time, an exhausted
    retry budget); the step is redispatched n of `maxAutoRetries` times."""
    DESTINATION_CAP = "destination_cap"
    """The step waited its whole admission wait while its destination's own cap held it (the
    operator's `maxConcurrency` or `ratePerSecond`, set with `schemabridge destinations
    set-cap`); it parks 1 s and asks again, as often as it takes: pacing, never a failure."""
    ADMISSION_WAIT = "admission_wait"
    """The step is running and waits for an admission slot of its destination (its AIMD limit
    or cap is reached); seen by the lease renewer, so up to a third of a lease late."""
    RETRY_BACKOFF = "retry_backoff"
    """The step is running and sleeps before its next in-process HTTP attempt (a retry of a
    5xx, a 429, a timeout or an I/O error); written when a wait of 1 s or more starts, with the
    attempts so far. Its `until` (the next attempt) comes from the last attempt's log line."""
    STORE_UNAVAILABLE = "store_unavailable"
    """A transient database error interrupted the step; it runs again in 1 s."""
    COORDINATION_UNAVAILABLE = "coordination_unavailable"
    """Admission could not reach Redis before the call (nothing was sent); it runs again in
    2 s."""
    DEPLOYMENT_STAGE = "deployment_stage"
    """A `gradual_deploy` stage holds until its minimum runs and duration are reached (or the
    candidate is judged); it checks again every `checkIntervalS`."""
    NO_WORKER = "no_worker"
    """The step is READY and no worker is alive (every worker's heartbeat is stale, the rule
    of `GET /services`), so nothing claims it until one starts. Said when the run is read,
    never recorded: a step waiting for another reason keeps that reason."""


NO_WORKER_MESSAGE = (
    "no worker is alive: nothing claims this step until one starts (`schemabridge worker`; "
    "`schemabridge services` lists them)"
)
"""The message of a `NO_WORKER` wait."""


WAIT_MESSAGE_MAX_CHARS = 500
"""A recorded wait message is cut to this length (the reason is what clients switch on)."""


BREAKER_IS_OPEN = "is open: it refuses every call until it half-opens"
"""How a breaker refusal's message says the breaker is open (rather than half-open with every
probe permit in use); `wait_text` then counts down to the half-open."""


_NEXT_TRY = frozenset({WaitReason.RETRY_BACKOFF, WaitReason.REDISPATCH})
"""Waits whose `until` is the next try of the call: their text says when ("next in N s")."""


def redispatch_words(number: int, allowed: int, failure: str) -> str:
    """ "redispatch 1/3 after <failure>": how a redispatched step's wait counts its
    redispatches (`wait_text` reads a breaker wait so worded as the step's own next try)."""
    return f"redispatch {number}/{allowed} after {failure}"


_REDISPATCHED = re.compile(r"\bredispatch \d+/\d+ after ")


def wait_text(reason: str, message: str, until: float | None, now: float) -> str:
    """What a person reads about one wait: its message, and for a breaker wait the countdown
    it needs ("half-open in N s", or when a half-open breaker is asked again), for a retry or
    a redispatch when the call goes again ("next in N s": a fan-out's group of them, when the
    first of them does). The one wording of the REST views' `text`, the CLI and the web
    monitor."""
    if until is None:
        return message
    left = max(0, math.ceil(until - now))
    if reason in _NEXT_TRY:
        # A retry's or a redispatch's next try; a group's `until` is its earliest.
        return f"{message}; next in {left} s" if message else message
    if reason != WaitReason.BREAKER_OPEN or not message:
        # No words (a group of children that share none): the front doors name the reason;
        # a countdown alone ("17 children waiting: ; asks again in 1 s") reads as cut off.
        return message
    if BREAKER_IS_OPEN in message:
        if _REDISPATCHED.search(message):
            # Its own next try: no sooner than the breaker half-opens, but 5 s, 10 s, 20 s on
            # and spread out, so not when it does (a tour read three steps' "half-open" times,
            # 4 s apart and later than the breaker's).
            return f"{message}; next in {left} s"
        return f"{message}; half-open in {left} s"
    return f"{message}; asks again in {left} s"


HELD_WAITS: dict[str, str] = {
    WaitReason.ADMISSION_WAIT: "waiting for an admission slot",
    WaitReason.RETRY_BACKOFF: "waiting to retry a call",
}
"""Waits inside a step's execution, by the words front doors use for them. A worker holds
such a step, so its child counts as running (`FanoutProgress.running`), not among the
waiting children: the counts say how many of the running ones wait so ("23 running (15 of
them waiting for an admission slot)"), the same words in the CLI and the web monitor
(ui/static/js/waits.js)."""


def reason_words(reason: str) -> str:
    """A wait reason as a person reads it where its message is missing: the words of a held
    wait, else the code's words ("tenant_rate_limit" reads "tenant rate limit")."""
    return HELD_WAITS.get(reason, reason.replace("_", " "))
