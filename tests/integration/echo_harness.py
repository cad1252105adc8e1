"""A downstream that echoes every request back (for the secret tests): it records what it
received, so a test can prove a secret reached it, and answers with the whole request, so a
test can prove the engine redacts what comes back.

`/fail/...` answers 400 (a failing call whose body excerpt would show the echo), anything
else 200; both with `{"method", "path", "rawPath", "query", "headers", "body"}` (`rawPath`: the
path and query as the request line carried them, in the client's percent-encoding) and the
request's Authorization header echoed in an `X-Echo-Authorization` response header.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


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
        status = 400 if request.path.startswith("/fail") else 200
        headers = {"X-Echo-Authorization": request.headers.get("Authorization", "")}
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
