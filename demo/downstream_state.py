"""State of the demo downstream: its configuration, its statistics and its scripted answers.

Kept apart from the aiohttp handlers (demo/downstream.py) so that the rules — how an answer is
chosen, what is counted — are plain data and functions. Everything here is bounded: the list of
recent requests is a ring buffer, script queues have a maximum length, generated bodies and
sleeps have caps, so a demo left running under a benchmark cannot grow without limit.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_RECENT = 10_000
"""Requests remembered in `DownstreamStats.recent` (a ring buffer)."""
MAX_SCRIPT = 10_000
"""Scripted answers queued per path."""
MAX_SLEEP_MS = 600_000.0
"""Upper bound on any requested delay (10 min)."""
MAX_BODY_BYTES = 1 << 30
"""Upper bound on a generated body (`body_bytes`), 1 GiB."""
MAX_ITEMS = 100_000
"""Upper bound on `GET /items?count=N`."""
ANY_PATH = "*"
"""Script queue consulted when the request's own path has no scripted answer."""


class DirectiveError(ValueError):
    """A control value (query parameter, header, script entry, config field) is malformed."""


@dataclass
class DownstreamConfig:
    """Runtime behaviour of the demo downstream; `POST /_config` changes it live."""

    latency_ms: float = 0.0
    """Delay before every answer. Default 0."""
    capacity: int | None = None
    """Concurrent requests served; beyond it the answer is 429 + Retry-After. None: unlimited."""
    retry_after_s: float = 1.0
    """Retry-After sent with capacity 429s. Default 1 s."""
    fail_rate: float = 0.0
    """Probability (0..1) of answering 503 instead of serving. Default 0."""
    seed: int | None = None
    """Seed of the random source behind `fail_rate` (None: unpredictable)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "latencyMs": self.latency_ms,
            "capacity": self.capacity,
            "retryAfterS": self.retry_after_s,
            "failRate": self.fail_rate,
        }

    def update(self, changes: Mapping[str, Any]) -> None:
        """Apply a `POST /_config` body (camelCase keys); raise DirectiveError on bad input."""
        unknown = set(changes) - {"latencyMs", "capacity", "retryAfterS", "failRate"}
        if unknown:
            raise DirectiveError(f"unknown config fields: {sorted(unknown)}")
        if "latencyMs" in changes:
            self.latency_ms = _number(changes["latencyMs"], "latencyMs", 0.0, MAX_SLEEP_MS)
        if "capacity" in changes:
            cap = changes["capacity"]
            self.capacity = None if cap is None else int(_number(cap, "capacity", 1, 1e9))
        if "retryAfterS" in changes:
            self.retry_after_s = _number(changes["retryAfterS"], "retryAfterS", 0.0, 3600.0)
        if "failRate" in changes:
            self.fail_rate = _number(changes["failRate"], "failRate", 0.0, 1.0)


def _number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise DirectiveError(f"{name} must be a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DirectiveError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:
        raise DirectiveError(f"{name} must be within [{low}, {high}], got {number}")
    return number


@dataclass(frozen=True)
class Directive:
    """How to answer one request (from a script entry or per-request overrides)."""

    status: int = 200
    sleep_ms: float | None = None
    """Overrides the configured latency for this request."""
    retry_after: str | None = None
    """Sent verbatim as Retry-After (seconds or an HTTP date)."""
    reset: bool = False
    """Abort the connection (TCP RST) instead of answering, after the sleep."""
    body: Any = None
    """A JSON body to send instead of the default one."""
    raw: str | None = None
    """A raw body sent as-is (with `content_type`, default text/plain)."""
    content_type: str | None = None
    body_bytes: int | None = None
    """Send a generated body of this many bytes."""
    chunked: bool = False
    """Send the generated body without Content-Length."""
    trickle_ms: float | None = None
    """Send the body slowly: 10 small chunks, this long apart."""
    set_cookie: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


_OVERRIDE_NAMES = (
    "status",
    "sleep_ms",
    "retry_after",
    "reset",
    "raw",
    "content_type",
    "body_bytes",
    "chunked",
    "trickle_ms",
    "set_cookie",
)
_OVERRIDE_HEADERS = tuple(
    (name, "X-Demo-" + name.replace("_", "-").title()) for name in _OVERRIDE_NAMES
)


def directive_from_request(
    query: Mapping[str, str], headers: Mapping[str, str]
) -> Directive | None:
    """Per-request overrides: `?status=503` or the header `X-Demo-Status: 503`, and so on.

    Returns None when the request carries no override. Query parameters win over headers.
    """
    found: dict[str, Any] = {}
    for name, header in _OVERRIDE_HEADERS:
        value = query.get(name)
        if value is None:
            value = headers.get(header)
        if value is not None:
            found[name] = value
    return directive_from_entry(found) if found else None


def directive_from_entry(entry: Any) -> Directive:
    """A script entry: a bare status (`503`) or an object with the `Directive` field names."""
    if isinstance(entry, int) and not isinstance(entry, bool):
        entry = {"status": entry}
    if not isinstance(entry, Mapping):
        raise DirectiveError(f"a script entry is a status or an object, got {entry!r}")
    unknown = set(entry) - {*_OVERRIDE_NAMES, "body", "headers"}
    if unknown:
        raise DirectiveError(f"unknown script fields: {sorted(unknown)}")
    headers = entry.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise DirectiveError("headers must be an object")
    return Directive(
        status=int(_number(entry.get("status", 200), "status", 100, 599)),
        sleep_ms=_optional_number(entry, "sleep_ms", MAX_SLEEP_MS),
        retry_after=_optional_str(entry, "retry_after"),
        reset=_flag(entry.get("reset")),
        body=entry.get("body"),
        raw=_optional_str(entry, "raw"),
        content_type=_optional_str(entry, "content_type"),
        body_bytes=_optional_int(entry, "body_bytes", MAX_BODY_BYTES),
        chunked=_flag(entry.get("chunked")),
        trickle_ms=_optional_number(entry, "trickle_ms", MAX_SLEEP_MS),
        set_cookie=_optional_str(entry, "set_cookie"),
        headers={str(k): str(v) for k, v in headers.items()},
    )


def _optional_number(entry: Mapping[str, Any], name: str, high: float) -> float | None:
    value = entry.get(name)
    return None if value is None else _number(value, name, 0.0, high)


def _optional_int(entry: Mapping[str, Any], name: str, high: float) -> int | None:
    value = _optional_number(entry, name, high)
    return None if value is None else int(value)


def _optional_str(entry: Mapping[str, Any], name: str) -> str | None:
    value = entry.get(name)
    return None if value is None else str(value)


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in {"1", "true", "yes", "on"}
    return bool(value)


class Scripts:
    """FIFO queues of scripted answers, per path, plus the `*` queue for any path."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Directive]] = {}

    def enqueue(self, entries: list[Any], path: str = ANY_PATH) -> int:
        """Queue answers (validated first: all or none); return the queue's new length."""
        directives = [directive_from_entry(e) for e in entries]
        queue = self._queues.setdefault(path, deque())
        if len(queue) + len(directives) > MAX_SCRIPT:
            raise DirectiveError(f"a script queue holds at most {MAX_SCRIPT} answers")
        queue.extend(directives)
        return len(queue)

    def pop(self, path: str) -> Directive | None:
        """The next scripted answer for `path` (its own queue first, then `*`)."""
        for key in (path, ANY_PATH):
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        return None

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def clear(self) -> None:
        self._queues.clear()


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One served request. `t` is the arrival time (epoch seconds, `time.time()`)."""

    t: float
    method: str
    path: str
    outcome: str
    """The status as a string, `reset` for an aborted connection, `client_closed` when the
    client went away before the answer."""
    duration_ms: float
    idempotency_key: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "method": self.method,
            "path": self.path,
            "outcome": self.outcome,
            "durationMs": round(self.duration_ms, 3),
            "idempotencyKey": self.idempotency_key,
        }


class DownstreamStats:
    """Counters and a bounded list of recent requests; O(1) per request.

    `total` counts requests as they arrive (so a request still being served is in it);
    `by_outcome` and `recent` are written when a request ends. Without a reset in between,
    `total == sum(by_outcome.values()) + in_flight`.
    """

    def __init__(self) -> None:
        self.by_outcome: Counter[str] = Counter()
        self.total = 0
        self.in_flight = 0
        self.max_concurrent = 0
        self.recent: deque[RequestRecord] = deque(maxlen=MAX_RECENT)
        self.since = time.time()

    def arrive(self) -> None:
        """A request arrived (admitted or not)."""
        self.total += 1

    def enter(self) -> None:
        """An arrived request is admitted under the capacity limit and being served."""
        self.in_flight += 1
        self.max_concurrent = max(self.max_concurrent, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def record(self, record: RequestRecord) -> None:
        """A request ended with `record.outcome`."""
        self.by_outcome[record.outcome] += 1
        self.recent.append(record)

    def count(self, outcome: str) -> int:
        return self.by_outcome[outcome]

    def arrivals(self, path: str | None = None) -> list[float]:
        """Arrival times of the remembered requests, optionally for one path, in order."""
        return sorted(r.t for r in self.recent if path is None or r.path == path)

    def reset(self) -> None:
        """Clear the counters; requests in flight stay counted in `in_flight`."""
        self.by_outcome.clear()
        self.total = 0
        self.max_concurrent = self.in_flight
        self.recent.clear()
        self.since = time.time()

    def as_dict(self, recent_limit: int = MAX_RECENT) -> dict[str, Any]:
        recent = list(self.recent)[-recent_limit:] if recent_limit > 0 else []
        return {
            "total": self.total,
            "byStatus": dict(self.by_outcome),
            "inFlight": self.in_flight,
            "maxConcurrent": self.max_concurrent,
            "since": self.since,
            "recent": [r.as_dict() for r in recent],
        }


@dataclass
class DownstreamState:
    """Everything a running demo downstream knows; shared by its handlers."""

    config: DownstreamConfig
    stats: DownstreamStats = field(default_factory=DownstreamStats)
    scripts: Scripts = field(default_factory=Scripts)
    rng: random.Random = field(default_factory=random.Random)

    def choose(self, path: str, override: Directive | None) -> Directive | None:
        """The answer for a request that was admitted under the capacity limit.

        A scripted answer wins, then the request's own overrides, then a random 503 at
        `fail_rate`; None means the default answer (200 after the configured latency).
        """
        scripted = self.scripts.pop(path)
        if scripted is not None:
            return scripted
        if override is not None:
            return override
        if self.config.fail_rate > 0 and self.rng.random() < self.config.fail_rate:
            return Directive(status=503)
        return None

    def over_capacity(self) -> bool:
        capacity = self.config.capacity
        return capacity is not None and self.stats.in_flight >= capacity
