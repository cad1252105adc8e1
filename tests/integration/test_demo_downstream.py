"""The demo downstream the project ships, exercised over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from demo.downstream import RunningDownstream, start_downstream
from demo.downstream_state import MAX_ITEMS, DownstreamConfig
from tests.integration.test_gateway import wait_until


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        yield http


async def test_any_path_and_method_echoes(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    response = await client.patch(
        f"{downstream.url}/a/b?x=1&y=2&y=3", json={"k": "v"}, headers={"X-Trace": "t1"}
    )
    assert response.status_code == 200
    echo = response.json()
    assert echo["method"] == "PATCH"
    assert echo["path"] == "/a/b"
    assert echo["query"] == {"x": "1", "y": ["2", "3"]}
    assert echo["headers"]["x-trace"] == "t1"
    assert echo["body"] == {"k": "v"}
    text = await client.post(downstream.url, content=b"plain", headers={"content-type": "text/x"})
    assert text.json()["body"] == "plain"


async def test_items(downstream: RunningDownstream, client: httpx.AsyncClient) -> None:
    three = await client.get(f"{downstream.url}/items", params={"count": 3})
    assert three.json() == {"items": [{"id": i, "name": f"item-{i}"} for i in range(3)]}
    capped = await client.get(f"{downstream.url}/items", params={"count": 10**9})
    assert len(capped.json()["items"]) == MAX_ITEMS
    bad = await client.get(f"{downstream.url}/items", params={"count": "many"})
    assert bad.status_code == 400


async def test_latency_applies_to_every_answer(client: httpx.AsyncClient) -> None:
    # A latency (5 s) far above what a request costs on a loaded host (a stalled one took
    # over a second), so the override's bound (half of it) tells a skipped latency from a
    # slow round trip.
    running = await start_downstream(config=DownstreamConfig(latency_ms=5000))
    try:
        started = time.monotonic()
        await client.get(running.url)
        assert time.monotonic() - started >= 5.0
        fast = time.monotonic()
        await client.get(running.url, params={"sleep_ms": 0})  # a per-request override
        assert time.monotonic() - fast < 2.5
    finally:
        await running.stop()


async def test_capacity_answers_429_with_retry_after(client: httpx.AsyncClient) -> None:
    # The two admitted requests must still be in flight when the last of the five arrives: a
    # latency of 2 s covers five connections opened on a loaded host.
    config = DownstreamConfig(capacity=2, latency_ms=2000, retry_after_s=1)
    running = await start_downstream(config=config)
    try:
        responses = await asyncio.gather(*(client.get(running.url) for _ in range(5)))
    finally:
        await running.stop()
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200, 429, 429, 429]
    assert {r.headers.get("retry-after") for r in responses if r.status_code == 429} == {"1"}
    assert running.stats.max_concurrent == 2
    assert running.stats.by_outcome == {"200": 2, "429": 3}


async def test_fail_rate(client: httpx.AsyncClient) -> None:
    running = await start_downstream(config=DownstreamConfig(fail_rate=0.5, seed=3))
    try:
        responses = [await client.get(running.url) for _ in range(60)]
    finally:
        await running.stop()
    failed = sum(r.status_code == 503 for r in responses)
    assert 10 < failed < 50
    assert failed + sum(r.status_code == 200 for r in responses) == 60


async def test_per_request_overrides_by_query_or_header(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    by_query = await client.get(downstream.url, params={"status": 503, "retry_after": 2})
    assert (by_query.status_code, by_query.headers["retry-after"]) == (503, "2")
    by_header = await client.get(downstream.url, headers={"X-Demo-Status": "418"})
    assert by_header.status_code == 418
    raw = await client.get(downstream.url, params={"raw": "{x", "content_type": "application/json"})
    assert (raw.text, raw.headers["content-type"]) == ("{x", "application/json; charset=utf-8")
    bad = await client.get(downstream.url, params={"status": "nope"})
    assert bad.status_code == 400


async def test_an_override_in_the_path_after_an_encoded_question_mark(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    """What a GATEWAY sends when run input holding `c-9?status=404` fills a path segment."""
    in_path = await client.get(f"{downstream.url}/customers/c-9%3Fstatus%3D404")
    assert in_path.status_code == 404
    query_wins = await client.get(
        f"{downstream.url}/customers/c-9%3Fstatus%3D404", params={"status": 503}
    )
    assert query_wins.status_code == 503
    plain = await client.get(f"{downstream.url}/customers/c-9")
    assert (plain.status_code, plain.json()["path"]) == (200, "/customers/c-9")


async def test_generated_bodies(downstream: RunningDownstream, client: httpx.AsyncClient) -> None:
    sized = await client.get(downstream.url, params={"body_bytes": 100_000})
    assert (len(sized.content), sized.headers["content-length"]) == (100_000, "100000")
    chunked = await client.get(downstream.url, params={"body_bytes": 70_000, "chunked": 1})
    assert len(chunked.content) == 70_000
    assert "content-length" not in chunked.headers
    started = time.monotonic()
    trickled = await client.get(downstream.url, params={"trickle_ms": 20})
    assert len(trickled.content) == 10
    assert time.monotonic() - started >= 0.18  # nine pauses between ten chunks


async def test_scripted_sequence(downstream: RunningDownstream, client: httpx.AsyncClient) -> None:
    queued = await client.post(f"{downstream.url}/_script", json=[503, 503, {"status": 200}])
    assert queued.json() == {"path": "*", "queued": 3}
    statuses = [(await client.get(f"{downstream.url}/any")).status_code for _ in range(4)]
    assert statuses == [503, 503, 200, 200]


async def test_scripts_per_path(downstream: RunningDownstream, client: httpx.AsyncClient) -> None:
    await client.post(f"{downstream.url}/_script", json={"path": "/only", "responses": [500]})
    assert (await client.get(f"{downstream.url}/other")).status_code == 200
    assert (await client.get(f"{downstream.url}/only")).status_code == 500
    bad = await client.post(f"{downstream.url}/_script", json=[{"status": 200, "what": 1}])
    assert bad.status_code == 400


async def test_a_scripted_reset_aborts_the_connection(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    downstream.script([{"reset": True}])
    with pytest.raises(httpx.TransportError):
        await client.get(downstream.url)
    assert downstream.stats.by_outcome == {"reset": 1}
    assert (await client.get(downstream.url)).status_code == 200  # the server lives on


async def test_stats(downstream: RunningDownstream, client: httpx.AsyncClient) -> None:
    await client.get(downstream.url, headers={"Idempotency-Key": "k1"})
    await client.get(downstream.url, params={"status": 503})
    stats = (await client.get(f"{downstream.url}/_stats")).json()
    assert stats["total"] == 2  # control endpoints are not counted
    assert stats["byStatus"] == {"200": 1, "503": 1}
    assert stats["inFlight"] == 0 and stats["maxConcurrent"] == 1
    first, second = stats["recent"]
    assert first["t"] <= second["t"]
    assert (first["idempotencyKey"], second["outcome"]) == ("k1", "503")
    limited = (await client.get(f"{downstream.url}/_stats", params={"recent": 1})).json()
    assert len(limited["recent"]) == 1


async def test_requests_count_on_arrival_and_outcomes_on_completion(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    slow = asyncio.create_task(client.get(downstream.url, params={"sleep_ms": 5000}, timeout=10))
    await wait_until(lambda: downstream.stats.in_flight == 1)
    assert downstream.stats.total == 1  # counted while still being served
    assert not downstream.stats.by_outcome
    slow.cancel()  # the client leaves: the server stops serving and records it
    with pytest.raises(asyncio.CancelledError):
        await slow
    await wait_until(lambda: downstream.stats.count("client_closed") == 1)
    assert downstream.stats.in_flight == 0
    assert downstream.stats.total == 1


async def test_config_changes_apply_live(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    changed = await client.post(
        f"{downstream.url}/_config", json={"capacity": 1, "latencyMs": 200, "retryAfterS": 3}
    )
    assert changed.json() == {"latencyMs": 200, "capacity": 1, "retryAfterS": 3, "failRate": 0}
    responses = await asyncio.gather(*(client.get(downstream.url) for _ in range(3)))
    assert sorted(r.status_code for r in responses) == [200, 429, 429]
    await client.post(f"{downstream.url}/_config", json={"capacity": None, "latencyMs": 0})
    assert downstream.config.capacity is None
    for bad in ({"capacity": 0}, {"failRate": 2}, {"nope": 1}, ["x"]):
        response = await client.post(f"{downstream.url}/_config", json=bad)
        assert response.status_code == 400


async def test_reset_clears_stats_and_scripts(
    downstream: RunningDownstream, client: httpx.AsyncClient
) -> None:
    downstream.script([500, 500])
    await client.get(downstream.url)
    await client.post(f"{downstream.url}/_reset")
    assert downstream.stats.total == 0
    assert downstream.state.scripts.pending() == 0
    assert (await client.get(downstream.url)).status_code == 200


async def test_the_command_line_serves_until_sigterm() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "demo.downstream", "--port", "0", "--latency-ms", "1",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as plain:
            assert (await plain.get(f"{url}/items", params={"count": 1})).status_code == 200
        process.terminate()
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
