"""The shared HTTP client (httpx on the aiohttp transport) against a real server: timeouts
work through the transport, errors are classified honestly, nothing is resent, stored or
followed behind the gateway's back, and the connection limit holds."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from demo.downstream import RunningDownstream
from tests.integration.test_gateway import wait_until
from vertices.http_client import (
    TransportErrorKind,
    build_http_client,
    classify_transport_error,
    close_http_client,
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    http = build_http_client(max_connections=8)
    yield http
    await close_http_client(http)


async def test_requests_go_through_aiohttp(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    response = await client.post(f"{downstream.url}/x?a=1", json={"k": [1, 2]})
    assert response.status_code == 200
    assert response.json()["body"] == {"k": [1, 2]}
    assert type(client._transport).__module__.startswith("httpx_aiohttp")


async def test_a_read_timeout_fires_through_the_transport(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException) as caught:
        await client.get(downstream.url, params={"sleep_ms": 5000}, timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 1.5
    assert classify_transport_error(caught.value) is TransportErrorKind.TIMEOUT


async def test_waiting_for_a_pooled_connection_times_out(downstream: RunningDownstream) -> None:
    http = build_http_client(max_connections=1)
    try:
        hog = asyncio.create_task(http.get(downstream.url, params={"sleep_ms": 3000}, timeout=10))
        await wait_until(lambda: downstream.stats.in_flight == 1)
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException) as caught:
            await http.get(downstream.url, timeout=0.3)
        assert time.monotonic() - started < 1.5
        assert classify_transport_error(caught.value) is TransportErrorKind.TIMEOUT
        hog.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hog
    finally:
        await close_http_client(http)


async def test_a_reset_is_a_network_error_sent_once(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    await client.get(downstream.url)  # a kept-alive connection, which aiohttp would resend on
    with pytest.raises(httpx.TransportError) as caught:
        await client.get(downstream.url, params={"reset": 1})
    # The transport reports it as httpx.ConnectTimeout; the classification is not fooled.
    assert classify_transport_error(caught.value) is TransportErrorKind.NETWORK
    assert downstream.stats.count("reset") == 1
    assert downstream.stats.total == 2


async def test_a_refused_connection_is_a_network_error(client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.TransportError) as caught:
        await client.get(f"http://127.0.0.1:{port}/", timeout=2)
    assert classify_transport_error(caught.value) is TransportErrorKind.NETWORK


async def test_cookies_are_never_carried_between_calls(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    first = await client.get(downstream.url, params={"set_cookie": "tenant-a-session"})
    assert "tenant-a-session" in first.headers["set-cookie"]
    second = await client.get(downstream.url)
    assert "cookie" not in second.json()["headers"]
    assert not client.cookies


async def test_redirects_are_not_followed(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    downstream.script([{"status": 307, "headers": {"Location": "/other"}}])
    response = await client.get(downstream.url)
    assert response.status_code == 307
    assert downstream.stats.total == 1


async def test_the_connection_limit_bounds_concurrency(downstream: RunningDownstream) -> None:
    http = build_http_client(max_connections=4)
    try:
        calls = [http.get(downstream.url, params={"sleep_ms": 20}) for _ in range(40)]
        responses = await asyncio.gather(*calls)
    finally:
        await close_http_client(http)
    assert {r.status_code for r in responses} == {200}
    assert downstream.stats.max_concurrent == 4


def test_the_client_is_built_outside_an_event_loop() -> None:
    # Workers build it in their factory; the aiohttp session only appears on first use.
    http = build_http_client()
    asyncio.run(close_http_client(http))
    asyncio.run(close_http_client(http))  # closing twice is harmless
    assert http.is_closed


def test_max_connections_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        build_http_client(max_connections=0)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TimeoutError(), TransportErrorKind.TIMEOUT),
        (httpx.ReadTimeout("slow"), TransportErrorKind.TIMEOUT),
        (httpx.ConnectError("refused"), TransportErrorKind.NETWORK),
        (httpx.RemoteProtocolError("closed"), TransportErrorKind.NETWORK),
        (httpx.UnsupportedProtocol("ftp"), TransportErrorKind.INVALID_REQUEST),
        (httpx.DecodingError("gzip"), TransportErrorKind.INVALID_RESPONSE),
        (ConnectionResetError(), TransportErrorKind.NETWORK),
        (ValueError("a bug"), None),
    ],
)
def test_classification(error: Exception, kind: TransportErrorKind | None) -> None:
    assert classify_transport_error(error) is kind
