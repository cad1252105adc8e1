"""Building a GATEWAY request and choosing its timeout: pure functions, no I/O (kept next to
the other gateway tests; they would sit equally well in tests/unit)."""

from __future__ import annotations

from typing import Any

import pytest
import yarl

from engine.settings import Settings
from schemas.errors import FailureKind, StepFailure
from schemas.url_template import url_layout
from tests.integration.test_gateway import gateway_config, gateway_ctx
from vertices.contract import TimeoutTier
from vertices.egress import EgressDenied, parse_ip_host
from vertices.gateway import GatewayTimeouts, destination_key
from vertices.gateway_request import _PLAIN_HOST, _check_literal_host, build_request


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://api.example.com/a?b=1", "http://api.example.com:80"),
        ("HTTPS://API.Example.com/a", "https://api.example.com:443"),
        ("http://127.0.0.1:8765/x", "http://127.0.0.1:8765"),
        ("http://user:pw@host:81/", "http://host:81"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
        # Non-ASCII hosts as yarl sends them (IDNA): one server, one key.
        ("https://evil\u3002example/x", "https://evil.example:443"),
        ("https://EVIL\uff0eexample/x", "https://evil.example:443"),
        ("https://b\u00fccher.example/", "https://xn--bcher-kva.example:443"),
    ],
)
def test_the_default_destination_is_scheme_host_port(url: str, key: str) -> None:
    assert destination_key(url, None) == key


ONE_SERVER = {
    "http://evil.com:80": [
        "http://evil.com/",
        "http://EVIL.Com/x",
        "http://evil.com./",  # fully qualified: the same name in DNS
        "http://Evil.COM.:80/y",
    ],
    "http://[::1]:8080": [
        "http://[::1]:8080/",
        "http://[0:0:0:0:0:0:0:1]:8080/",
        "http://[0000::0001]:8080/",
        "http://[::0:1]:8080/",
    ],
    "http://[2001:db8::1]:80": ["http://[2001:DB8::1]/", "http://[2001:0db8:0:0::0001]/"],
    "http://127.0.0.1:8765": [
        "http://127.0.0.1:8765/",
        "http://0x7f000001:8765/",  # the resolver connects these to 127.0.0.1
        "http://0x7f.1:8765/",
        "http://0x7F.0.0.1:8765/",
        "http://2130706433:8765/",  # aiohttp refuses the all-digit ones; still the address
        "http://0177.0.0.1:8765/",
        "http://127.1:8765/",
        "http://017700000001:8765/",
        "http://[::ffff:127.0.0.1]:8765/",  # IPv4-mapped: the socket sends it to 127.0.0.1
        "http://[::FFFF:7F00:1]:8765/",
    ],
    "https://evil.example:443": [
        "https://evil\u3002example/",
        "https://EVIL\uff0eexample./",
        "https://evil.example./",
    ],
}


@pytest.mark.parametrize(("key", "urls"), ONE_SERVER.items(), ids=list(ONE_SERVER))
def test_every_spelling_of_one_server_has_its_key(key: str, urls: list[str]) -> None:
    assert {url: destination_key(url, None) for url in urls} == dict.fromkeys(urls, key)


def test_other_servers_keep_keys_of_their_own() -> None:
    others = [
        "http://127.0.0.2:8765/",
        "http://[::2]:8080/",
        "http://127.0.0.1:8766/",
        "https://127.0.0.1:8765/",
        "http://localhost:8765/",  # a name: keyed by name, never resolved for the key
        "http://0x7f000001.:8765/",  # with the dot a name to the resolver, not an address
        "http://evil.co/",
        "http://evil.com.evil/",
        "http://evil.com../",
        "http://[fe80::1%25eth0]/",
        "http://[fe80::1%25eth1]/",
    ]
    keys = [destination_key(url, None) for url in others]
    assert len(set(keys)) == len(others), keys
    assert not set(keys) & {destination_key(urls[0], None) for urls in ONE_SERVER.values()}


@pytest.mark.parametrize(
    "url", ["http://ev%69l.com/", "http://%31%32%37.0.0.1:8765/", "http://EV%49L.com./"]
)
def test_a_percent_encoded_host_is_refused(url: str) -> None:
    """yarl sends such a host as written and no resolver has that name: it reaches no
    server, and would only mint an admission key of its own."""
    assert "%" in (yarl.URL(url).raw_host or "")  # yarl neither decodes nor refuses it
    with pytest.raises(StepFailure) as caught:
        destination_key(url, None)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert "percent-encoded" in caught.value.message
    assert destination_key(url, "evil") == "evil"  # an explicit destination is the key


