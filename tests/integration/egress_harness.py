"""Listeners and a resolver for the egress tests, all on loopback.

* `Canary`: a TCP listener that counts every connection it accepts (and answers any request
  200, so a call that reached it would even succeed). It must count zero while hostile
  workflows run under a policy that does not allow loopback.
* `StandIn`: an HTTP service on 127.0.0.2 that the test's allow-list admits: it plays a public
  destination (nothing here may call a real one) and can answer with redirects.
* `ControlledResolver`: the test's DNS, given to the runtime through the HTTP client's resolver
  seam; its answers can change between calls (DNS rebinding)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

STAND_IN_HOST = "127.0.0.2"
"""Loopback, but not 127.0.0.1: the allow-list admits this one address only."""


@dataclass
class Canary:
    """Counts connections on `host` (a free port)."""

    host: str
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@asynccontextmanager
async def canary(host: str) -> AsyncIterator[Canary]:
    listener = Canary(host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = await asyncio.start_server(listener._accept, host, 0, family=family)
    listener.port = server.sockets[0].getsockname()[1]
    try:
        yield listener
    finally:
        server.close()
        await server.wait_closed()


@dataclass
class StandIn:
    """An HTTP service on 127.0.0.2: `/ok` answers 200 JSON, `/redirect?to=URL&status=N`
    answers a redirect to URL. `paths` lists what it was asked, in order."""

    port: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{STAND_IN_HOST}:{self.port}"


@asynccontextmanager
async def stand_in() -> AsyncIterator[StandIn]:
    service = StandIn()

    async def handle(request: web.Request) -> web.StreamResponse:
        service.paths.append(request.path_qs)
        if request.path == "/redirect":
            status = int(request.query.get("status", "302"))
            return web.Response(status=status, headers={"Location": request.query["to"]})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, STAND_IN_HOST, 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    service.port = server.sockets[0].getsockname()[1]
    try:
        yield service
    finally:
        await runner.cleanup()


@dataclass
class ControlledResolver:
    """Names to addresses, as the test sets them; `lookups` records every question."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)

    async def resolve(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        try:
            return list(self.answers[host.lower().rstrip(".")])
        except KeyError:
            raise OSError(f"{host}: no such name in the test's resolver") from None
