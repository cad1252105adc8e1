"""The GATEWAY's in-process retry policy as pure functions (docs/architecture.md,
'HTTP-layer retries').

Which answers are retried: 5xx, 429 and I/O errors (timeouts, refused or reset connections);
any other status outside `successCodes` is final at once. How long to wait before retry `n`
(n = 1 for the first retry): `baseDelayMs * 2^(n-1)` — 1 s, 2 s, 4 s with the defaults, so four
attempts span about 7 s — or, with `jitter: "full"`, a uniform draw in [0, that wait]. When a
429 or a 503 carries `Retry-After` (seconds or an HTTP date), the destination's figure is used
instead, capped at 30 s. Which failure the step ends with: a final 429 or 503 is
`external_overload` (the engine redispatches it through admission), any other status is
`http_error`.

No clock is read here: a Retry-After date is measured against a `now` the caller passes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from schemas.definitions import RetryPolicy
from schemas.errors import FailureKind

RETRY_AFTER_CAP_S = 30.0
"""The longest in-process wait a destination's Retry-After can ask for."""
MAX_BACKOFF_S = 60.0
"""Cap on one computed backoff wait. Unreachable with the defaults (waits 1, 2, 4 s); it only
stops extreme policies (60 s base, 10 attempts) from sleeping for hours inside one step."""
OVERLOAD_STATUSES = frozenset({429, 503})
"""Final statuses that mean the destination is overloaded (`external_overload`)."""


def is_success(status: int, success_codes: Collection[int] | None) -> bool:
    """Whether `status` counts as success: listed in `success_codes`, or any 2xx by default."""
    if success_codes is None:
        return 200 <= status < 300
    return status in success_codes


def is_retryable_status(status: int) -> bool:
    """5xx and 429 are retried in-process; any other status is final."""
    return status == 429 or 500 <= status <= 599


def failure_kind_for_status(status: int) -> FailureKind:
    """The failure kind of a final unsuccessful status."""
    if status in OVERLOAD_STATUSES:
        return FailureKind.EXTERNAL_OVERLOAD
    return FailureKind.HTTP_ERROR


def backoff_s(retry: int, base_delay_ms: int) -> float:
    """The wait before retry number `retry` (1-based): `base * 2^(retry-1)`, in seconds."""
    if retry < 1:
        raise ValueError("retry numbers start at 1")
    # Bounded exponent: 2**(retry-1) stays exact and small for any configured maxAttempts.
    exponent: int = min(retry - 1, 32)
    return min(base_delay_ms / 1000 * float(2**exponent), MAX_BACKOFF_S)


def jittered_s(wait_s: float, jitter: str, rng: random.Random | None) -> float:
    """`full` jitter draws uniformly in [0, wait_s] (from `rng`, else a fresh generator);
    `none` returns wait_s."""
    if jitter == "full":
        return (rng or random.Random()).uniform(0.0, wait_s)
    return wait_s


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After value (delay-seconds or an HTTP date), uncapped.

    None when the header is missing or unreadable; a date in the past gives 0.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        # RFC 9110 says whole seconds; fractions ("1.5") are accepted as some servers send them.
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # RFC 9110 dates are GMT
    return max((when - now).total_seconds(), 0.0)


def retry_delay_s(
    retry: int,
    policy: RetryPolicy,
    *,
    status: int | None,
    retry_after_s: float | None,
    rng: random.Random | None = None,
) -> float:
    """The wait before retry `retry` after an attempt that ended with `status` (None: I/O).

    A 429 or 503 that carried Retry-After waits what the destination asked, capped at 30 s
    and without jitter; anything else waits the (optionally jittered) backoff.
    """
    if status in OVERLOAD_STATUSES and retry_after_s is not None:
        return min(retry_after_s, RETRY_AFTER_CAP_S)
    return jittered_s(backoff_s(retry, policy.base_delay_ms), policy.jitter, rng)
