"""The limits on a JSON request body once it is whole, before a route sees it (docs/security.md,
'Input limits'): its route's size (`api.rest.body_limits`: 413 `body_too_large`), then its
nesting: a body that nests arrays and objects deeper than `MAX_NESTING_DEPTH` (64) is refused
with 422 `too_deep` and the pointer of the first container past the limit.

Without it, a body a few thousand levels deep makes the JSON parser give up (FastAPI answers
400 with no pointer) and one a few hundred deep reaches code that recurses (JSON Schema
validation, expression rendering). A pure ASGI middleware, inside `BodyLimit`: the body it
collects is already bounded by `MAX_BODY_BYTES`. Most bodies hold fewer brackets than the
limit, which one `bytes.count` pass proves; the others are measured with string passes that
run in C (`schemas.json_depth.nesting_exceeds`), and only a body that is too deep is parsed
here, to find the pointer.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.rest.body_limits import body_limit, over, too_large_message
from api.rest.errors import error_body
from api.rest.middleware import send_error
from engine.settings import Settings
from engine.validation import deep_pointer, nesting_exceeds

_JSON_TYPES = ("application/json", "text/json")
INCOMPLETE_BODY = (
    "the request's body ended before it was whole (the connection closed, or the body "
    "stopped arriving): nothing was done; send the request again"
)
"""Recorded in the access log only: the connection is gone when it is said."""


def _is_json(scope: Scope) -> bool:
    """Whether the body may be read as JSON: at least wherever FastAPI reads it as JSON. The
    header is read as FastAPI reads it, as latin-1 text whose `str.strip` also takes off
    `\xa0` and `\x85`: stripped as bytes, `application/json\xa0` skipped the checks here
    and was parsed by the route all the same (2.4 MB of objects to a run's submission)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.decode("latin-1").split(";", 1)[0].strip().lower()
            return media in _JSON_TYPES or media.endswith("+json")
    return False


def _too_deep_at(body: bytes, max_depth: int) -> str | None:
    """The pointer of the first container past `max_depth`, or None (also for a body that is
    not JSON at all: the route's own parsing reports that)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not nesting_exceeds(text, max_depth):
        return None
    try:
        value: Any = json.loads(text)
    except RecursionError:
        return ""  # too deep for the parser itself: the whole body is the problem
    except ValueError:
        return None
    return deep_pointer(value, max_depth)


async def _refuse(send: Send, at: str, max_depth: int) -> None:
    message = (
        f"The request body nests arrays and objects more than {max_depth} levels deep; "
        "flatten it (the limit is SCHEMABRIDGE_MAX_NESTING_DEPTH)."
    )
    problem = {"pointer": at, "code": "too_deep", "message": message, "in": "body"}
    body = json.dumps(error_body("too_deep", message, {"problems": [problem]})).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyDepthLimit:
    """Refuses a JSON request body over its route's size (413 `body_too_large`) or nested
    deeper than the settings' nesting limit (422 `too_deep`)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.max_depth = settings.nesting_depth_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:  # bounded: BodyLimit, outside, stops a body past MAX_BODY_BYTES
            message = await receive()
            if message["type"] != "http.request":
                # The client went away, or the server answered 408 for a body that stopped
                # arriving (`bounded_head`): what came is not the request. Handed on as if
                # whole, a body missing only its trailing whitespace ran the route after
                # that 408, and a client retrying the 408 made the change twice.
                await send_error(send, 408, "request_timeout", INCOMPLETE_BODY)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        path: str = scope["path"]
        limit = body_limit(path, self.settings)
        if over(body, limit):
            refusal = too_large_message(path, limit, self.settings)
            await send_error(send, 413, "body_too_large", refusal)
            return
        at = _too_deep_at(body, self.max_depth)
        if at is not None:
            await _refuse(send, at, self.max_depth)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
