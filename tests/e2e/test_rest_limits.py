"""The request body limit over real HTTP: a declared Content-Length over the limit is refused
before any of the body is sent, a chunked body as soon as it passes the limit (the client is
still holding the rest), and bodies within the limit pass. The raw-socket tests write HTTP/1.1
by hand so they control exactly what the server has received when it answers."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from tests.e2e.rest_harness import access_lines, client, serving

LIMIT = 4_096
ANSWER_TIMEOUT_S = 10.0


@dataclass
class Served:
    url: str
    ops: Operations


async def _serve(tmp_path: Path, max_body_bytes: int | None) -> AsyncIterator[Served]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    if max_body_bytes is not None:
        settings = settings.model_copy(update={"max_body_bytes": max_body_bytes})
    runtime = await Runtime.open(settings)
    app = create_app(settings, runtime_factory=borrowed_runtime(runtime), auth=False)
    try:
        async with serving(app) as url:
            yield Served(url, Operations(runtime))
    finally:
        await runtime.close()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async for running in _serve(tmp_path, LIMIT):
        yield running


async def _connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        if line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(
        reader.readexactly(int(headers["content-length"])), ANSWER_TIMEOUT_S
    )
    return int(status_line.split()[1]), headers, body


def _request_head(url: str, extra: str) -> bytes:
    host = urlsplit(url).netloc
    return (
        f"POST /keys HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


async def test_declared_length_over_the_limit_is_refused_before_the_body(served: Served) -> None:
    reader, writer = await _connect(served.url)
    try:
        # Only the head is sent: the answer must come without the server waiting for a body.
        writer.write(_request_head(served.url, f"Content-Length: {LIMIT + 1}\r\n"))
        await writer.drain()
        status, headers, body = await _read_answer(reader)
    finally:
        writer.close()
    assert status == 413
    assert headers["connection"] == "close"
    assert json.loads(body)["code"] == "body_too_large"
    # The limit, which setting holds it and what to do, not only that it was passed.
    assert json.loads(body)["message"] == (
        f"the request body is larger than the limit of {LIMIT:,} bytes "
        "(SCHEMABRIDGE_MAX_BODY_BYTES on the server): send a smaller one, passing large "
        "data by reference (a URL the workflow fetches)"
    )
    assert (await served.ops.keys.list()).items == [], "the route never ran"


async def test_chunked_body_is_refused_as_soon_as_it_passes_the_limit(served: Served) -> None:
    reader, writer = await _connect(served.url)
    chunk = b"x" * 1_000
    try:
        writer.write(_request_head(served.url, "Transfer-Encoding: chunked\r\n"))
        for _ in range(LIMIT // len(chunk) + 1):  # just past the limit, and no final chunk
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        await writer.drain()
        # The client still holds the rest of its body (the terminating chunk was never
        # sent): the answer proves the server stopped reading at the limit.
        status, _, body = await _read_answer(reader)
    finally:
        writer.close()
    assert status == 413
    assert json.loads(body)["code"] == "body_too_large"
    assert (await served.ops.keys.list()).items == []


async def test_chunked_body_within_the_limit_is_read(served: Served) -> None:
    document = json.dumps({"admin": True, "name": "n" * 100}).encode()
    reader, writer = await _connect(served.url)
    try:
        writer.write(_request_head(served.url, "Transfer-Encoding: chunked\r\n"))
        for start in range(0, len(document), 16):
            part = document[start : start + 16]
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        status, _, body = await _read_answer(reader)
    finally:
        writer.close()
    assert status == 201, body
    assert json.loads(body)["role"] == "admin"


async def test_bodies_up_to_the_limit_pass_and_over_it_do_not(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    def padded(size: int) -> bytes:
        base = json.dumps({"admin": True, "name": ""}).encode()
        return base.replace(b'"name": ""', b'"name": "' + b"n" * (size - len(base)) + b'"')

    async def chunks(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 512):
            yield data[start : start + 512]

    headers = {"content-type": "application/json"}
    with caplog.at_level(logging.INFO, logger="api.rest.access"):
        async with client(served.url) as http:
            # A name over 200 characters is refused by the operation (422), which proves the
            # body was read; 413 means it was not.
            at_limit = await http.post("/keys", content=padded(LIMIT), headers=headers)
            over = await http.post("/keys", content=padded(LIMIT + 1), headers=headers)
            streamed = await http.post("/keys", content=chunks(padded(LIMIT + 1)), headers=headers)
    assert at_limit.status_code == 422 and at_limit.json()["code"] == "invalid_key"
    for refused in (over, streamed):
        assert refused.status_code == 413
        assert refused.json()["code"] == "body_too_large"
    assert [line["status"] for line in access_lines(caplog.records)] == [422, 413, 413]


async def test_default_limit_is_ten_mebibytes(tmp_path: Path) -> None:
    assert Settings().max_body_bytes == 10 * 1024 * 1024
    async for running in _serve(tmp_path, None):
        reader, writer = await _connect(running.url)
        try:
            writer.write(_request_head(running.url, f"Content-Length: {10 * 1024 * 1024 + 1}\r\n"))
            await writer.drain()
            status, _, body = await _read_answer(reader)
        finally:
            writer.close()
        assert status == 413 and json.loads(body)["code"] == "body_too_large"
        async with client(running.url) as http:
            small = await http.post("/keys", json={"admin": True})
        assert small.status_code == 201


async def test_every_route_that_takes_a_body_answers_413_and_documents_it(served: Served) -> None:
    """Walks /openapi.json: each operation with a `requestBody` refuses a body over the limit
    with 413 `body_too_large`, the status its `responses` declare (a client generated from the
    document must know the answer it gets)."""
    over = json.dumps({"pad": "x" * LIMIT}).encode()
    headers = {"content-type": "application/json"}
    refused: list[str] = []
    async with client(served.url) as http:
        document = (await http.get("/openapi.json")).json()
        for path, path_item in document["paths"].items():
            for method, operation in path_item.items():
                if "requestBody" not in operation:
                    continue
                url = re.sub(r"\{[^}]+\}", "x", path)
                answer = await http.request(method.upper(), url, content=over, headers=headers)
                label = f"{method.upper()} {path}"
                assert answer.status_code == 413, (label, answer.text)
                assert answer.json()["code"] == "body_too_large", label
                assert "413" in operation["responses"], f"{label} answers 413 undocumented"
                assert "body_too_large" in operation["responses"]["413"]["description"], label
                refused.append(label)
    assert len(refused) >= 12, refused
    assert "POST /runs/{run_id}/steps/{vertex_id}/resolve" in refused


async def test_each_route_reads_no_more_than_its_content_needs(tmp_path: Path) -> None:
    """From a security review: 10 MiB of small objects sent as a run's input held the API's
    event loop ~3 s (parse, checks, validation) before the input was refused as too large.
    Under the global 10 MiB, a submission reads 3 x `MAX_INPUT_BYTES` (+64 KiB), a resolve
    3 x `MAX_RESPONSE_BYTES`, other routes 832 KiB, whitespace aside, refused before
    parsing; workflow documents keep the global limit, and an input at its limit, indented
    and with every character escaped, is still read."""
    headers = {"content-type": "application/json"}
    settings = Settings()
    submit_limit = 3 * settings.max_input_bytes + 64 * 1024
    resolve_limit = 3 * settings.max_response_bytes + 64 * 1024

    def many_objects(size: int) -> bytes:
        items = json.dumps([{"a": 1}] * (size // 7 + 1), separators=(",", ":"))
        return json.dumps({"input": {"items": "X"}}).replace('"X"', items).encode()

    def unspaced(body: bytes) -> int:
        return len(body.replace(b" ", b"").replace(b"\n", b""))

    async for running in _serve(tmp_path, None):
        async with client(running.url) as http:
            flood = many_objects(submit_limit)
            assert unspaced(flood) > submit_limit
            submitted = await http.post("/workflows/w/runs", content=flood, headers=headers)
            resolved = await http.post(
                "/runs/r/steps/v/resolve",
                content=json.dumps({"output": "x" * resolve_limit}).encode(),
                headers=headers,
            )
            keyed = await http.post(
                "/keys", content=json.dumps({"name": "x" * (1 << 20 + 1)}), headers=headers
            )
            # An input just within its limit, indented, then one of text escaped by
            # `ensure_ascii` (3 times its UTF-8): still read (404: no such workflow, which
            # only a parsed body reaches).
            rows = {"rows": [{"id": n, "tags": ["a", "b"]} for n in range(8_000)]}
            escaped = {"text": "é" * (settings.max_input_bytes // 2 - 20)}
            wide = []
            for value in (rows, escaped):
                assert len(
                    json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
                ) <= (settings.max_input_bytes)
                sent = json.dumps({"input": value}, indent=4).encode()
                assert len(sent) > 2.9 * settings.max_input_bytes
                wide.append(await http.post("/workflows/w/runs", content=sent, headers=headers))
            documents = json.dumps([{"name": "x", "pad": "p" * (3 << 20)}]).encode()
            validated = await http.post("/workflows/validate", content=documents, headers=headers)
    assert (submitted.status_code, submitted.json()["code"]) == (413, "body_too_large")
    # The figures it names add up to the bound: 3 x 262,144 + 65,536 = 851,968.
    assert submitted.json()["message"].startswith(
        f"the request body is larger than the {submit_limit:,} bytes this route reads, "
        "whitespace aside (3 times a run input's limit of 262,144 bytes as compact JSON and "
        "65,536 for its other fields, SCHEMABRIDGE_MAX_INPUT_BYTES on the server)"
    )
    assert (resolved.status_code, resolved.json()["code"]) == (413, "body_too_large")
    assert "SCHEMABRIDGE_MAX_RESPONSE_BYTES" in resolved.json()["message"]
    assert (keyed.status_code, keyed.json()["code"]) == (413, "body_too_large")
    assert "what this route's fields can hold" in keyed.json()["message"]
    for answer in wide:
        assert (answer.status_code, answer.json()["code"]) == (404, "workflow_not_found")
    assert validated.status_code == 200 and validated.json()["valid"] is False, validated.text