@pytest.mark.parametrize(
    "host",
    [
        "api.example.com",
        "a_b.example",
        "x",
        "xn--bcher-kva.example",
        "1.2.3.4",
        "0.0.0.0",
        "255.255.255.255",
        "10.0.0.1",
        "a.b.c.d.e.f",
        "foo-1.3com.example",
        "cafe.bad",
    ],
)
def test_a_plain_host_is_keyed_as_the_client_sends_it(host: str) -> None:
    """The hosts the normaliser passes untouched (`_PLAIN_HOST`) are exactly as yarl sends
    them and no IPv4 spelling of another address."""
    assert _PLAIN_HOST.fullmatch(host)
    assert yarl.URL(f"http://{host}/").raw_host == host
    address = parse_ip_host(host)
    assert address is None or str(address) == host
    assert destination_key(f"http://{host}/", None) == f"http://{host}:80"


@pytest.mark.parametrize("host", ["127.1", "0xff.0xab", "cafe.0xab.1", "1.2.3.04", "evil.com."])
def test_a_host_that_may_be_respelled_is_not_plain(host: str) -> None:
    assert _PLAIN_HOST.fullmatch(host) is None


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


# ── values in the url ───────────────────────────────────────────────────────────────────────

TRAVERSAL = "../../admin?delete=1#"


def _url(template: str, **input_: Any) -> str:
    return build_request(gateway_config(template), gateway_ctx(**input_)).url


@pytest.mark.parametrize(
    ("template", "value", "expected"),
    [
        ("http://h.example/customers/{{ input.v }}/orders", TRAVERSAL,
         "http://h.example/customers/..%2F..%2Fadmin%3Fdelete%3D1%23/orders"),
        ("http://h.example/s?q={{ input.v }}&page=2", "a b&page=9",
         "http://h.example/s?q=a%20b%26page%3D9&page=2"),
        ("http://h.example/p#{{ input.v }}", "x/y?z=1", "http://h.example/p#x%2Fy%3Fz%3D1"),
        ("http://h.example/n/{{ input.v }}", 'Zoë € "@+', "http://h.example/n/Zo%C3%AB%20%E2%82%AC%20%22%40%2B"),
        ("http://h.example/n/{{ input.v }}", "%2E%2E", "http://h.example/n/%252E%252E"),
        ("http://h.example/n/{{ input.v }}", "v1.2...", "http://h.example/n/v1.2..."),
        ("http://h.example/n/{{ input.v }}", 7, "http://h.example/n/7"),
        ("http://h.example/n/{{ input.v }}", 2.5, "http://h.example/n/2.5"),
        ("http://h.example/n/{{ input.v }}", True, "http://h.example/n/true"),
        ("http://h.example/n?q={{ input.v }}", None, "http://h.example/n?q="),  # in a path: refused
        ("http://h.example/n/{{ input.v }}", {"a": [1]}, "http://h.example/n/%7B%22a%22%3A%5B1%5D%7D"),
        ("http://h.example/n/x-{{ input.v }}.json", "a/b", "http://h.example/n/x-a%2Fb.json"),
        ("http://h.example/s?q=..&r={{ input.v }}", "..", "http://h.example/s?q=..&r=.."),
    ],
)  # fmt: skip
def test_a_value_after_the_authority_is_one_percent_encoded_component(
    template: str, value: Any, expected: str
) -> None:
    assert _url(template, v=value) == expected


def test_yarl_keeps_the_encoded_value_whole_in_its_segment_and_its_query_value() -> None:
    """aiohttp sends the URL through yarl, which re-quotes it: the value must survive that as
    one path segment and one query value (and not come back as `..` it resolves)."""
    url = yarl.URL(
        _url("http://h.example/c/{{ input.v }}/o?k={{ input.v }}&z={{ input.v }}", v=TRAVERSAL)
    )
    assert url.parts == ("/", "c", TRAVERSAL, "o")
    assert url.query.getall("k") == [TRAVERSAL] and url.query.getall("z") == [TRAVERSAL]
    assert url.fragment == ""


