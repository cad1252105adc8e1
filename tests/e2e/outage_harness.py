"""What a test needs to take the API away from a command that follows a run:

- `Gate`: an HTTP service on loopback whose `/hold/NAME` answers only once the test opens the
  gate NAME, so a GATEWAY step calling it keeps its run RUNNING for as long as the test wants
  (no timing guesses);
- `proxied`: a TCP proxy in front of PostgreSQL (`CuttableProxy`) that the test cuts (every
  connection dropped, new ones refused) and restores on the same port: a database outage
  under the processes that connect through it, the shared server never stopped;
- `throwaway_redis`: a `redis-server` of the test's own on a free port, without persistence,
  that the test stops and starts again (a Redis restart that loses every key);
- `Proxy`: a TCP proxy in front of the API that the test switches between forwarding,
  answering `503` (as a load balancer does while the API behind it restarts) and closing every
  connection at once (`drop`), and whose `cut()` breaks the connections it carries (an event
  stream mid-way included).

Both run in threads of the test process and stop at the end of their `with` block.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

GATE_HOLD_S = 300.0
"""The longest a held request waits for its gate (a test that forgets to open it ends)."""
WAIT_S = 120.0
"""The longest a test waits for a condition (a loaded machine starts processes slowly)."""
Found = TypeVar("Found")
BUFFER = 65_536

Mode = Literal["forward", "503", "drop"]


class Gate:
    """`GET /hold/NAME` answers `{"gate": NAME}` once `open(NAME)` was called; `calls`
    counts the requests of each path (a step sent twice shows as 2)."""

    def __init__(self) -> None:
        self._gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with gate._lock:
                    gate.calls[self.path] += 1
                name = self.path.rsplit("/", 1)[-1]
                gate.event(name).wait(GATE_HOLD_S)
                body = json.dumps({"gate": name}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: pytest shows the test's own output

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def event(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def open(self, name: str) -> None:
        self.event(name).set()

    def close(self) -> None:
        for event in list(self._gates.values()):
            event.set()
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def gate() -> Iterator[Gate]:
    running = Gate()
    running._thread.start()
    try:
        yield running
    finally:
        running.close()


SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nContent-Length: 19\r\n"
    b"Connection: close\r\n\r\n<h1>restarting</h1>"
)


class Proxy:
    """A TCP proxy on a free loopback port to `upstream` (host, port); see the module
    docstring. `answered` counts the connections it refused (503 or drop) since the last
    `reset_counts()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.mode: Mode = "forward"
        self.answered = 0
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        # Forward each small write at once, both ways (accepted sockets inherit it): Nagle's
        # wait for a delayed ACK would add ~40 ms to every proxied request.
        self._listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def switch(self, mode: Mode) -> None:
        """Answer new connections the `mode` way, and break the ones open now (a client's
        pooled connection must not carry on past the switch)."""
        with self._lock:
            self.mode = mode
            self.answered = 0
        self.cut()

    def cut(self) -> None:
        with self._lock:
            live, self._live = self._live, set()
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            mode = self.mode
            if mode != "forward":
                self.answered += 1
        if mode == "drop":
            client.close()
            return
        if mode == "503":
            with contextlib.suppress(OSError):
                client.settimeout(5)
                client.recv(BUFFER)  # the request line and headers (a GET has no body)
                client.sendall(SERVICE_UNAVAILABLE)
            client.close()
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._live |= {client, upstream}
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(BUFFER):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def proxy(api_url: str) -> Iterator[Proxy]:
    host, _, port = api_url.removeprefix("http://").rstrip("/").partition(":")
    running = Proxy((host, int(port)))
    running._thread.start()
    try:
        yield running
    finally:
        running.close()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def until(
    check: Callable[[], Awaitable[Found]],
    what: str,
    timeout_s: float = WAIT_S,
    interval_s: float = 0.2,
) -> Found:
    """Poll the async `check` until it returns something true, and return that; fail naming
    `what` after `timeout_s` or `timeout_s / interval_s + 1` checks, whichever comes first
    (the deadline also cuts a check that hangs)."""
    checks = math.ceil(timeout_s / interval_s) + 1
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(checks):
                if found := await check():
                    return found
                await asyncio.sleep(interval_s)
    except TimeoutError:
        pass
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Follower:
    """A `schemabridge` command left running (`runs watch`, `runs logs --follow`), its stdout
    and stderr in files the test reads while it runs."""

    def __init__(self, command: list[str], env: dict[str, str], directory: Path, name: str):
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=err)

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8")

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8")

    def wait(self, timeout_s: float = WAIT_S) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # What it printed says where it was stuck: the failure must show it.
            raise AssertionError(
                f"{' '.join(map(str, self.process.args))} still running after {timeout_s} s; "
                f"stdout ends {self.stdout()[-1500:]!r}; stderr ends {self.stderr()[-1500:]!r}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


class CuttableProxy:
    """A loopback TCP proxy in front of PostgreSQL that can be cut (listener closed, every
    connection through it dropped) and restored on the same port."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            client_w.transport.abort()
            return
        self._writers |= {client_w, up_w}

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        self._writers -= {client_w, up_w}


@contextlib.asynccontextmanager
async def proxied(database_url: str) -> AsyncIterator[tuple[CuttableProxy, str]]:
    proxy = CuttableProxy(5432)
    await proxy.start()
    try:
        yield proxy, database_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    finally:
        await proxy.cut()


@contextlib.contextmanager
def throwaway_redis(port: int, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `redis-server` of this test's own on `port`, without persistence: a restart loses
    every key."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)


def fan_out(base: str) -> list[dict[str, Any]]:
    """`fan`: a SPAWNER of `leaf` over `input.items`, each a 200 ms POST to the demo
    downstream at `base`, and a MERGE of them."""
    parent = {
        "name": "fan",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.items }}", "workflow": "leaf"},
            },
            "join": {"type": "MERGE", "dependsOn": ["each"], "config": {}},
        },
    }
    leaf = {
        "name": "leaf",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{base}/leaf/{{{{ index }}}}",
                    "method": "POST",
                    "headers": {"X-Demo-Sleep-Ms": "200"},
                },
            }
        },
    }
    return [leaf, parent]
