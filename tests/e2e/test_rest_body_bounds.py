"""The body's route bound (`api.rest.body_limits`, `api.rest.body_depth`) and its time bounds
(`api.rest.bounded_head`) where they meet a client over real HTTP on loopback: raw sockets, so
the tests control exactly what the server has received when it answers. From a review of
both: a request answered 408 was run anyway, a pipelined request was timed out for the time
the server held it back, and a `Content-Type` FastAPI reads as JSON skipped the bound."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi import APIRouter

from api.rest import borrowed_runtime, bounded_head, create_app
from api.rest.app import DEFAULT_ROUTERS
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from tests.e2e.rest_harness import serving

ANSWER_TIMEOUT_S = 10.0
SLOW_S = 1.5

slow_router = APIRouter()


@slow_router.get("/test-slow")
async def slow() -> dict[str, str]:
    """A request slower than the body's whole bound in these tests, to pipeline behind."""
    await asyncio.sleep(SLOW_S)
    return {"slow": "done"}


@dataclass
class Served:
    address: tuple[str, int]
    ops: Operations


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    runtime = await Runtime.open(settings)
    routers = (*DEFAULT_ROUTERS, slow_router)
    app = create_app(
        settings, runtime_factory=borrowed_runtime(runtime), auth=False, routers=routers
    )
    try:
        async with serving(app) as url:
            split = urlsplit(url)
            assert split.hostname is not None and split.port is not None
            yield Served((split.hostname, split.port), Operations(runtime))
    finally:
        await runtime.close()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, object]]:
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return int(head.split(b" ")[1]), json.loads(await reader.readexactly(length))


def post(
    path: str, body: bytes, *, content_type: bytes = b"application/json", length: int = -1
) -> bytes:
    """A POST of `body`, announcing `length` bytes (default: the body's own)."""
    size = len(body) if length < 0 else length
    return (
        b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (path.encode(), content_type, size)
    ) + body


async def answer_to(address: tuple[str, int], request: bytes) -> tuple[int, dict[str, object]]:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(request)
        await writer.drain()
        return await read_answer(reader)
    finally:
        writer.close()


async def key_names(ops: Operations) -> list[str | None]:
    return [key.name for key in (await ops.keys.list()).items]