@pytest.mark.parametrize(
    ("template", "values", "expected"),
    [
        # A host and a port that stay a host and a port are used as they are.
        ("http://{{ input.host }}:{{ input.port }}/x", {"host": "h.example", "port": 8080},
         "http://h.example:8080/x"),
        ("http://{{ input.host }}/x", {"host": "[::1]:8080"}, "http://[::1]:8080/x"),
        ("http{{ input.s }}://h.example/x", {"s": "s"}, "https://h.example/x"),
        # A whole-URL expression is a pre-built URL (a pagination link): not encoded.
        ("{{ input.next }}", {"next": "http://h.example/a/b?page=2&x=%2F#f"},
         "http://h.example/a/b?page=2&x=%2F#f"),
        # A base URL that starts the string is not encoded; what comes after its path is.
        ("{{ input.base }}/orders/{{ input.id }}", {"base": "http://h.example/api/v2", "id": "a/b"},
         "http://h.example/api/v2/orders/a%2Fb"),
        ("http://h.example/x?a=1", {}, "http://h.example/x?a=1"),
    ],
)  # fmt: skip
def test_the_host_port_and_a_whole_url_expression_are_not_encoded(
    template: str, values: dict[str, Any], expected: str
) -> None:
    assert _url(template, **values) == expected


