"""The HTTP client a worker shares among its GATEWAY steps: one aiohttp session.

Why aiohttp and not httpx: measured on this project's machine (bench/http_transport.py), a
request through httpx costs about 550 µs of CPU even on its aiohttp transport, against about
180 µs through aiohttp directly; at a thousand calls a second per core that difference is the
worker's whole budget. The GATEWAY needs one streamed request with a hard deadline, a bounded
body read and honest error classes, which aiohttp gives directly.

Three things differ from what aiohttp does out of the box, each on purpose:

* **No hidden retries.** aiohttp silently resends an idempotent request once when a kept-alive
  connection breaks. Retries belong to the GATEWAY policy, where they are logged, counted and
  paid for from the retry budget (docs/architecture.md, 'Retry budget'), so the session's
  reconnect-and-resend is off.
* **No cookie jar.** One client serves every tenant and run; a cookie set by one call must
  never ride along on another.
* **No redirects, no proxy from the environment.** A 3xx is an answer like any other, and a
  worker's environment must not reroute tenants' calls. Not following redirects is also part
  of the egress policy: a `Location` pointing at the metadata address is never fetched.
* **The egress policy on the address connected to** (docs/security.md, 'Egress policy').
  Every DNS answer goes through `EgressPolicy.allowed_addresses` before aiohttp sees it, so the
  address checked is the address connected to (a name that resolves to a public address at
  publication and to a private one at call time is refused at call time). aiohttp never asks
  the resolver about an IP-literal host, so the URL's host is checked before the request is
  sent (`EgressPolicy.check_url`, every IPv4 spelling included); and the socket factory checks
  each address once more just before connecting, a backstop should either check be bypassed.

Timeouts: `timeout_s` bounds connecting (including the wait for a pooled connection) and each
read; callers that need a hard deadline on the whole exchange (the gateway does) also wrap the
call in `asyncio.timeout`. Content encodings (gzip, deflate) are decoded while streaming, so a
caller counting the bytes it reads bounds the decoded size.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from vertices.egress import EgressDenied, EgressPolicy
from vertices.host_resolver import HostResolver

if TYPE_CHECKING:
    # aiohttp (and with it its SSL contexts) is imported where a request is made: every
    # process builds this client with its runtime, and a CLI command that never calls out
    # (`schemabridge keys list`) should not pay ~0.2 s for it. Once imported, the imports
    # in the functions below are a dictionary lookup.
    import aiohttp

    from vertices.policy_resolver import PolicyResolver

DEFAULT_MAX_CONNECTIONS = 256
"""Open connections per client (all destinations together)."""
KEEPALIVE_EXPIRY_S = 4.0
"""Idle connections are closed after this long: below the 5 s keep-alive of common servers
(Node.js), so we rarely send on a connection the server is closing; without aiohttp's hidden
resend such a race would cost a logged retry."""
USER_AGENT = "SchemaBridge"


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


class SystemResolver:
    """The operating system's resolver (`getaddrinfo`, in the loop's thread pool)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG
        )
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class HttpClient:
    """A pooled HTTP/1.1 client (aiohttp). Safe to build outside an event loop: the session
    is created on the first request, inside the loop that uses it. Close it with `aclose`.

    `egress` is the policy every request is held to; None means no policy at all, which only
    tests and benchmarks that call loopback use: every process builds its client through
    `engine.runtime.Runtime`, which always passes the policy of its settings. `resolver`
    replaces the system's name resolution (tests)."""

    def __init__(
        self,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        *,
        egress: EgressPolicy | None = None,
        resolver: HostResolver | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self.egress = egress
        self._resolver = resolver or SystemResolver()
        self._policy_resolver: PolicyResolver | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _socket(self, addr_info: Any) -> socket.socket:
        """The backstop: refuse to even create the socket for a refused address."""
        family, type_, proto, _, sockaddr = addr_info
        text = str(sockaddr[0]).split("%", 1)[0]
        policy, names = self.egress, self._policy_resolver
        if policy is not None and names is not None and text not in names.admitted_by_name:
            reason = policy.address_refusal(ipaddress.ip_address(text))
            if reason is not None:
                raise EgressDenied(f"egress denied: {text} is {reason}")
        return socket.socket(family=family, type=type_, proto=proto)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        """Whether the session is built (`open`, or the first request, built it)."""
        return self._session is not None

    def open(self) -> None:
        """Build the session now rather than at the first request: its TLS context loads the
        system's CA certificates, about 20 ms during which the event loop serves nobody, and
        a worker would otherwise pay it on its first call, with an admission slot held."""
        self._open()

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        if self._session is None:
            import aiohttp  # see the imports at the top

            from vertices.policy_resolver import PolicyResolver

            options: dict[str, Any] = {}
            if self.egress is not None:
                self._policy_resolver = PolicyResolver(self._resolver, self.egress)
                options = {"resolver": self._policy_resolver, "socket_factory": self._socket}
            elif not isinstance(self._resolver, SystemResolver):
                options = {"resolver": PolicyResolver(self._resolver, _NO_POLICY)}
            connector = aiohttp.TCPConnector(
                limit=self.max_connections,
                limit_per_host=0,
                keepalive_timeout=KEEPALIVE_EXPIRY_S,
                ssl=ssl.create_default_context(),
                **options,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                headers={"User-Agent": USER_AGENT},
            )
            # Not public API: aiohttp has no switch for its resend-on-broken-connection. If a
            # release renames the attribute, setting it would silently do nothing, so check
            # first; tests/integration/test_gateway_client.py also pins one request per attempt.
            if not hasattr(session, "_retry_connection"):
                raise RuntimeError(
                    "this aiohttp has no ClientSession._retry_connection: the GATEWAY cannot "
                    "switch off its hidden resend; pin aiohttp to a version that has it"
                )
            session._retry_connection = False
            self._session = session
        return self._session

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Sequence[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        timeout_s: float,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one request and yield its response with the body unread (stream it from
        `response.content`); the connection is released when the block ends.

        Raises `EgressDenied` (nothing sent) when the egress policy refuses the URL or every
        address its host resolves to."""
        import aiohttp  # see the imports at the top
        import yarl

        try:
            # Parsed once: the host checked is the host aiohttp connects to.
            target = yarl.URL(url)
        except ValueError as exc:
            raise aiohttp.InvalidURL(url, str(exc)) from exc
        if self.egress is not None:
            self.egress.check_url(target)
        timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s)
        async with self._open().request(
            method,
            target,
            params=list(params) or None,
            headers=headers,
            data=content,
            timeout=timeout,
            allow_redirects=False,
        ) as response:
            yield response

    async def aclose(self) -> None:
        """Close the client and its connections. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


_NO_POLICY = EgressPolicy(
    networks=(ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
)
"""Admits every address: a replaced resolver without a policy (tests)."""


def build_http_client(
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    *,
    egress: EgressPolicy | None = None,
    resolver: HostResolver | None = None,
) -> HttpClient:
    """A new client for one worker (see `HttpClient`)."""
    return HttpClient(max_connections, egress=egress, resolver=resolver)


async def close_http_client(client: HttpClient) -> None:
    """Close the client and its connections. Idempotent."""
    await client.aclose()


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its causes/contexts, nearest first (bounded: chains are short)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 8 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def transport_error_message(exc: BaseException) -> str:
    """One line for a transport failure, without aiohttp's connection-key noise: its
    "Cannot connect to host h:p ssl:default [...]" names the TLS context, which says nothing
    to an operator; a refused certificate is still said to be one.

    It becomes the step's error, which the run's tenant reads, so a failed connection says
    why (`_connect_reason`) but never at which addresses: the host is named as the URL wrote
    it. A name's addresses stay out of the step's error whether the egress policy admitted
    it or refused it (docs/security.md, 'Where it is enforced')."""
    import aiohttp  # see the imports at the top

    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate of {exc.host}:{exc.port} refused: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port}: {_connect_reason(exc.os_error)}"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"not a valid URL: {_invalid_url_reason(exc.description)}"
    return str(exc) or type(exc).__name__


def _invalid_url_reason(description: str | None) -> str:
    """Why the HTTP client refused a URL, without the URL: aiohttp's own text starts with the
    URL whole, `user:password@`, query string and fragment included, which a step's error
    never shows (docs/security.md, 'Using a secret'), and one of yarl's reasons quotes the
    URL's authority. yarl's other reasons are fixed sentences, kept as they are."""
    if not description:
        return "the HTTP client cannot read it"
    if "backslash" in description:
        # A literal `\` before the path: publication reads it as part of a user name.
        return "a backslash before its path, which the HTTP client refuses (RFC 3986)"
    if "'" in description or '"' in description:
        return "its host is malformed"
    return description


def _connect_reason(error: OSError) -> str:
    """Why a connection failed, without the addresses it was tried at. asyncio words a failed
    connect "Connect call failed ('10.0.3.7', 8080)", and a name with several addresses
    "Multiple exceptions: …" listing each: from an admitted host pattern
    (`*.svc.cluster.local`) a submitter choosing the host would read the network's layout
    back. The error number's own text says the same without them."""
    if isinstance(error, ssl.SSLError | socket.gaierror):
        return error.strerror or str(error)  # a TLS failure, the resolver's answer: no address
    if error.errno:
        return os.strerror(error.errno)  # "Connection refused", "No route to host", …
    return "no address the host resolves to accepted the connection"


def classify_transport_error(exc: BaseException) -> TransportErrorKind | None:
    """Classify an exception raised while sending a request or reading its answer.

    Returns None for exceptions that are not transport failures (bugs must surface as such).
    """
    import aiohttp  # see the imports at the top
    from aiohttp import http_exceptions

    chain = _chain(exc)
    if any(isinstance(e, TimeoutError) for e in chain):
        # asyncio.TimeoutError is TimeoutError, and aiohttp's timeout errors subclass it.
        return TransportErrorKind.TIMEOUT
    if any(isinstance(e, http_exceptions.ContentEncodingError) for e in chain):
        return TransportErrorKind.INVALID_RESPONSE
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return TransportErrorKind.INVALID_REQUEST
    if any(isinstance(e, aiohttp.ClientError | OSError) for e in chain):
        return TransportErrorKind.NETWORK
    return None
