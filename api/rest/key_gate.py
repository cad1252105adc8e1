"""Authentication before the body: a request that carries one is refused without a live key
before a byte of it is read.

Every route that takes a body needs a key, but the body's limits (`api.rest.middleware`'s
size limit, `api.rest.body_depth`'s nesting limit) and the app-wide checks of its shape run
before the route's own authentication dependency. Without this gate anyone who reaches the
port could make the server read and scan 10 MB, and be told 400/413/422 about it instead of
401. The caller found here is left in the request's state for `api.rest.auth.current_caller`,
so a request's key is looked up once; the access log then names it on every refusal too.

A request without a body (most actions), or of a method no body-taking route has (`GET`,
`HEAD`: `/health` and the docs are public), is left to the routes, whose dependency answers
it as before. When the key cannot be
checked (the store unreachable on a cache miss) the request goes on, and the route's own
authentication answers it the way every route answers an outage.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from api.rest.auth import CALLER_STATE, authenticate, key_from_headers, sole_header
from api.rest.deps import ApiContext
from api.rest.middleware import content_length, send_error
from api.rest.route_paths import route_for
from schemas.errors import ApiError

logger = logging.getLogger(__name__)


BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods whose routes may take a body (every one of them needs a key)."""


def _all(scope: Scope) -> dict[bytes, list[bytes]]:
    """The request's headers, every value of each name (a repeated `Authorization` is read
    here as in the route: `api.rest.auth.sole_header`)."""
    found: dict[bytes, list[bytes]] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name, []).append(value)
    return found


def _carries_body(scope: Scope, headers: dict[bytes, list[bytes]]) -> bool:
    length = content_length(scope)
    if length is not None:
        return length > 0
    # Chunked, or a Content-Length that is not a number (the body is read then, so gated).
    return b"transfer-encoding" in headers or b"content-length" in headers


class KeyGate:
    """Answers 401 `unauthorized` to a request with a body and no live key (see the module
    docstring); lets every other request through."""

    def __init__(self, app: ASGIApp, context: ApiContext, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.context = context
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ops = self.context.operations
        if scope["type"] != "http" or not self.context.auth or ops is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = _all(scope)
        if not _carries_body(scope, headers):
            await self.app(scope, receive, send)
            return
        try:
            authorization = sole_header(_texts(headers.get(b"authorization")), "Authorization")
            api_key = sole_header(_texts(headers.get(b"x-api-key")), "X-API-Key")
            secret = key_from_headers(authorization, api_key)
            caller = await authenticate(ops, secret, authorization)
        except ApiError as refused:
            # Refused before routing: name the route for the access log and the metrics, as
            # the route's own 401 would be named (not `<unmatched>`).
            route = route_for(scope["path"], scope["method"], self.routes)
            if route is not None:
                scope["route"] = route
            await send_error(send, refused.status, refused.code, str(refused))
            return
        except Exception:  # the route's own authentication answers it (503, with a code)
            logger.debug("key check before the body failed; left to the route", exc_info=True)
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[CALLER_STATE] = caller
        state["key_id"] = caller.key_id
        await self.app(scope, receive, send)


def _texts(values: list[bytes] | None) -> list[str]:
    return [value.decode("latin-1") for value in values or ()]
