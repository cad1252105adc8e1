"""Building a GATEWAY request and choosing its timeout: pure functions, no I/O (kept next to
the other gateway tests; they would sit equally well in tests/unit)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.settings import Settings
from schemas.errors import FailureKind, StepFailure
from tests.integration.test_gateway import gateway_config, gateway_ctx
from vertices.contract import TimeoutTier
from vertices.gateway import GatewayTimeouts, destination_key
from vertices.gateway_request import build_request


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://api.example.com/a?b=1", "http://api.example.com:80"),
        ("HTTPS://API.Example.com/a", "https://api.example.com:443"),
        ("http://127.0.0.1:8765/x", "http://127.0.0.1:8765"),
        ("http://user:pw@host:81/", "http://host:81"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
    ],
)
def test_the_default_destination_is_scheme_host_port(url: str, key: str) -> None:
    assert destination_key(url, None) == key


def test_a_configured_destination_wins() -> None:
    assert destination_key("http://a.example/x", " payments ") == "payments"
    assert destination_key("http://a.example/x", "") == "http://a.example:80"


@pytest.mark.parametrize("url", ["not a url", "/relative/path", "http://host:99999/"])
def test_an_unusable_url_has_no_destination(url: str) -> None:
    with pytest.raises(StepFailure) as caught:
        destination_key(url, None)
    assert caught.value.kind is FailureKind.INVALID_CONFIG


def test_timeouts_by_tier_and_override() -> None:
    timeouts = GatewayTimeouts()
    assert timeouts.for_tier(TimeoutTier.COLLECT) == 60_000
    assert timeouts.for_tier(TimeoutTier.PROCESS) == 30_000
    assert timeouts.for_tier(TimeoutTier.GATEWAY) == 15_000
    assert timeouts.resolve_ms(None, TimeoutTier.GATEWAY) == 15_000
    assert timeouts.resolve_ms(2_500, TimeoutTier.COLLECT) == 2_500
    custom = GatewayTimeouts(collect_ms=1, process_ms=2, gateway_ms=3)
    assert [custom.for_tier(t) for t in TimeoutTier] == [1, 2, 3]


def test_timeouts_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIMEOUT_COLLECT_MS", "61000")
    monkeypatch.setenv("TIMEOUT_GATEWAY_MS", "9000")
    timeouts = GatewayTimeouts.from_settings(Settings())
    assert timeouts == GatewayTimeouts(collect_ms=61_000, process_ms=30_000, gateway_ms=9_000)


def _build(**fields: Any) -> Any:
    url = fields.pop("url", "http://h.example/p")
    return build_request(gateway_config(url, **fields), gateway_ctx(n=7, flag=True, obj={"a": 1}))


def test_header_and_query_values_are_formatted() -> None:
    request = _build(
        headers={"X-N": "{{ input.n }}", "X-F": "{{ input.flag }}", "X-O": "{{ input.obj }}"},
        query={"n": "{{ input.n }}", "f": False, "o": {"a": [1]}, "l": [1, None, "x"]},
    )
    assert request.headers["X-N"] == "7"
    assert request.headers["X-F"] == "true"
    assert request.headers["X-O"] == '{"a":1}'
    assert request.params == (
        ("n", "7"), ("f", "false"), ("o", '{"a":[1]}'), ("l", "1"), ("l", "x"),
    )  # fmt: skip


def test_bodies_are_json_unless_a_text_type_is_set() -> None:
    assert _build(body={"n": "{{ input.n }}"}).content == b'{"n":7}'
    assert _build(body="{{ input.n }}").content == b"7"
    assert _build(body="plain").content == b'"plain"'
    text = _build(body="plain", headers={"content-type": "text/plain"})
    assert text.content == b"plain"
    assert "Content-Type" not in text.headers  # the user's own header is kept as written
    assert _build().content is None
    assert _build(body="{{ input.missing }}").content is None


def test_the_idempotency_key_falls_back_to_run_and_vertex() -> None:
    config = gateway_config("http://h.example/")
    ctx = gateway_ctx()
    ctx = type(ctx)(**{**ctx.__dict__, "idempotency_key": ""})
    assert build_request(config, ctx).headers["Idempotency-Key"] == "run-1:call"


def test_the_log_url_drops_the_query_string() -> None:
    request = _build(url="http://h.example/p?token=secret")
    assert request.url_for_log == "http://h.example/p"
    assert request.destination == "http://h.example:80"


def test_a_non_string_destination_is_invalid() -> None:
    with pytest.raises(StepFailure) as caught:
        _build(destination="{{ input.n }}")
    assert caught.value.kind is FailureKind.INVALID_CONFIG