@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("http://h.example/a/{{ input.v }}/b", ".."),
        ("http://h.example/a/{{ input.v }}/b", "."),
        ("http://h.example/a/{{ input.v }}", ".."),
        ("http://h.example/a/{{ input.v }}?q=1", ".."),
        ("http://h.example/a/.{{ input.v }}/b", "."),
        ("http://h.example/a/%2e{{ input.v }}#f", "."),
        ("http://h.example/a/{{ input.v }}{{ input.v }}", "."),
    ],
)
def test_a_value_that_makes_a_dot_segment_is_refused(template: str, value: str) -> None:
    """yarl decodes `%2E` and resolves `.` and `..`: such a value would change the path."""
    with pytest.raises(StepFailure) as caught:
        _url(template, v=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert "cannot be '.' or '..'" in message and "\n" not in message


def test_an_expression_error_in_the_url_names_the_field() -> None:
    with pytest.raises(StepFailure) as caught:
        _url("http://h.example/a/{{ input.[ }}")
    assert caught.value.kind is FailureKind.EXPRESSION_ERROR
    assert caught.value.message.startswith("/config/url: expression {{ input.[ }} failed")


def test_an_expression_error_in_the_body_names_its_pointer_and_json_types() -> None:
    # The pointer of the failing string, not only "body"; jmespath's Python "int" as JSON.
    body = {"ok": "{{ input.n }}", "a/b": [{"jbad": "{{ join(',', [input.n]) }}"}]}
    with pytest.raises(StepFailure) as caught:
        _build(body=body)
    assert caught.value.kind is FailureKind.EXPRESSION_ERROR
    message = caught.value.message
    assert message.startswith("/config/body/a~1b/0/jbad: expression {{ join(',', [input.n]) }}")
    assert message.endswith("received: number") and "int" not in message


def test_a_dot_segment_before_trailing_spaces_is_refused() -> None:
    """The url is stripped before it is sent, so trailing spaces do not hide a `..`."""
    with pytest.raises(StepFailure) as caught:
        _url("http://h.example/a/{{ input.v }}  ", v="..")
    assert caught.value.kind is FailureKind.INVALID_CONFIG


# ── values in the scheme, authority and userinfo ───────────────────────────────────────────


@pytest.mark.parametrize(
    ("template", "value", "expected"),
    [
        ("http://u:{{ input.v }}@h.example/x", "p%40ss", "http://u:p%2540ss@h.example/x"),
        ("http://u:{{ input.v }}@h.example/x", "p#?/@%:", "http://u:p%23%3F%2F%40%25%3A@h.example/x"),
        ("http://{{ input.v }}:pw@h.example/x", "a b@c", "http://a%20b%40c:pw@h.example/x"),
    ],
)  # fmt: skip
def test_a_value_in_the_userinfo_is_percent_encoded(
    template: str, value: str, expected: str
) -> None:
    """Unencoded, a `#`, `?` or `/` ends the authority early (the rest of the password becomes
    the port, or the path at the wrong host) and a `%41` is decoded into another password."""
    request = build_request(gateway_config(template), gateway_ctx(v=value))
    assert request.url == expected
    assert request.destination == "http://h.example:80"
    assert request.url_for_log == "http://h.example/x"


@pytest.mark.parametrize(
    ("template", "value", "where"),
    [
        # Run input in the port, or right after a literal host, would move the call (and the
        # vertex's secret headers) to evil.example.
        ("https://api.example.com:{{ input.v }}/v1", "443@evil.example/steal?", "port"),
        ("https://api.example.com:{{ input.v }}", "443@evil.example", "port"),
        ("https://api.example.com:{{ input.v }}/v1", "44 3", "port"),
        ("https://api.example.com:{{ input.v }}/v1", "٤٤٣", "port"),  # not ASCII digits
        ("https://api.example.com{{ input.v }}", "@evil.com/x", "host"),
        ("https://api.example.com{{ input.v }}/v1", "/x", "host"),
        ("https://{{ input.v }}/v1", "evil.example#", "host"),
        ("https://{{ input.v }}.example.com/v1", "evil.example?", "host"),
        ("https://{{ input.v }}.example.com/v1", "evil.example\\x", "host"),
        ("https://{{ input.v }}.example.com/v1", "a b", "host"),
        ("{{ input.v }}://api.example.com/v1", "https://evil.example/?", "scheme"),
    ],
)
def test_a_value_that_would_leave_its_host_or_port_is_refused(
    template: str, value: str, where: str
) -> None:
    with pytest.raises(StepFailure) as caught:
        _url(template, v=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert f"{{{{ input.v }}}} is in the url's {where}" in message
    assert "\n" not in message and value not in message


# ── a value beside literal host text: one DNS label ────────────────────────────────────────

BEFORE = "https://{{ input.v }}.api.example.com/v1"
AFTER = "https://api.example.{{ input.v }}/v1"
GLUED = "https://api-{{ input.v }}.example.com/v1"


@pytest.mark.parametrize(
    ("template", "value", "says"),
    [
        (AFTER, "com.evil.net", "holds '.'"),  # api.example.com.evil.net
        (BEFORE, "evil.net", "holds '.'"),
        (AFTER, "com.", "holds '.'"),  # a trailing dot
        (AFTER, ".", "holds '.'"),
        (AFTER, 2.5, "holds '.'"),
        (AFTER, "com%2eevil%2enet", "holds '%'"),
        (AFTER, "COM.EVIL.NET", "holds '.'"),
        # IDNA (yarl, on the way out) maps these to '.', and U+2488 to "1.".
        (AFTER, "com\u3002evil\u3002net", "holds '\u3002'"),
        (AFTER, "com\uff0eevil\uff0enet", "holds '\uff0e'"),
        (AFTER, "com\uff61evil\uff61net", "holds '\uff61'"),
        (AFTER, "com\u2488evil", "holds a character beyond ASCII"),
        (BEFORE, "b\u00fccher", "holds a character beyond ASCII"),
        (BEFORE, "eu\\west", "holds '\\\\'"),
        (BEFORE, "eu west", "holds ' '"),
        (BEFORE, "eu\twest", "holds '\\t'"),
        (BEFORE, "eu_west", "holds a character that"),
        (AFTER, "", "is empty"),
        (AFTER, None, "is empty"),
        (BEFORE, "-eu", "makes a label that starts or ends with '-'"),
        (BEFORE, "eu-", "makes a label that starts or ends with '-'"),
        (GLUED, "eu-", "makes a label that starts or ends with '-'"),
        (BEFORE, "a" * 64, "makes a label of 64 characters, over 63"),
        (GLUED, "a" * 60, "makes a label of 64 characters, over 63"),  # with its 'api-'
        ("https://api.example.com{{ input.v }}/v1", "x.evil.net", "holds '.'"),
    ],
)
def test_a_value_beside_literal_host_text_cannot_add_labels(
    template: str, value: Any, says: str
) -> None:
    with pytest.raises(StepFailure) as caught:
        _url(template, v=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert message.startswith("url: the value of {{ input.v }} is in the url's host label and ")
    assert says in message and "one DNS label" in message
    assert "make the whole host one expression" in message and "\n" not in message
    if isinstance(value, str) and len(value) > 1:
        assert value not in message


@pytest.mark.parametrize(
    ("template", "values", "expected"),
    [
        (BEFORE, {"v": "eu-west-1"}, "https://eu-west-1.api.example.com/v1"),
        (BEFORE, {"v": "EU-West-1"}, "https://EU-West-1.api.example.com/v1"),
        (BEFORE, {"v": 7}, "https://7.api.example.com/v1"),
        (BEFORE, {"v": "a" * 63}, f"https://{'a' * 63}.api.example.com/v1"),
        (AFTER, {"v": "com"}, "https://api.example.com/v1"),
        (GLUED, {"v": "eu"}, "https://api-eu.example.com/v1"),
        (GLUED, {"v": "-x"}, "https://api--x.example.com/v1"),  # the label is 'api--x'
        ("https://api{{ input.v }}example.com/", {"v": "x"}, "https://apixexample.com/"),
        ("http://10.0.0.{{ input.v }}:8080/", {"v": 5}, "http://10.0.0.5:8080/"),
        ("https://{{ input.a }}.{{ input.b }}.example.com/", {"a": "x", "b": "eu"},
         "https://x.eu.example.com/"),
        ("https://svc:{{ input.v }}@api-{{ input.v }}.example.com/", {"v": "eu"},
         "https://svc:eu@api-eu.example.com/"),
        # A host that is expressions alone is the author's choice to let the value choose.
        ("https://{{ input.v }}:8443/x", {"v": "api.example.com.evil.net"},
         "https://api.example.com.evil.net:8443/x"),
        ("https://{{ input.v }}/x", {"v": "API.Example.com."}, "https://API.Example.com./x"),
        ("http://[{{ input.v }}]:8080/x", {"v": "::1"}, "http://[::1]:8080/x"),
    ],
)  # fmt: skip
def test_a_host_label_value_and_a_whole_host_are_used_as_they_are(
    template: str, values: dict[str, Any], expected: str
) -> None:
    assert _url(template, **values) == expected


@pytest.mark.parametrize("value", ["evil.example#", "evil.example/x", "u@evil.example", "a b"])
def test_a_whole_host_value_still_cannot_leave_the_host(value: str) -> None:
    with pytest.raises(StepFailure) as caught:
        _url("https://{{ input.v }}:8443/x", v=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert "{{ input.v }} is in the url's host and holds" in message
    assert "host label" not in message and value not in message


def test_a_refused_port_value_shows_none_of_its_characters_but_delimiters() -> None:
    """A value in the port may be a secret stored before validation refused it there."""
    with pytest.raises(StepFailure) as caught:
        _url("https://api.example.com:{{ input.v }}/v1", v="S3cret")
    assert "holds a character that would change" in caught.value.message
    assert "'S'" not in caught.value.message


def test_a_literal_host_must_still_be_the_host_after_rendering() -> None:
    """The backstop behind the rules above: run directly, since they leave it nothing to
    catch."""
    layout = url_layout("https://api.example.com:{{ input.port }}/v1")
    _check_literal_host("https://API.example.com:8443/v1", layout)  # same host, any case
    with pytest.raises(StepFailure) as caught:
        _check_literal_host("https://api.example.com:443@evil.example/steal?:8443/v1", layout)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert "changed the url's host from 'api.example.com'" in caught.value.message
    with pytest.raises(StepFailure):
        _check_literal_host("https://[::1/v1", layout)  # unparseable: not the host either


@pytest.mark.parametrize(
    ("url", "leaked"),
    [
        ("https://svc:pa#ss@api.example.com/x", "svc:pa"),  # `#` ends the authority: port `pa`
        ("https://svc:9999999#x@api.example.com/x", "9999999"),  # a port out of range
        ("https://svc:[pass@api.example.com/x", "[pass"),
    ],
)
def test_a_url_that_is_no_url_is_shown_without_its_userinfo(url: str, leaked: str) -> None:
    with pytest.raises(StepFailure) as caught:
        _url(url)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert message.startswith("url https://… is not a valid URL: ")
    assert leaked not in message and "svc" not in message and "\n" not in message


def test_a_denied_scheme_is_shown_without_its_userinfo() -> None:
    with pytest.raises(EgressDenied) as caught:
        _url("ftp://svc:hunter2@h.example/x")
    assert "hunter2" not in str(caught.value) and "svc" not in str(caught.value)


@pytest.mark.parametrize(
    ("template", "value", "says"),
    [
        ("http://{{ input.v }}:pw@h.example/x", "svc:ops", "user name in user:password@ holds ':'"),
        ("http://a%3Ab:{{ input.v }}@h.example/x", "pw", "user name in user:password@ holds ':'"),
        ("http://u:{{ input.v }}@h.example/x", "pa€ss", "beyond Latin-1"),
    ],
)  # fmt: skip
def test_credentials_basic_authentication_cannot_carry_are_refused(
    template: str, value: str, says: str
) -> None:
    """aiohttp raises on them when it builds the request: a crash, not a step failure."""
    with pytest.raises(StepFailure) as caught:
        _url(template, v=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert says in caught.value.message and value not in caught.value.message
