"""A request's head (request line and headers) is bounded before the app sees it, over real
HTTP on loopback (`api.rest.bounded_head`): too long is a 431 and too slow a 408, each a JSON
error body, the connection closed; a head within both bounds is served, on a connection kept
alive for the next request as before. From a security review: a 100 MB header was read whole
and answered 200, and a head sent a line every 10 s kept its connection for minutes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from api.rest import borrowed_runtime, bounded_head, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import serving
from tests.integration.engine_harness import settings_for

ANSWER_TIMEOUT_S = 20.0


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[tuple[tuple[str, int], str]]:
    """The server's address and an admin key (a body is read past the key's check only)."""
    settings = settings_for(backend)
    runtime = await Runtime.open(settings)
    try:
        key = (await Operations(runtime).keys.create(admin=True)).key
        app = create_app(settings, runtime_factory=borrowed_runtime(runtime))
        async with serving(app) as url:
            split = urlsplit(url)
            assert split.hostname is not None and split.port is not None
            yield (split.hostname, split.port), key
    finally:
        await runtime.close()


@pytest.fixture
def address(served: tuple[tuple[str, int], str]) -> tuple[str, int]:
    return served[0]


def validate_head(key: str, length: int) -> bytes:
    return (
        b"POST /workflows/validate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (key.encode(), length)
    )


async def answer_to(address: tuple[str, int], *parts: bytes, pause_s: float = 0.0) -> bytes:
    """What the server sends back for `parts`, written `pause_s` apart, until it closes (or
    until the one answer a kept-alive connection sends is whole)."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(pause_s)
        return await read_answer(reader)
    finally:
        writer.close()


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
        )
        return head + await reader.readexactly(length)


async def trickled_answer(address: tuple[str, int], head: bytes, every_s: float) -> bytes:
    """What the server answers `head` and then one byte of body every `every_s`, sent
    until it answers (at most 200 bytes), read as it comes."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(head)
        answer = asyncio.create_task(read_answer(reader))
        for _ in range(200):
            await asyncio.wait({answer}, timeout=every_s)
            if answer.done():
                break
            try:
                writer.write(b" ")
                await writer.drain()
            except ConnectionError:  # closed after its answer, which the reader has
                break
        return await answer
    finally:
        writer.close()


def status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, body = answer.split(b"\r\n\r\n", 1)
    return int(head.split(b" ")[1]), json.loads(body)


async def test_a_head_longer_than_the_bound_is_refused_431(address: tuple[str, int]) -> None:
    big = b"x" * (bounded_head.MAX_HEAD_BYTES + 1024)
    request = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + big + b"\r\n\r\n"
    status, body = status_and_body(await answer_to(address, request))
    assert status == 431
    assert body == {
        "code": "headers_too_large",
        "message": "the request's headers are longer than 64 KiB",
        "details": {},
    }


async def test_a_head_too_slow_is_refused_408(
    address: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bounded_head, "HEAD_TIMEOUT_S", 0.5)
    # A line at a time, then nothing more: the head is never finished.
    lines = [b"GET /health HTTP/1.1\r\n", b"Host: t\r\n", b"X-One: 1\r\n"]
    status, body = status_and_body(await answer_to(address, *lines, pause_s=0.1))
    assert status == 408
    assert body["code"] == "request_timeout"
    assert body["message"] == "the request's headers did not arrive within 0.5 s"


async def test_heads_within_the_bounds_are_served_one_after_another(
    address: tuple[str, int],
) -> None:
    header = b"X-Token: " + b"t" * (bounded_head.MAX_HEAD_BYTES // 2) + b"\r\n"
    request = b"GET /health HTTP/1.1\r\nHost: t\r\n" + header + b"\r\n"
    reader, writer = await asyncio.open_connection(*address)
    try:
        for _ in range(3):  # each counted on its own, on one kept-alive connection
            writer.write(request)
            await writer.drain()
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = json.loads(await reader.readexactly(length))
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert body["status"] == "ok"
    finally:
        writer.close()


async def test_a_body_that_stops_arriving_is_refused_408(
    served: tuple[tuple[str, int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a security review: a head, then a tenth of the body it announced and nothing
    more, held the connection and the app's request task for good."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    address, key = served
    status, body = status_and_body(await answer_to(address, validate_head(key, 100), b'{"n": '))
    assert status == 408
    assert body == {
        "code": "request_timeout",
        "message": "the request's body stopped arriving: no byte for 0.5 s",
        "details": {},
    }


async def test_a_body_trickled_past_the_whole_bound_is_refused_408(
    served: tuple[tuple[str, int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte every 0.1 s is never idle for long: the whole body's bound stops it."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    monkeypatch.setattr(bounded_head, "BODY_TIMEOUT_S", 1.0)
    address, key = served
    status, body = status_and_body(await trickled_answer(address, validate_head(key, 1000), 0.1))
    assert status == 408
    assert body["message"] == "the request's body did not arrive within 1 s"


async def test_a_body_sent_in_pieces_within_the_bounds_is_served(
    served: tuple[tuple[str, int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces each within the idle bound are served; and between two requests on one
    kept-alive connection no body is awaited, however long the client pauses."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    address, key = served
    document = json.dumps({"name": "slow", "vertices": {}}).encode()
    pieces = [validate_head(key, len(document)), document[:10], document[10:20], document[20:]]
    status, body = status_and_body(await answer_to(address, *pieces, pause_s=0.3))
    assert (status, body["valid"]) == (200, False), body
    reader, writer = await asyncio.open_connection(*address)
    try:
        for _ in range(2):
            writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            await writer.drain()
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                answer = await reader.readuntil(b"\r\n\r\n")
                length = int(answer.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            await asyncio.sleep(0.8)
    finally:
        writer.close()


async def test_a_request_that_is_not_http_is_a_json_400(address: tuple[str, int]) -> None:
    """uvicorn's own answer was `text/plain` "Invalid HTTP request received."."""
    answer = await answer_to(address, b"HELLO THERE\r\n\r\n")
    assert b"content-type: application/json" in answer.split(b"\r\n\r\n")[0]
    status, body = status_and_body(answer)
    assert status == 400
    assert body == {
        "code": "invalid_http",
        "message": "the request is not valid HTTP/1.1: check its request line and headers",
        "details": {},
    }
