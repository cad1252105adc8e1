"""The one wording of a wait (`schemas.waiting.wait_text`) and what a group of waiting
children may say of all of them (`engine.store.children.common_message`)."""

from __future__ import annotations

import pytest

from engine.store.children import common_message, shared_start
from schemas.waiting import BREAKER_IS_OPEN, wait_text

OPEN = f"circuit open: the tenant breaker of 'd' (tenant 'acme') {BREAKER_IS_OPEN}"
HALF = "circuit open: the tenant breaker of 'd' (tenant 'acme') is half-open with every probe"
LAYER = f"the tenant breaker of 'd' (tenant 'acme') {BREAKER_IS_OPEN}"
OPENED = f"circuit open (opened by an HTTP 500 at {{}} UTC): {LAYER}"
"""A refusal that says what opened its layer and when (`admission.refusals.breaker_failure`)."""
OPENED_BY = f"circuit open (opened by an HTTP 500): {LAYER}"
"""What refusals under several openings of that layer all say."""
RETRY = "waiting to retry a call to https://api:443: answered 429 Too Many Requests"
REDISPATCH = "waiting to be sent again (redispatch) after https://api:443 answered 503 Service"


@pytest.mark.parametrize(
    ("reason", "message", "until", "expected"),
    [
        ("breaker_open", OPEN, 112.2, f"{OPEN}; half-open in 13 s"),
        (
            "breaker_open",
            f"redispatch 1/3 after {OPEN}",
            130,
            # The step's own redispatch, spread out after the half-open: not when it is.
            f"redispatch 1/3 after {OPEN}; next in 30 s",
        ),
        ("breaker_open", OPEN, 90, f"{OPEN}; half-open in 0 s"),  # late: never negative
        ("breaker_open", HALF, 101, f"{HALF}; asks again in 1 s"),
        ("breaker_open", OPEN, None, OPEN),  # no time known: no countdown
        # A group whose children share no words (one refused while the breaker was open,
        # another while half-open): no countdown alone, the front doors name the reason.
        ("breaker_open", "", 101, ""),
        (
            "tenant_rate_limit",
            "tenant t is at its rate limit",
            105,
            "tenant t is at its rate limit",
        ),
        # A retry's or a redispatch's next try (a group's first); no words, no countdown.
        ("retry_backoff", RETRY, 102.5, f"{RETRY}; next in 3 s"),
        ("redispatch", REDISPATCH, 142, f"{REDISPATCH}; next in 42 s"),
        ("redispatch", "", 142, ""),
        ("retry_backoff", RETRY, None, RETRY),
    ],
)
def test_a_breaker_wait_counts_down_to_its_half_open(
    reason: str, message: str, until: float | None, expected: str
) -> None:
    assert wait_text(reason, message, until, 100.0) == expected


@pytest.mark.parametrize(
    ("least", "greatest", "expected"),
    [
        ("same", "same", "same"),
        (f"redispatch 1/3 after {OPEN}", f"redispatch 2/3 after {OPEN}", OPEN),
        (
            f"redispatch 1/3 after {OPEN}",
            f"{OPEN}; this opening already counted as redispatch 2/3, so the step waits",
            OPEN,
        ),
        (f"redispatch 1/3 after {OPEN}", f"redispatch 2/3 after {HALF}", ""),  # nothing shared
        # One outage opened the breaker again at each failed half-open: the children wait
        # under several openings, which share what opened it and the breaker, not the time.
        (
            f"redispatch 1/3 after {OPENED.format('21:52:49')}",
            f"redispatch 2/3 after {OPENED.format('21:53:19')}",
            OPENED_BY,
        ),
        (
            f"redispatch 1/3 after {OPENED.format('21:52:49')}",
            f"{OPENED.format('21:53:19')}; this opening already counted as redispatch 2/3, so",
            OPENED_BY,
        ),
        (  # opened by different answers: nothing
            f"redispatch 1/3 after {OPENED.format('21:52:49')}",
            f"redispatch 2/3 after {OPENED.format('21:53:19').replace('HTTP 500', 'HTTP 502')}",
            "",
        ),
        ("redispatch 1/3 after HTTP 503", "redispatch 2/3 after HTTP 429", ""),
        # What the destination answered leads; each child's URL and count end it.
        (
            f"{RETRY}, Retry-After 7 s; retrying GET https://api:443/1 (attempt 2/4)",
            f"{RETRY}, Retry-After 7 s; retrying GET https://api:443/9 (attempt 3/4)",
            f"{RETRY}, Retry-After 7 s",
        ),
        (  # two Retry-Afters: only what precedes them
            f"{RETRY}, Retry-After 12 s; retrying GET https://api:443/1 (attempt 2/4)",
            f"{RETRY}, Retry-After 7 s; retrying GET https://api:443/9 (attempt 2/4)",
            RETRY,
        ),
        (
            f"{REDISPATCH} Unavailable; redispatch 1/3 after GET https://api:443/1: 503 …",
            f"{REDISPATCH} Unavailable; redispatch 2/3 after GET https://api:443/7: 503 …",
            f"{REDISPATCH} Unavailable",
        ),
        (  # two destinations: nothing
            "waiting to retry a call to https://a:443: answered 429; retrying GET https://a:443",
            "waiting to retry a call to https://b:443: answered 429; retrying GET https://b:443",
            "",
        ),
    ],
)
def test_a_group_says_only_what_all_its_children_share(
    least: str, greatest: str, expected: str
) -> None:
    assert common_message(least, greatest) == expected


@pytest.mark.parametrize(
    ("least", "greatest", "expected"),
    [
        ("a; b", "a; c", "a"),
        ("a", "a; c", "a"),  # the least ends where the greatest goes on with a clause
        ("ab", "ac", ""),  # no clause shared
        ("f(x, y); 1", "f(x, y); 2", "f(x, y)"),
        ("f(x, y1); 1", "f(x, y2); 2", ""),  # never a cut inside brackets
        ("'a, b'; 1", "'a, c'; 1", ""),  # nor inside quotes
    ],
)
def test_a_shared_start_is_whole_clauses(least: str, greatest: str, expected: str) -> None:
    assert shared_start(least, greatest) == expected


def test_every_message_between_the_least_and_greatest_starts_with_what_they_share() -> None:
    """The group reads only its least and greatest messages (in byte order): what their
    start shares is true of every message sorted between them."""
    messages = sorted(
        f"{RETRY}, Retry-After 7 s; retrying GET https://api:443/{item} (attempt {n}/4)"
        for item in (1, 22, 3, 100)
        for n in (2, 3)
    )
    shared = shared_start(messages[0], messages[-1])
    assert shared == f"{RETRY}, Retry-After 7 s"
    assert all(m.startswith(shared) for m in messages)
