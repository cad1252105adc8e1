"""The latency `RequestObserver` reports to the HTTP histogram (`api.rest.middleware`): an
answer's whole time, but an event stream's time to its first byte, since a stream lasts as
long as its client watches (docs/architecture.md, 'The REST API')."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.rest.middleware import RequestObserver

WATCHED_S = 0.3
"""How long the fake routes below take after their answer started."""


def _app(content_type: bytes) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", content_type)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await asyncio.sleep(WATCHED_S)
        await send({"type": "http.response.body", "body": b""})

    return app


async def _observed(content_type: bytes) -> float:
    seen: list[float] = []
    observer = RequestObserver(_app(content_type), lambda m, r, s, seconds: seen.append(seconds))
    scope: Scope = {"type": "http", "method": "GET", "path": "/runs/r/events", "headers": []}

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    await observer(scope, receive, send)
    assert len(seen) == 1
    return seen[0]


async def test_an_event_stream_is_timed_to_its_first_byte() -> None:
    assert await _observed(b"text/event-stream; charset=utf-8") < WATCHED_S / 2


async def test_any_other_answer_is_timed_to_its_end() -> None:
    # asyncio may wake a sleeper up to its clock resolution early: not quite WATCHED_S.
    assert await _observed(b"application/json") >= WATCHED_S * 0.9
