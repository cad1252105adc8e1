"""Clients for the coordination store: a Redis server, or the embedded in-process fakeredis.

Redis holds shared coordination state only (admission, breakers, rate windows, heartbeats,
wake-ups; docs/architecture.md, 'Coordination through Redis'). The store is the source of
truth, so losing Redis may slow or pause work but must never lose or duplicate it. The rules
that follow from that:

- Opening a client never connects: a service starts even while Redis is down, and every
  caller treats a failed Redis call (`COORDINATION_ERRORS`) as "coordination unavailable right
  now": log it, fall back (slow polling, conservative admission), try again later. Use
  `redis_ok` to probe. Where a caller really cannot proceed, it refuses with
  `schemas.errors.Unavailable` (code `coordination_unavailable`).
- Commands fail fast (short connect/read timeouts, two quick retries) instead of hanging a
  worker on a dead server; callers already have a fallback.

Embedded mode (`Settings.redis_url` is None, the default): every client opened in this
process talks to the same `fakeredis.FakeServer`, created on first use (never at import time),
so the API, the workers and the admission scripts of one process share one keyspace, pub/sub
channels included. Lua (`EVAL`/`EVALSHA`) works there through `lupa`, each script compiled
once (`engine.coordination.embedded_scripts`). It is process-wide by
necessity: it *is* this process's Redis, the way a Redis server is shared by everything that
connects to it. Nothing outside this process can reach it.

Responses are `bytes` (`decode_responses=False`) on both backends: keys, values and pub/sub
payloads come back as `bytes`; decode at the edge (`value.decode()`, `json.loads(value)`).
Mixing decoded and raw clients would make every call site guess, so there is one convention.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import RedisError

from engine.settings import Settings

if TYPE_CHECKING:
    # Imported where the embedded server is built: a process given a Redis server (and a
    # CLI command that never opens a client) starts without fakeredis.
    import fakeredis

logger = logging.getLogger(__name__)

COORDINATION_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
"""What a failed coordination call raises: redis-py errors (connection refused, timeouts,
emulated outages in fakeredis), socket errors, and `asyncio.wait_for` timeouts. Catch exactly
this tuple where losing Redis must degrade instead of crash."""

CONNECT_TIMEOUT_S = 2.0
"""TCP connect timeout for a Redis server."""
COMMAND_TIMEOUT_S = 5.0
"""Socket read timeout for one command. Pub/sub reads pass their own timeout; a blocking
command (BLPOP and friends) must use a server-side timeout below this."""
HEALTH_CHECK_INTERVAL_S = 15
"""A pooled connection idle this long is PINGed before reuse, so a half-open TCP connection
(server restarted, NAT dropped it) is found before a real command is lost on it."""


class _EmbeddedSlot:
    """Holds the process's embedded server; empty until first use (nothing built at import)."""

    def __init__(self) -> None:
        # A lock, not just the GIL: a sync caller in a thread (CLI, test helper) may race the
        # event loop thread to create it, and two servers would split the keyspace silently.
        self._lock = threading.Lock()
        self._server: fakeredis.FakeServer | None = None

    def get(self) -> fakeredis.FakeServer:
        with self._lock:
            if self._server is None:
                import fakeredis  # see the imports at the top

                from engine.coordination.embedded_scripts import compile_scripts_once

                server = fakeredis.FakeServer()
                compile_scripts_once(server)
                self._server = server
            return self._server


_EMBEDDED = _EmbeddedSlot()


def embedded_server() -> fakeredis.FakeServer:
    """The process's embedded Redis-compatible server, created on first call and then shared
    by every client `open_redis` returns in this process."""
    return _EMBEDDED.get()


def _retry(retries: bool = True) -> Retry:
    if not retries:
        return Retry(NoBackoff(), retries=0)
    # Two quick retries cover a dropped connection or a failover blip; anything longer is an
    # outage, which callers handle by falling back rather than by waiting here.
    return Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), retries=2)


async def open_redis(
    settings: Settings, *, client_name: str | None = None, retries: bool = True
) -> redis.Redis:
    """Open a client for `settings.redis_url`, or for the embedded server when it is None.

    Does not connect; the first command does. Responses are `bytes`. `client_name` is sent
    with `CLIENT SETNAME` on every connection (visible in `CLIENT LIST`; server mode only).
    `retries=False`: a command whose connection fails is not sent again — for commands that
    must not run twice (a reply lost after Redis ran a script would otherwise apply it
    twice). Close the client with `close_redis`.
    """
    if settings.redis_url is None:
        import fakeredis  # see the imports at the top

        return fakeredis.FakeAsyncRedis(
            server=embedded_server(), decode_responses=False, retry=_retry(retries)
        )
    # TCP keepalive notices a peer gone without a word (a failover, a dropped NAT entry); a
    # Unix socket has no such option, and redis-py refuses it there (a TypeError).
    keepalive = {} if is_unix_socket(settings.redis_url) else {"socket_keepalive": True}
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=False,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=COMMAND_TIMEOUT_S,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry=_retry(retries),
        client_name=client_name,
        **keepalive,
    )


def is_unix_socket(url: str) -> bool:
    """Whether the Redis URL `url` names a Unix socket (`unix:///path/to/redis.sock?db=N`)."""
    return urlsplit(url).scheme == "unix"


def redis_database(url: str) -> str:
    """The database number the Redis URL `url` names, as written ("0" when it names none):
    after the port (`redis://host:6379/3`), or in the query of a Unix socket's
    (`unix:///run/redis.sock?db=3`)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parse_qs(parts.query).get("db", ["0"])[-1] or "0"
    return parts.path.lstrip("/") or "0"


async def close_redis(client: redis.Redis) -> None:
    """Close `client` and its connection pool. Never raises for a server that is already gone."""
    try:
        await client.aclose()
    except COORDINATION_ERRORS as error:
        logger.warning("closing the Redis client failed: %s", error)


async def redis_ok(client: redis.Redis, *, timeout_s: float = 1.0) -> bool:
    """True when `client` answers PING within `timeout_s` (default 1 s); never raises."""
    try:
        return bool(await asyncio.wait_for(client.ping(), timeout_s))
    except COORDINATION_ERRORS as error:
        logger.debug("Redis health probe failed: %s", error)
        return False