async def test_a_request_answered_408_is_not_run(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body whole but for the few bytes its Content-Length still owed (trailing whitespace,
    say) is refused 408 when they never come; the route must not then run it as if whole: a
    client retrying the 408 would make a second key."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    body = json.dumps({"admin": True, "name": "timed-out"}).encode()
    status, answer = await answer_to(served.address, post("/keys", body, length=len(body) + 2))
    assert (status, answer["code"]) == (408, "request_timeout")
    await asyncio.sleep(0.5)  # the app's request task, had it gone on, has made the key
    assert await key_names(served.ops) == []


def object_flood(size: int) -> bytes:
    """A run's submission whose input is `size` bytes of small objects: what held the event
    loop ~2 s to parse at 10 MiB."""
    items = json.dumps([{"a": 1}] * (size // 7 + 1), separators=(",", ":"))
    return json.dumps({"input": {"items": "X"}}).replace('"X"', items).encode()


@pytest.mark.parametrize(
    "content_type",
    [
        b"application/json",
        b"application/json\xa0",
        b"\xa0application/json",
        b"application/json\x85",
    ],
)
async def test_the_route_bound_holds_for_every_type_fastapi_reads_as_json(
    served: Served, content_type: bytes
) -> None:
    """FastAPI strips the type as text (latin-1, where `\\xa0` and `\\x85` are whitespace):
    each of these bodies is parsed as JSON by the route, so each is held to its bound."""
    request = post("/workflows/w/runs", object_flood(2 << 20), content_type=content_type)
    status, answer = await answer_to(served.address, request)
    assert (status, answer["code"]) == (413, "body_too_large"), answer


async def test_a_request_pipelined_behind_a_slow_one_is_not_timed_while_it_waits(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn reads nothing of a pipelined request's body until the request before it is
    answered: that wait is the server's. The whole body's bound counted it, and its 408 was
    written as the answer to the slow request before it."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    monkeypatch.setattr(bounded_head, "BODY_TIMEOUT_S", 1.0)
    body = json.dumps({"admin": True, "name": "queued"}).encode()
    reader, writer = await asyncio.open_connection(*served.address)
    try:
        slow_then_key = b"GET /test-slow HTTP/1.1\r\nHost: t\r\n\r\n" + post(
            "/keys", b"", length=len(body)
        )
        writer.write(slow_then_key)
        await writer.drain()
        await asyncio.sleep(0.2)  # the body after its head, as a client writing it does
        writer.write(body)
        await writer.drain()
        first = await read_answer(reader)
        second = await read_answer(reader)
    finally:
        writer.close()
    assert first == (200, {"slow": "done"})
    assert second[0] == 201, second
    assert await key_names(served.ops) == ["queued"]


async def test_an_input_within_its_limit_is_read_however_its_client_escapes_it(
    served: Served,
) -> None:
    """Go writes `<`, `>` and `&` as `\\u003c`…, .NET those and every non-ASCII character:
    six bytes for one of the input's compact size, twice the route's `SPREAD` of 3. Within
    `MAX_INPUT_BYTES`, such an input was refused 413 before it was read; a 404 (no such
    workflow) proves it was read. Escapes do not pass more objects than the bound: a flood
    of them beside a string of escapes is still refused."""
    limit = Settings().max_input_bytes
    text = "<p>" * ((limit - 100) // 3)
    assert len(json.dumps({"t": text}, ensure_ascii=False, separators=(",", ":"))) <= limit
    as_go_writes = json.dumps({"input": {"t": text}}).replace("<", "\\u003c")
    as_go_writes = as_go_writes.replace(">", "\\u003e").encode()
    status, answer = await answer_to(served.address, post("/workflows/w/runs", as_go_writes))
    assert (status, answer["code"]) == (404, "workflow_not_found"), answer
    padded = object_flood(3 * limit + 100_000).replace(
        b'{"input": {', b'{"input": {"t": "' + b"\\u0041" * 100_000 + b'", '
    )
    status, answer = await answer_to(served.address, post("/workflows/w/runs", padded))
    assert (status, answer["code"]) == (413, "body_too_large"), answer


async def test_a_path_with_a_trailing_slash_has_the_bound_of_the_route_it_redirects_to(
    served: Served,
) -> None:
    """Starlette answers `/workflows/validate/` with a 307 to `/workflows/validate`, which a
    client follows with its body: a list of documents over another route's 832 KiB was
    refused 413 (naming "what this route's fields can hold") instead of redirected."""
    documents = json.dumps([{"name": "x", "pad": "p" * (1 << 20)}]).encode()
    reader, writer = await asyncio.open_connection(*served.address)
    try:
        writer.write(post("/workflows/validate/", documents))
        await writer.drain()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 307 "), head
    assert b"/workflows/validate\r\n" in head


async def test_a_body_after_100_continue_in_chunks_on_a_reused_connection_is_served(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client waits for the 100 Continue it asked for, then sends a chunked body in
    pieces each within the idle bound; the next request on the connection, after a pause
    longer than both bounds, is not timed by the one before (its timer was cancelled)."""
    monkeypatch.setattr(bounded_head, "BODY_IDLE_S", 0.5)
    monkeypatch.setattr(bounded_head, "BODY_TIMEOUT_S", 1.0)
    reader, writer = await asyncio.open_connection(*served.address)
    try:
        for name in ("first", "second"):
            body = json.dumps({"admin": True, "name": name}).encode()
            writer.write(
                b"POST /keys HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            for start in range(0, len(body), 20):
                piece = body[start : start + 20]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(0.3)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            status, answer = await read_answer(reader)
            assert status == 201, answer
            await asyncio.sleep(1.2)  # past both bounds: nothing is being awaited now
    finally:
        writer.close()
    assert sorted(n or "" for n in await key_names(served.ops)) == ["first", "second"]


async def test_a_head_pipelined_behind_a_slow_request_is_not_timed_while_it_waits(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third request's head begun in the read that held the second (queued behind the slow
    first, so uvicorn reads no more): the rest of the head is the server's to read."""
    monkeypatch.setattr(bounded_head, "HEAD_TIMEOUT_S", 0.5)
    reader, writer = await asyncio.open_connection(*served.address)
    try:
        writer.write(
            b"GET /test-slow HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHo"
        )
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"st: t\r\n\r\n")
        await writer.drain()
        answers = [await read_answer(reader) for _ in range(3)]
    finally:
        writer.close()
    assert answers[0] == (200, {"slow": "done"})
    assert [status for status, _ in answers] == [200, 200, 200], answers
