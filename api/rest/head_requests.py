"""`HEAD` on every `GET` route: the same status and headers, no body.

HTTP asks that a resource answering GET answer HEAD (RFC 9110, 9.3.2), and clients use it:
uptime monitors and load balancers probe with it, link checkers and caches ask it before a
GET. FastAPI's routes answer GET only, so a `HEAD /runs` was a 405 that a monitor reads as
"down". This middleware passes a HEAD on to the application as a GET and sends the answer's
start (status, headers, `Content-Length` included) with an empty body; the routing, the key
check, the route and its errors are the GET's.

A streamed answer (`GET /runs/{id}/events`) ends at its first body chunk: the response is
complete for the client, and the server then tells the stream the client has gone
(`http.disconnect`), which stops it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """ASGI middleware: a `HEAD` request is served as its `GET`, without the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False
        # A copy: the server keeps its own scope's HEAD, and with it drops any body itself.
        as_get = {**scope, "method": "GET"}

        async def without_body(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.start":
                # What routing found, for the layers outside (the observer's route label:
                # a HEAD /health was counted as `<unmatched>`).
                for key in ("route", "endpoint", "root_path", "app_root_path"):
                    if key in as_get:
                        scope[key] = as_get[key]
                await send(message)
            elif message["type"] == "http.response.body" and not ended:
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app(as_get, receive, without_body)
