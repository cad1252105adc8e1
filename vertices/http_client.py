"""The HTTP client a worker shares among its GATEWAY steps.

We keep httpx's API but run it on aiohttp: httpx's default transport (httpcore) spends
milliseconds of CPU per request at high concurrency (encode/httpx#3215), which caps a worker
at a few hundred calls per second; the `httpx-aiohttp` transport does the I/O through aiohttp
instead (bench/http_transport.py measures both).

Three things differ from what that transport gives out of the box, each on purpose:

* **No hidden retries.** aiohttp silently resends an idempotent request once when a
  connection breaks. Retries belong to the GATEWAY policy, where they are logged, counted and
  paid for from the retry budget (DESIGN §6), so the session's reconnect-and-resend is off.
* **No cookie jar.** One client serves every tenant and run; a cookie set by one call must
  never ride along on another. Both httpx's and aiohttp's jars are replaced by ones that keep
  nothing.
* **Honest error classes.** The transport maps aiohttp errors onto httpx ones loosely (a
  refused or reset connection surfaces as `httpx.ConnectTimeout`), so callers classify
  failures with `classify_transport_error`, which looks at the original aiohttp error.

Timeouts: httpx's per-request `timeout` reaches aiohttp as connect and per-read (inactivity)
limits, not as a limit on the whole exchange; callers that need a hard deadline (the gateway
does) also wrap the call in `asyncio.timeout`.
"""

from __future__ import annotations

import ssl
from enum import StrEnum
from http.cookiejar import CookieJar, DefaultCookiePolicy

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

DEFAULT_MAX_CONNECTIONS = 256
"""Open connections per client (all destinations together)."""
KEEPALIVE_EXPIRY_S = 4.0
"""Idle connections are closed after this long: below the 5 s keep-alive of common servers
(Node.js), so we rarely send on a connection the server is closing; without aiohttp's hidden
resend such a race would cost a logged retry."""


class TransportErrorKind(StrEnum):
    """What went wrong below HTTP."""

    TIMEOUT = "timeout"
    """No answer in time (connect, read, pool wait or the caller's deadline)."""
    NETWORK = "network"
    """Refused, reset, closed early, DNS, TLS or a malformed response: worth a retry."""
    INVALID_REQUEST = "invalid_request"
    """The request itself cannot be sent (unsupported scheme, bad URL or header)."""
    INVALID_RESPONSE = "invalid_response"
    """The answer arrived but its content encoding cannot be decoded."""


class _KeepNoCookies(DefaultCookiePolicy):
    def set_ok(self, cookie: object, request: object) -> bool:
        return False


def _session_factory(ssl_context: ssl.SSLContext, max_connections: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=0,
        keepalive_timeout=KEEPALIVE_EXPIRY_S,
        ssl=ssl_context,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        auto_decompress=False,
    )
    # Not public API: aiohttp has no switch for its resend-on-broken-connection. The attribute
    # is in ClientSession.__slots__, so if aiohttp renames it this fails loudly, and
    # tests/integration/test_gateway_client.py pins the one-request-per-attempt behaviour.
    session._retry_connection = False
    return session


def build_http_client(max_connections: int = DEFAULT_MAX_CONNECTIONS) -> httpx.AsyncClient:
    """A new `httpx.AsyncClient` on the aiohttp transport, for one worker.

    Safe to build outside an event loop: the aiohttp session is created on the first request,
    inside the loop that uses it. Redirects are not followed (httpx's default): a 3xx is an
    answer like any other. Close it with `close_http_client`.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    ssl_context = httpx.create_ssl_context()
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )
    transport = AiohttpTransport(
        verify=ssl_context,
        limits=limits,
        client=lambda: _session_factory(ssl_context, max_connections),
    )
    return httpx.AsyncClient(
        transport=transport,
        limits=limits,
        cookies=CookieJar(policy=_KeepNoCookies()),
        trust_env=False,
        follow_redirects=False,
    )


async def close_http_client(client: httpx.AsyncClient) -> None:
    """Close the client and its connections. Idempotent."""
    if not client.is_closed:
        await client.aclose()


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its causes/contexts, nearest first (bounded: chains are short)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 8 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def classify_transport_error(exc: BaseException) -> TransportErrorKind | None:
    """Classify an exception raised while sending a request or reading its answer.

    Returns None for exceptions that are not transport failures (bugs must surface as such).
    """
    chain = _chain(exc)
    if any(isinstance(e, TimeoutError) for e in chain):
        # asyncio.TimeoutError is TimeoutError, and aiohttp's timeout errors subclass it.
        return TransportErrorKind.TIMEOUT
    if isinstance(exc, httpx.DecodingError):
        return TransportErrorKind.INVALID_RESPONSE
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        return TransportErrorKind.INVALID_REQUEST
    if any(isinstance(e, aiohttp.ClientError) for e in chain):
        # From aiohttp, any timeout was caught above: what is left is a network failure,
        # whatever httpx class the transport mapped it to.
        return TransportErrorKind.NETWORK
    if isinstance(exc, httpx.TimeoutException):
        return TransportErrorKind.TIMEOUT
    if isinstance(exc, httpx.TransportError | OSError):
        return TransportErrorKind.NETWORK
    return None
