"""The shared HTTP client (aiohttp) against a real server: timeouts fire, errors are
classified honestly, nothing is resent, stored or followed behind the gateway's back, and the
connection limit holds."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import http_exceptions

from demo.downstream import RunningDownstream
from tests.integration.test_gateway import wait_until
from vertices.http_client import (
    USER_AGENT,
    HttpClient,
    TransportErrorKind,
    build_http_client,
    classify_transport_error,
    close_http_client,
    transport_error_message,
)


async def call(
    http: HttpClient, url: str, *, method: str = "GET", timeout_s: float = 10, **kw: Any
) -> tuple[int, dict[str, str], bytes]:
    async with http.request(method, url, timeout_s=timeout_s, **kw) as response:
        return response.status, dict(response.headers), await response.read()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = build_http_client(max_connections=8)
    yield http
    await close_http_client(http)


async def test_a_request_and_its_answer(downstream: RunningDownstream, client: HttpClient) -> None:
    status, _, body = await call(
        client,
        f"{downstream.url}/x?a=1",
        method="POST",
        params=[("b", "2"), ("b", "3")],
        headers={"Content-Type": "application/json"},
        content=b'{"k": [1, 2]}',
    )
    echo = json.loads(body)
    assert status == 200
    assert echo["body"] == {"k": [1, 2]}
    assert echo["query"] == {"a": "1", "b": ["2", "3"]}
    assert echo["headers"]["user-agent"] == USER_AGENT


async def test_a_read_timeout_fires(downstream: RunningDownstream, client: HttpClient) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        await call(client, downstream.url, params=[("sleep_ms", "60000")], timeout_s=0.3)
    # Room for a stalled host past the 0.3 s timeout, still far from the answer's 60 s.
    assert 0.25 <= time.monotonic() - started < 20.0
    assert classify_transport_error(caught.value) is TransportErrorKind.TIMEOUT


async def test_waiting_for_a_pooled_connection_times_out(downstream: RunningDownstream) -> None:
    http = build_http_client(max_connections=1)
    try:
        # The hog holds the only connection (60 s, cancelled below) far longer than the bound
        # on the pool wait, which leaves a stalled host room past the 0.3 s timeout.
        hog = asyncio.create_task(call(http, downstream.url, params=[("sleep_ms", "60000")]))
        await wait_until(lambda: downstream.stats.in_flight == 1)
        started = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            await call(http, downstream.url, timeout_s=0.3)
        assert time.monotonic() - started < 20.0
        assert classify_transport_error(caught.value) is TransportErrorKind.TIMEOUT
        hog.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hog
    finally:
        await close_http_client(http)


async def test_a_reset_is_a_network_error_sent_once(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    await call(client, downstream.url)  # a kept-alive connection, which aiohttp would resend on
    with pytest.raises(aiohttp.ClientError) as caught:
        await call(client, downstream.url, params=[("reset", "1")])
    assert classify_transport_error(caught.value) is TransportErrorKind.NETWORK
    assert downstream.stats.count("reset") == 1
    assert downstream.stats.total == 2


async def test_a_refused_connection_is_a_network_error(client: HttpClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(aiohttp.ClientError) as caught:
        await call(client, f"http://127.0.0.1:{port}/", timeout_s=2)
    assert classify_transport_error(caught.value) is TransportErrorKind.NETWORK
    # aiohttp's own text carries "ssl:default", which tells an operator nothing.
    message = transport_error_message(caught.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{port}: ")
    assert "ssl" not in message


async def test_a_url_the_client_refuses_is_not_quoted_in_the_error(client: HttpClient) -> None:
    """A literal URL with a backslash in its authority passes publication (read as a user
    name) but the client refuses it before connecting. aiohttp's text quoted the URL whole,
    so the step's error showed its user name, query string and fragment, which no step's
    error shows; and yarl quotes an authority it cannot normalise, password included."""
    for url, reason in [
        ("http://svc:pa55word\\@127.0.0.1:9/p?apikey=abc123#frag", "a backslash before its path"),
        ("http://svc:pa55word@ex\uff03ample.test:9/p?apikey=abc123", "its host is malformed"),
    ]:
        with pytest.raises(aiohttp.InvalidURL) as caught:
            await call(client, url, timeout_s=2)
        assert classify_transport_error(caught.value) is TransportErrorKind.INVALID_REQUEST
        message = transport_error_message(caught.value)
        assert message.startswith(f"not a valid URL: {reason}"), message
        for part in ("svc", "pa55word", "apikey", "abc123", "frag"):
            assert part not in message, message


async def test_cookies_are_never_carried_between_calls(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    _, headers, _ = await call(client, downstream.url, params=[("set_cookie", "tenant-a-session")])
    assert "tenant-a-session" in headers["Set-Cookie"]
    _, _, body = await call(client, downstream.url)
    assert "cookie" not in json.loads(body)["headers"]


async def test_redirects_are_not_followed(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([{"status": 307, "headers": {"Location": "/other"}}])
    status, _, _ = await call(client, downstream.url)
    assert status == 307
    assert downstream.stats.total == 1


async def test_an_undecodable_content_encoding_is_an_invalid_response(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script(
        [
            {"status": 200, "headers": {"Content-Encoding": "gzip"}, "raw": "not gzip at all"},
        ]
    )
    with pytest.raises(aiohttp.ClientError) as caught:
        await call(client, downstream.url)
    assert classify_transport_error(caught.value) is TransportErrorKind.INVALID_RESPONSE


async def test_the_connection_limit_bounds_concurrency(downstream: RunningDownstream) -> None:
    http = build_http_client(max_connections=4)
    try:
        calls = [call(http, downstream.url, params=[("sleep_ms", "20")]) for _ in range(40)]
        answers = await asyncio.gather(*calls)
    finally:
        await close_http_client(http)
    assert {status for status, _, _ in answers} == {200}
    assert downstream.stats.max_concurrent == 4


def test_the_client_is_built_outside_an_event_loop() -> None:
    # Workers build it in their factory; the aiohttp session only appears on first use.
    http = build_http_client()
    asyncio.run(close_http_client(http))
    asyncio.run(close_http_client(http))  # closing twice is harmless
    assert http.is_closed


async def test_a_closed_client_refuses_requests(downstream: RunningDownstream) -> None:
    http = build_http_client()
    await close_http_client(http)
    with pytest.raises(RuntimeError, match="closed"):
        await call(http, downstream.url)


def test_max_connections_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        build_http_client(max_connections=0)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TimeoutError(), TransportErrorKind.TIMEOUT),
        (aiohttp.ServerTimeoutError("slow"), TransportErrorKind.TIMEOUT),
        (aiohttp.ServerDisconnectedError(), TransportErrorKind.NETWORK),
        (aiohttp.ClientPayloadError("closed early"), TransportErrorKind.NETWORK),
        (aiohttp.InvalidURL("ftp:"), TransportErrorKind.INVALID_REQUEST),
        (http_exceptions.ContentEncodingError("gzip"), TransportErrorKind.INVALID_RESPONSE),
        (ConnectionResetError(), TransportErrorKind.NETWORK),
        (ValueError("a bug"), None),
    ],
)
def test_classification(error: Exception, kind: TransportErrorKind | None) -> None:
    assert classify_transport_error(error) is kind


def test_a_decoding_error_is_classified_through_its_cause() -> None:
    payload = aiohttp.ClientPayloadError("Can not decode content-encoding: gzip")
    payload.__cause__ = http_exceptions.ContentEncodingError("gzip")
    assert classify_transport_error(payload) is TransportErrorKind.INVALID_RESPONSE
