"""Serving an app with uvicorn inside a service process that owns its signals.

`ApiServer` binds its socket when built (port 0: the system picks a free one, and `url` names
the real port), so an address in use fails at once, before anything else starts. `serve` runs
the app until the service's stop event is set, then lets in-flight requests finish within
`grace_s` (an event stream is told to end at once: `api.rest.deps.stop_streams`) and runs the
app's lifespan shutdown. uvicorn's own signal handling is switched off:
the process's `engine.lifecycle.ServiceLifecycle` turns SIGINT/SIGTERM into the stop event,
for the API and the workers beside it alike.

The client address of a request (`scope["client"]`, which the access log writes) is the
connection's peer, unless that peer is one of `trusted_proxies`: then it is the right-most
address of `X-Forwarded-For` that is not a trusted proxy, as uvicorn's `ProxyHeadersMiddleware`
reads it (docs/security.md, 'The access log').
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence

import uvicorn
from fastapi import FastAPI

from api.rest.bounded_head import BoundedHead
from api.rest.deps import stop_streams
from vertices.egress import IPNetwork


class _Uvicorn(uvicorn.Server):
    """uvicorn without signal handlers, telling when it accepts connections, and calling
    `stopping` when it stops, once it no longer accepts any."""

    def __init__(
        self, config: uvicorn.Config, ready: asyncio.Event, stopping: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._ready = ready
        self._stopping = stopping

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the service's lifecycle owns SIGINT/SIGTERM

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn waits for every response in progress, up to the grace, before the app's
        # lifespan ends: an event stream lasts as long as it is watched, so it would hold
        # the whole grace and then be cancelled with a traceback. Told here, the streams
        # end at once; the listener is closed first, so a client reconnecting at once is
        # refused (or sent to another api) rather than served by this one again.
        for server in self.servers:
            server.close()
        self._stopping()
        await super().shutdown(sockets)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048)
    # Accepted connections inherit TCP_NODELAY from the listening socket. uvloop sets it on
    # each connection itself, asyncio's loop does not (this socket's protocol number is 0):
    # there uvicorn's response, written in two sends, waited for the client's delayed ACK,
    # ~40 ms on every request of a kept-alive connection.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ApiServer:
    """A listening socket on `host:port`, then uvicorn serving an app on it.

    Raises OSError when the address cannot be bound (in use, not local). `grace_s` (default
    20 s) bounds how long in-flight requests may take once the stop is requested.
    `trusted_proxies`: the peers whose `X-Forwarded-For` is believed (default none)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        grace_s: float = 20.0,
        trusted_proxies: Sequence[IPNetwork] = (),
    ) -> None:
        self._socket = _bind(host, port)
        self.port: int = self._socket.getsockname()[1]
        self.url = _url(host, self.port)
        """The address it listens on, with the real port."""
        self.grace_s = grace_s
        self.trusted_proxies = tuple(trusted_proxies)
        self._ready = asyncio.Event()
        self._server: _Uvicorn | None = None

    async def wait_ready(self) -> bool:
        """Wait until it accepts requests (True), or until serving ended without ever
        starting (False: the app's lifespan failed; uvicorn logged why)."""
        await self._ready.wait()
        return self._server is not None and self._server.started

    async def serve(self, app: FastAPI, stop: asyncio.Event) -> None:
        """Serve `app` until `stop` is set; then drain and shut the app down."""
        config = uvicorn.Config(
            app,
            lifespan="on",
            # httptools parses HTTP/1.1 in C (h11, the fallback, is pure Python); bounded, as
            # it is not by itself, in a request head's size and time (`api.rest.bounded_head`).
            http=BoundedHead,
            log_config=None,  # the process configured logging; the access log is the app's
            access_log=False,
            # Only the proxies named (SCHEMABRIDGE_TRUSTED_PROXIES), never uvicorn's default
            # (127.0.0.1, or FORWARDED_ALLOW_IPS): any local process could otherwise write the
            # client address of the access log. uvicorn walks X-Forwarded-For from the right
            # and takes the first address that is not a trusted proxy.
            proxy_headers=bool(self.trusted_proxies),
            forwarded_allow_ips=[str(network) for network in self.trusted_proxies],
            timeout_graceful_shutdown=max(1, round(self.grace_s)),
        )
        server = self._server = _Uvicorn(config, self._ready, lambda: stop_streams(app))
        try:
            async with asyncio.TaskGroup() as group:
                serving = group.create_task(server.serve(sockets=[self._socket]), name="http")
                group.create_task(_stop_when(server, stop, serving), name="http-stop")
        finally:
            self._socket.close()
            self._ready.set()  # wakes a waiter of a server that never started

    def close(self) -> None:
        """Release the socket of a server that will not serve."""
        self._socket.close()


async def _stop_when(
    server: uvicorn.Server, stop: asyncio.Event, serving: asyncio.Task[None]
) -> None:
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopping, serving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    server.should_exit = True
