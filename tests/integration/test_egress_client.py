"""The egress policy inside the HTTP client and the GATEWAY: where each check happens, what
admission hears of a refusal, and the socket factory's backstop. Real listeners on loopback."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import yarl

from schemas.errors import FailureKind, StepFailure
from tests.integration.egress_harness import Canary, ControlledResolver, canary
from tests.integration.test_gateway import (
    FAST,
    LogRecorder,
    RecordingGuard,
    gateway_config,
    gateway_ctx,
)
from vertices import gateway
from vertices.egress import EgressDenied, EgressPolicy
from vertices.http_client import HttpClient, build_http_client


@pytest.fixture
async def listener() -> AsyncIterator[Canary]:
    async with canary("127.0.0.1") as running:
        yield running


async def _client(policy: EgressPolicy, dns: ControlledResolver) -> HttpClient:
    return build_http_client(max_connections=4, egress=policy, resolver=dns)


async def test_an_ip_literal_is_refused_before_admission_is_asked(listener: Canary) -> None:
    client = await _client(EgressPolicy(), ControlledResolver())
    guard = RecordingGuard()
    try:
        with pytest.raises(StepFailure) as caught:
            await gateway.execute(
                gateway_config(f"{listener.url}/x"), gateway_ctx(), client, FAST, guard=guard
            )
    finally:
        await client.aclose()
    assert caught.value.kind is FailureKind.EGRESS_DENIED
    assert (guard.before, guard.after) == ([], [])  # no slot taken, nothing to settle
    assert listener.connections == 0


async def test_a_name_refused_on_its_answer_is_one_attempt_admission_ignores(
    listener: Canary,
) -> None:
    dns = ControlledResolver({"inside.example": ["127.0.0.1"]})
    client = await _client(EgressPolicy(), dns)
    guard = RecordingGuard()
    config = gateway_config(f"http://inside.example:{listener.port}/", retry={"maxAttempts": 4})
    try:
        with pytest.raises(StepFailure) as caught:
            await gateway.execute(config, gateway_ctx(), client, FAST, guard=guard)
    finally:
        await client.aclose()
    failure = caught.value
    assert failure.kind is FailureKind.EGRESS_DENIED and not failure.redispatchable
    assert "(1 attempt)" in failure.message  # terminal: never retried
    destination = f"http://inside.example:{listener.port}"
    assert guard.after == [(destination, None, "egress_denied")]  # ignored by admission
    assert dns.lookups == ["inside.example"]
    assert listener.connections == 0


async def test_a_host_pattern_admits_a_name_wherever_it_resolves(listener: Canary) -> None:
    dns = ControlledResolver({"billing.internal": ["127.0.0.1"], "other.internal": ["127.0.0.1"]})
    client = await _client(EgressPolicy.parse("billing.internal"), dns)
    try:
        async with client.request(
            "GET", f"http://billing.internal:{listener.port}/", timeout_s=5
        ) as response:
            assert response.status == 200
        with pytest.raises(EgressDenied):
            async with client.request(
                "GET", f"http://other.internal:{listener.port}/", timeout_s=5
            ):
                pass
    finally:
        await client.aclose()
    assert listener.connections == 1


def _closed_port() -> int:
    """A port nothing listens on (on every loopback address), for refused connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("addresses", [["127.0.0.5"], ["127.0.0.5", "127.0.0.6"]])
async def test_an_admitted_name_that_refuses_the_connection_keeps_its_addresses_hidden(
    addresses: list[str],
) -> None:
    """The step's error (and the run's log lines, which the tenant reads too) name the host
    as written, never the addresses its DNS gave: admitted by a pattern, a name chosen by the
    submitter (`{{ input.host }}`) would otherwise map the internal network for them."""
    dns = ControlledResolver({"billing.internal": addresses})
    client = await _client(EgressPolicy.parse("*.internal, 127.0.0.0/8"), dns)
    log = LogRecorder()
    port = _closed_port()
    config = gateway_config(f"http://billing.internal:{port}/", retry={"maxAttempts": 1})
    try:
        with pytest.raises(StepFailure) as caught:
            await gateway.execute(config, gateway_ctx(log), client, FAST)
    finally:
        await client.aclose()
    assert caught.value.kind is FailureKind.NETWORK_ERROR
    # (Of several addresses, aiohttp tries each in turn and raises the last one's error.)
    assert f"cannot connect to billing.internal:{port}: Connection refused" in (
        caught.value.message
    )
    shown = [caught.value.message, *(message for _, message, _ in log.lines)]
    assert not [text for text in shown if "127.0.0." in text], shown


class _UrlCheckSkipped(EgressPolicy):
    """A policy whose URL check was lost (a regression the backstop must survive)."""

    def check_url(self, url: str | yarl.URL) -> None:
        return None


async def test_the_socket_factory_refuses_what_the_url_check_missed(listener: Canary) -> None:
    client = await _client(_UrlCheckSkipped(), ControlledResolver())
    try:
        with pytest.raises(EgressDenied, match=r"127\.0\.0\.1 is loopback"):
            async with client.request("GET", f"{listener.url}/", timeout_s=5):
                pass
    finally:
        await client.aclose()
    assert listener.connections == 0


async def test_a_client_without_policy_is_unrestricted(listener: Canary) -> None:
    # What tests and benchmarks build directly; every process's client has a policy
    # (engine.runtime passes its settings' policy: see the egress canary tests).
    client = build_http_client(max_connections=1)
    try:
        async with client.request("GET", f"{listener.url}/", timeout_s=5) as response:
            assert response.status == 200
    finally:
        await client.aclose()
    assert client.egress is None and listener.connections == 1


async def test_a_url_that_does_not_parse_is_invalid_config_not_a_crash() -> None:
    client = await _client(EgressPolicy(), ControlledResolver())
    try:
        with pytest.raises(StepFailure) as caught:
            config = gateway_config("{{ input.url }}")
            await gateway.execute(config, gateway_ctx(url="http://[::1/x"), client, FAST)
    finally:
        await client.aclose()
    assert caught.value.kind is FailureKind.INVALID_CONFIG
