"""The demo downstream: a small, fast HTTP service for examples, tests and benchmarks.

Run it with `python -m demo.downstream --port 8765 [--latency-ms 20] [--capacity 20
--retry-after 1] [--fail-rate 0.0]`, or start it in-process with `start_downstream()`.

Any path and method answers 200 with a JSON echo `{method, path, query, headers, body}` after
the configured latency; `GET /items?count=N` answers `{"items": [{"id": 0, "name": "item-0"},
…]}`. On top of that, in this order:

1. capacity — beyond `capacity` concurrent requests the answer is an immediate 429 with
   `Retry-After`;
2. a scripted answer queued by `POST /_script` (a list such as `[503, 503, 200]`, or
   `{"path": "/x", "responses": [...]}` for one path);
3. per-request overrides, as query parameters or `X-Demo-*` headers (or in a path segment:
   below): `status`, `sleep_ms`,
   `retry_after`, `reset` (abort the TCP connection), `raw` + `content_type` (a verbatim body),
   `body_bytes` (+ `chunked`), `trickle_ms` (a slowly sent body), `set_cookie`;
4. `fail_rate`: a random share of 503s.

An override may also ride in the path, after a percent-encoded `?`
(`/customers/c-9%3Fstatus%3D404`): that is what a GATEWAY sends when run input holding
`c-9?status=404` fills a path segment (values in a URL's path are encoded), so an example's run
can be made to fail from its input alone. Query parameters win over these; headers lose to both.

Control endpoints (not counted): `GET /_stats[?recent=N]`, `POST /_config` (camelCase fields
of `DownstreamConfig`, applied live), `POST /_reset` (clears statistics and scripts; the
configuration stays), `POST /_script`. Rules and bounds live in demo/downstream_state.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from demo.downstream_state import (
    MAX_ITEMS,
    MAX_RECENT,
    Directive,
    DirectiveError,
    DownstreamConfig,
    DownstreamState,
    DownstreamStats,
    RequestRecord,
    directive_from_request,
)

_STATE_KEY = web.AppKey("downstream_state", DownstreamState)
_CHUNK = 64 * 1024
_TRICKLE_CHUNKS = 10
_SHUTDOWN_GRACE_S = 1.0


def _json_response(data: Any, status: int = 200, **kwargs: Any) -> web.Response:
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        **kwargs,
    )


class ConnectionAborted(Exception):
    """The handler aborted the connection on purpose (a `reset` directive)."""


def _abort(request: web.Request) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0), as a crashed peer would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _read_body(request: web.Request) -> Any:
    if not request.body_exists:
        return None
    text = await request.text()
    if request.content_type == "application/json":
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return text


def _query(request: web.Request) -> dict[str, str | list[str]]:
    """Query parameters; a repeated name maps to the list of its values."""
    query: dict[str, str | list[str]] = {}
    for name in request.query:
        values = request.query.getall(name)
        query[name] = values[0] if len(values) == 1 else values
    return query


async def _echo(request: web.Request) -> dict[str, Any]:
    return {
        "method": request.method,
        "path": request.path,
        "query": _query(request),
        "headers": {k.lower(): v for k, v in request.headers.items()},
        "body": await _read_body(request),
    }


async def _default_answer(request: web.Request) -> web.StreamResponse:
    if request.method == "GET" and request.path == "/items":
        try:
            count = min(max(int(request.query.get("count", "10")), 0), MAX_ITEMS)
        except ValueError:
            return _json_response({"error": "count must be an integer"}, status=400)
        items = [{"id": i, "name": f"item-{i}"} for i in range(count)]
        return _json_response({"items": items})
    return _json_response(await _echo(request))


async def _generated_body(request: web.Request, directive: Directive) -> web.StreamResponse:
    """A body of `body_bytes` bytes (or a trickled one), written in chunks."""
    response = web.StreamResponse(status=directive.status)
    response.content_type = directive.content_type or "application/octet-stream"
    size = directive.body_bytes or 0
    if directive.trickle_ms is not None:
        size = max(size, _TRICKLE_CHUNKS)
    if not directive.chunked:
        response.content_length = size
    await response.prepare(request)
    chunk_size = -(-size // _TRICKLE_CHUNKS) if directive.trickle_ms is not None else _CHUNK
    sent = 0
    while sent < size:  # bounded: `size` is capped at MAX_BODY_BYTES
        part = min(chunk_size, size - sent)
        await response.write(b"x" * part)
        sent += part
        if directive.trickle_ms is not None and sent < size:
            await asyncio.sleep(directive.trickle_ms / 1000)
    await response.write_eof()
    return response


async def _directed_answer(request: web.Request, directive: Directive) -> web.StreamResponse:
    if directive.reset:
        _abort(request)
        raise ConnectionAborted
    if directive.body_bytes is not None or directive.trickle_ms is not None:
        response = await _generated_body(request, directive)
    elif directive.raw is not None:
        response = web.Response(
            text=directive.raw,
            status=directive.status,
            content_type=directive.content_type or "text/plain",
        )
    elif directive.body is not None:
        response = _json_response(directive.body, status=directive.status)
    elif directive.status < 400:
        response = _json_response(await _echo(request), status=directive.status)
    else:
        response = _json_response(
            {"error": f"demo answer {directive.status}"}, status=directive.status
        )
    return response


def _decorate(response: web.StreamResponse, directive: Directive) -> None:
    """Extra headers; only for responses not yet sent (generated bodies set theirs earlier)."""
    if response.prepared:
        return
    if directive.retry_after is not None:
        response.headers["Retry-After"] = directive.retry_after
    if directive.set_cookie is not None:
        response.set_cookie("demo", directive.set_cookie)
    for name, value in directive.headers.items():
        response.headers[name] = value


def _overrides_in(request: web.Request) -> Mapping[str, str]:
    """The request's query, with the overrides written in its path after a percent-encoded `?`
    beneath it (see the module docstring)."""
    _, marked, tail = request.path.partition("?")  # `request.path` is decoded: `%3F` is `?`
    if not marked:
        return request.query
    return {**dict(parse_qsl(tail)), **request.query}


async def _serve(request: web.Request, state: DownstreamState) -> web.StreamResponse:
    """Answer an admitted request; `state.stats.in_flight` already counts it."""
    try:
        override = directive_from_request(_overrides_in(request), request.headers)
        directive = state.choose(request.path, override)
    except DirectiveError as exc:
        return _json_response({"error": str(exc)}, status=400)
    latency_ms = state.config.latency_ms
    if directive is not None and directive.sleep_ms is not None:
        latency_ms = directive.sleep_ms
    if latency_ms > 0:
        await asyncio.sleep(latency_ms / 1000)
    if directive is None:
        return await _default_answer(request)
    response = await _directed_answer(request, directive)
    _decorate(response, directive)
    return response


async def _handle(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE_KEY]
    stats = state.stats
    arrived, started = time.time(), time.perf_counter()
    stats.arrive()
    if state.over_capacity():
        stats.record(_record(request, arrived, started, "429"))
        return _json_response(
            {"error": "over capacity"},
            status=429,
            headers={"Retry-After": _format_seconds(state.config.retry_after_s)},
        )
    stats.enter()
    outcome = "client_closed"  # kept if the client leaves and aiohttp cancels this handler
    try:
        response = await _serve(request, state)
        outcome = str(response.status)
        return response
    except ConnectionAborted:
        outcome = "reset"
    finally:
        stats.leave()
        stats.record(_record(request, arrived, started, outcome))
    # Only an aborted connection gets here, already counted. The abort makes aiohttp cancel
    # this handler (handler_cancellation); waiting for that ends the request quietly rather
    # than through aiohttp's logged 500 path.
    await asyncio.sleep(_SHUTDOWN_GRACE_S)
    raise ConnectionAborted


def _record(request: web.Request, arrived: float, started: float, outcome: str) -> RequestRecord:
    return RequestRecord(
        t=arrived,
        method=request.method,
        path=request.path,
        outcome=outcome,
        duration_ms=(time.perf_counter() - started) * 1000,
        idempotency_key=request.headers.get("Idempotency-Key"),
    )


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


async def _stats(request: web.Request) -> web.Response:
    try:
        limit = int(request.query.get("recent", str(MAX_RECENT)))
    except ValueError:
        return _json_response({"error": "recent must be an integer"}, status=400)
    return _json_response(request.app[_STATE_KEY].stats.as_dict(limit))


async def _config(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    try:
        changes = await request.json()
        if not isinstance(changes, dict):
            raise DirectiveError("the config body is a JSON object")
        state.config.update(changes)
    except (DirectiveError, ValueError) as exc:
        return _json_response({"error": str(exc)}, status=400)
    return _json_response(state.config.as_dict())


async def _reset(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    state.stats.reset()
    state.scripts.clear()
    return _json_response({"ok": True})


async def _script(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    try:
        payload = await request.json()
        path, entries = "*", payload
        if isinstance(payload, dict):
            path, entries = str(payload.get("path", "*")), payload.get("responses")
        if not isinstance(entries, list):
            raise DirectiveError("POST /_script takes a list or {path, responses: [...]}")
        queued = state.scripts.enqueue(entries, path)
    except (DirectiveError, ValueError) as exc:
        return _json_response({"error": str(exc)}, status=400)
    return _json_response({"path": path, "queued": queued})


def build_app(state: DownstreamState) -> web.Application:
    """The aiohttp application; control routes first, everything else goes to `_handle`."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_STATE_KEY] = state
    app.router.add_get("/_stats", _stats)
    app.router.add_post("/_config", _config)
    app.router.add_post("/_reset", _reset)
    app.router.add_post("/_script", _script)
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


