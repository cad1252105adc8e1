"""Words and numbers as the command line prints them: counts with their noun ("1 attempt",
"2 attempts": `schemas.counts.plural`, which the engine's log lines use too), times exact and
relative, excerpts, and "-" for a value that is not there (never "None"). Durations are
`schemas.durations.duration`, which the engine's reasons use too."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

MISSING = "-"
"""Printed where a value is absent."""

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.IGNORECASE)
_SPAN_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3_600, "d": 86_400, "w": 604_800}


def show(value: Any) -> str:
    """A value as text, "-" when it is None or empty."""
    if value is None or value == "":
        return MISSING
    return str(value)


def _coarse(seconds: float) -> str:
    """A span in its largest unit: 12 s, 6 min, 3 h, 2 d."""
    for unit, size in (("d", 172_800), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // (86_400 if unit == 'd' else size))} {unit}"
    return f"{int(seconds)} s"


def relative(at: float, now: float) -> str:
    """How long ago, or in how long: 3 min ago, in 12 s, just now."""
    delta = now - at
    if abs(delta) < 1:
        return "just now"
    return f"{_coarse(delta)} ago" if delta > 0 else f"in {_coarse(-delta)}"


def exact(at: float) -> str:
    """The local time with its zone: "2026-12-02 04:07:58 UTC"."""
    return datetime.fromtimestamp(at, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def zone(at: float) -> str:
    """The local time zone's abbreviation at `at`: "UTC", "CEST"."""
    return datetime.fromtimestamp(at, UTC).astimezone().strftime("%Z")


def clock(at: float) -> str:
    """The local time of day with milliseconds (log lines): "04:07:58.404"."""
    moment = datetime.fromtimestamp(at, UTC).astimezone()
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def moment(at: float | None, now: float) -> str:
    """Exact and relative: "2026-12-02 04:07:58 UTC (3 min ago)"; "-" for None."""
    if at is None:
        return MISSING
    return f"{exact(at)} ({relative(at, now)})"


def excerpt(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_duration(value: str) -> float:
    """A duration option: seconds ("90") or a span ("60s", "5m", "2h", "1d"), in seconds.
    Raises ValueError with a sentence saying what is accepted."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        span = _SPAN.match(text)
        if span is None:
            raise ValueError(
                f"{value!r} is not a duration: seconds (90) or a span (60s, 5m, 2h, 1d)"
            ) from None
        seconds = float(span.group(1)) * _SPAN_S[span.group(2).lower()]
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{value!r} is not a duration: it is 0 or more seconds")
    return seconds


def parse_since(value: str, now: float) -> float:
    """`--since`: a span back from now ("90s", "15m", "2h", "3d", "1w") or an ISO date or
    time ("2026-12-01", "2026-12-01T08:00"; local time unless it has a zone), as epoch
    seconds. Raises ValueError with a sentence saying what is accepted."""
    span = _SPAN.match(value)
    if span:
        return now - float(span.group(1)) * _SPAN_S[span.group(2).lower()]
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{value!r} is neither a span (90s, 15m, 2h, 3d, 1w) nor an ISO date or time "
            "(2026-12-01, 2026-12-01T08:00)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()
    return parsed.timestamp()
