"""Pure ASGI middleware: the request body limit, and the observer that logs every request
(marking the notable ones, which `--access-log changes` keeps), measures it and answers the
routes' unexpected errors.

Both are plain ASGI callables (not Starlette's `BaseHTTPMiddleware`), so they see the messages
themselves: the limit counts body bytes as they arrive instead of reading the body first, and
the observer sees the status a response really started with.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.access_names import ACCESS_FIELDS, ACCESS_LOGGER
from api.rest.errors import INTERNAL_ERROR_MESSAGE, error_body
from engine.operations.row_cache import request_scope

UNMATCHED_ROUTE = "<unmatched>"
"""The route label of a request no route matched (its path is not used as a label: any
client could create unbounded label values)."""

SLOW_READ_S = 1.0
"""A GET or HEAD slower than this is notable (`notable`): an operator looks at slow reads."""
READS = frozenset({"GET", "HEAD"})
EVENT_STREAM = b"text/event-stream"

logger = logging.getLogger(__name__)
access_logger = logging.getLogger(ACCESS_LOGGER)

Observe = Callable[[str, str, int, float], None]
"""(method, route template, status, seconds) of one finished request."""


class BodyTooLarge(HTTPException):
    """The body passed the limit while it streamed in. An `HTTPException` on purpose: FastAPI
    turns any other error raised while it reads a body into a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is larger than the limit of {limit:,} bytes "
            "(SCHEMABRIDGE_MAX_BODY_BYTES on the server): send a smaller one, passing large "
            "data by reference (a URL the workflow fetches)",
        )


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    """Answer with an error body directly (for refusals made before or outside FastAPI); a
    401 says which scheme to authenticate with, as the routes' 401s do."""
    # Written as JSONResponse writes every other answer (compact, UTF-8 as is).
    body = json.dumps(
        error_body(code, message), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        # The rest of a refused body is never read: the connection cannot be reused.
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def content_length(scope: Scope) -> int | None:
    """The request's declared Content-Length (None: none, or not a number)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """Refuses a request body larger than `max_bytes` with 413 `body_too_large`.

    A declared `Content-Length` over the limit is refused before anything is read (the route
    never runs). A body without one (chunked) is counted message by message as the route
    reads it; the message that passes the limit raises `BodyTooLarge` in the reader, so at
    most one message beyond the limit is ever received.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await send_error(send, 413, "body_too_large", BodyTooLarge(self.max_bytes).detail)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as error:
            # Raised where nothing turned it into an answer (a route reading the stream
            # outside FastAPI's body parsing, e.g.).
            if started:
                raise
            await send_error(send, 413, "body_too_large", error.detail)


def notable(method: str, status: int, seconds: float, *, streamed: bool = False) -> bool:
    """Whether a request belongs in the access log of `--access-log changes`: it may change
    something (not GET or HEAD), it was answered with an error (400 or more), or it was a
    read slower than `SLOW_READ_S` — except an event stream, which lasts as long as its
    client watches. The monitor's polling reads are none of these."""
    if method not in READS or status >= 400:
        return True
    return seconds > SLOW_READ_S and not streamed


def _streams(message: Message) -> bool:
    return any(
        name == b"content-type" and value.startswith(EVENT_STREAM)
        for name, value in message.get("headers", ())
    )


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    # A mounted app (the monitor's files under /ui) leaves no route, but its prefix: routing
    # moved it from `app_root_path` to `root_path`. One label for all of its paths.
    mounted, base = scope.get("root_path"), scope.get("app_root_path")
    if scope.get("endpoint") is not None and isinstance(mounted, str) and isinstance(base, str):
        prefix = mounted.removeprefix(base)
        if prefix:
            return f"{prefix}/{{path}}"
    return UNMATCHED_ROUTE


RUN_ID_STATE = "run_id"
REPLAYED_STATE = "replayed"
"""Where a submission leaves the run it created or replayed, for its access-log line."""


def note_submission(state: Any, run_id: str, *, replayed: bool) -> None:
    """Name in this request's access-log line the run a submission created, or the one it
    answered again for a repeated `Idempotency-Key` (`replayed`): the line alone then says
    which key made which run, and that a replay made none."""
    setattr(state, RUN_ID_STATE, run_id)
    setattr(state, REPLAYED_STATE, replayed)


def client_address(scope: Scope) -> str | None:
    """The address of the client that sent the request: the connection's peer, or, when that
    peer is a trusted proxy (`SCHEMABRIDGE_TRUSTED_PROXIES`), the right-most address of its
    `X-Forwarded-For` that is not a trusted proxy (`api.rest.server`). Behind a proxy that is
    not trusted, this is the proxy's address (docs/security.md, 'The access log')."""
    client = scope.get("client")
    return None if not client else str(client[0])


class RequestObserver:
    """Around every HTTP request: time it, report it to `observe` (the latency histogram: an
    event stream's time to its first byte, not how long it was watched),
    write one JSON access-log line (`ts`, `method`, `route`, `path`, `status`,
    `duration_ms`, `key_id`, `client`; a submission's also `run_id` and `replayed`), and
    answer an exception that escaped the routes with 500 `internal_error` (its traceback
    logged here, never sent).

    `key_id` is what the authentication dependency left in the request's state (None when
    the request was not authenticated); `client` the peer's address (`client_address`), so
    a burst of refused keys from one address can be told from many clients' mistakes. Each
    line carries whether it is `notable`, for the filter of `--access-log changes`."""

    def __init__(self, app: ASGIApp, observe: Observe | None = None) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        state: dict[str, Any] = scope.setdefault("state", {})
        status: int | None = None
        streamed = False
        answered: float | None = None

        async def observing_send(message: Message) -> None:
            nonlocal status, streamed, answered
            if message["type"] == "http.response.start":
                status = int(message["status"])
                streamed = _streams(message)
                answered = time.perf_counter()
            await send(message)

        try:
            with request_scope():  # the row caches read their change tokens once per request
                await self.app(scope, receive, observing_send)
        except Exception:
            logger.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            if status is not None:
                raise  # too late for an answer: the server closes the connection
            status = 500
            await send_error(send, 500, "internal_error", INTERNAL_ERROR_MESSAGE)
        finally:
            ended = time.perf_counter()
            # An event stream lasts as long as its client watches (up to an hour): its
            # latency is the time to its first byte, else every watcher of the monitor would
            # look like a slow request to a latency alert.
            latency = (answered if streamed and answered is not None else ended) - began
            self._record(scope, state, status or 500, ended - began, latency, streamed=streamed)

    def _record(
        self,
        scope: Scope,
        state: dict[str, Any],
        status: int,
        seconds: float,
        latency: float,
        *,
        streamed: bool,
    ) -> None:
        route = _route_template(scope)
        if self.observe is not None:
            self.observe(scope["method"], route, status, latency)
        if not access_logger.isEnabledFor(logging.INFO):  # --access-log off: no line to build
            return
        line = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "method": scope["method"],
            "route": route,
            "path": scope["path"],
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "key_id": state.get("key_id"),
            "client": client_address(scope),
        }
        if RUN_ID_STATE in state:
            line[RUN_ID_STATE] = state[RUN_ID_STATE]
            line[REPLAYED_STATE] = state.get(REPLAYED_STATE)
        # `notable` lets `--access-log changes` (api.cli.log_setup) keep only these lines.
        # `access` is the line as data, for a formatter that adds the process's own fields
        # (`api.cli.log_setup.AccessFormatter`); the message stays the line as JSON.
        extra = {
            "notable": notable(scope["method"], status, seconds, streamed=streamed),
            ACCESS_FIELDS: line,
        }
        access_logger.info(json.dumps(line), extra=extra)