@dataclass
class RunningDownstream:
    """A demo downstream serving on `url` until `stop()`."""

    url: str
    port: int
    state: DownstreamState
    _runner: web.AppRunner

    @property
    def stats(self) -> DownstreamStats:
        return self.state.stats

    @property
    def config(self) -> DownstreamConfig:
        """Live configuration: changes apply to the next request."""
        return self.state.config

    def script(self, entries: list[Any], path: str = "*") -> int:
        """Queue scripted answers (in-process twin of `POST /_script`)."""
        return self.state.scripts.enqueue(entries, path)

    async def stop(self) -> None:
        """Stop listening, give in-flight requests up to 1 s, then cancel them."""
        await self._runner.cleanup()


async def start_downstream(
    host: str = "127.0.0.1", port: int = 0, config: DownstreamConfig | None = None
) -> RunningDownstream:
    """Start serving on `host:port` (0: a free port) and return once it accepts requests."""
    config = config or DownstreamConfig()
    state = DownstreamState(config=config)
    if config.seed is not None:
        state.rng.seed(config.seed)
    # handler_cancellation: a request whose client went away (e.g. a timed-out caller) stops
    # sleeping at once, so `in_flight` and capacity reflect live connections only.
    runner = web.AppRunner(
        build_app(state),
        access_log=None,
        handler_cancellation=True,
        shutdown_timeout=_SHUTDOWN_GRACE_S,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    bound_port = int(runner.addresses[0][1])
    return RunningDownstream(f"http://{host}:{bound_port}", bound_port, state, runner)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo.downstream", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--capacity", type=int, default=None, help="default: unlimited")
    parser.add_argument("--retry-after", type=float, default=1.0, help="seconds, for 429s")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share of 503s, 0..1")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


async def _run_until_signal(args: argparse.Namespace) -> None:
    config = DownstreamConfig(
        latency_ms=args.latency_ms,
        capacity=args.capacity,
        retry_after_s=args.retry_after,
        fail_rate=args.fail_rate,
        seed=args.seed,
    )
    running = await start_downstream(args.host, args.port, config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # The first line is machine-readable on purpose: scripts start us with --port 0 and read it.
    print(f"demo downstream listening on {running.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await running.stop()


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(_run_until_signal(_parse_args(argv)))


if __name__ == "__main__":
    main()
