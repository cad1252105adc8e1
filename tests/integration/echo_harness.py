"""A downstream that echoes every request back (for the secret tests): it records what it
received, so a test can prove a secret reached it, and answers with the whole request, so a
test can prove the engine redacts what comes back.

`/fail/...` answers 400 (a failing call whose body excerpt would show the echo), anything
else 200; both with `{"method", "path", "rawPath", "query", "headers", "body"}` (`rawPath`: the
path and query as the request line carried them, in the client's percent-encoding) and the
request's Authorization header echoed in an `X-Echo-Authorization` response header.

`/php/...` and `/gson/...` answer the same echo written the way those servers' JSON encoders
write it (`ESCAPES`), 422 under `/php/fail` and `/gson/fail`: the escapes a body excerpt, which
is never parsed, shows as they are. `/page/...` answers that PHP echo in an HTML page
(`<pre>` of its text, HTML-escaped), as a debug or error page shows the JSON it received.
"""

from __future__ import annotations

import contextlib
import html
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def php_json(value: Any) -> str:
    """PHP's `json_encode` with its default flags: `\\/` for `/`, `\\u00e9` for non-ASCII."""
    return json.dumps(value, ensure_ascii=True).replace("/", "\\/")


_GSON_HTML = {ord(c): f"\\u{ord(c):04x}" for c in "<>&='"}


def gson_json(value: Any) -> str:
    """Gson's default (HTML-safe) writer: `<`, `>`, `&`, `=` and `'` as `\\u003c` and so on,
    other characters as they are. The escaped characters never need escaping otherwise, so
    replacing them in the whole text is the same as escaping them inside each string."""
    return json.dumps(value, ensure_ascii=False).translate(_GSON_HTML)


ESCAPES = {"php": php_json, "gson": gson_json}


@dataclass
class Echo:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> str:
        """Everything received, as one text (to search for a value)."""
        return json.dumps(self.received, ensure_ascii=False)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[Echo]:
    echo = Echo("")

    async def handle(request: web.Request) -> web.Response:
        seen = {
            "method": request.method,
            "path": request.path,
            "rawPath": request.raw_path,
            "query": {name: request.query.getall(name) for name in request.query},
            "headers": {name.lower(): value for name, value in request.headers.items()},
            "body": await request.text(),
        }
        echo.received.append(seen)
        headers = {"X-Echo-Authorization": request.headers.get("Authorization", "")}
        style = request.path.split("/")[1]
        if style in ESCAPES:
            status = 422 if request.path.startswith(f"/{style}/fail") else 200
            text = ESCAPES[style](seen)
            return web.Response(
                text=text, status=status, headers=headers, content_type="application/json"
            )
        if style == "page":
            status = 422 if request.path.startswith("/page/fail") else 200
            text = f"<html><body><pre>{html.escape(php_json(seen))}</pre></body></html>"
            return web.Response(text=text, status=status, headers=headers, content_type="text/html")
        status = 400 if request.path.startswith("/fail") else 200
        return web.json_response(seen, status=status, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    echo.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield echo
    finally:
        await runner.cleanup()
