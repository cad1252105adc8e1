"""The redactor (schemas/redaction.py), the URL a log shows (vertices/gateway_request.py) and
the body excerpt cut after redaction (vertices/gateway_response.py)."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest
import yarl

from schemas.redaction import REDACTED, Redactor, basic_credential
from vertices.gateway_request import url_for_log
from vertices.gateway_response import EXCERPT_CHARS, Answer, excerpt

SECRET = 'cnry_Q9v+Zt=Kx.7Lw~pA/é"x'


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET, ensure_ascii=False)[1:-1],
        quote(SECRET, safe=""),
        quote(SECRET),
        quote_plus(SECRET),
    ],
    ids=["raw", "json-ascii", "json", "percent", "path", "form"],
)
def test_every_encoding_of_a_value_is_redacted(form: str) -> None:
    assert Redactor([SECRET]).text(f"before {form} after") == f"before {REDACTED} after"


def test_the_forms_yarl_sends_a_value_encoded_as_one_component_in_are_redacted() -> None:
    """A GATEWAY encodes a URL value whole (`quote(v, safe="")`); aiohttp sends the URL through
    yarl, which decodes again what a path segment or a query value need not keep encoded.
    A destination that echoes its request line shows those forms."""
    value = 'p@ss w/rd?&=é"x+;'
    encoded = quote(value, safe="")
    sent = yarl.URL(f"http://h.example/a/{encoded}/b?k={encoded}")
    path_form = sent.raw_parts[2]
    query_form = sent.raw_query_string.removeprefix("k=")
    assert {path_form, query_form}.isdisjoint({encoded, quote(value)})  # they are other forms
    redactor = Redactor([value])
    assert redactor.text(sent.raw_path_qs) == f"/a/{REDACTED}/b?k={REDACTED}"


def test_scrub_reaches_keys_values_and_items_at_any_depth() -> None:
    deep: object = SECRET
    for _ in range(3_000):  # deeper than Python's recursion limit
        deep = [deep]
    value = {"headers": {"x-echo": f"Bearer {SECRET}"}, SECRET: [1, None, True, deep]}
    scrubbed = Redactor([SECRET]).scrub(value)
    assert scrubbed["headers"] == {"x-echo": f"Bearer {REDACTED}"}
    assert scrubbed[REDACTED][:3] == [1, None, True]
    bottom = scrubbed[REDACTED][3]
    for _ in range(3_000):
        (bottom,) = bottom
    assert bottom == REDACTED
    assert value["headers"]["x-echo"] == f"Bearer {SECRET}"  # the argument is not changed


def test_an_empty_redactor_changes_nothing_and_is_false() -> None:
    value = {"a": ["b"]}
    assert not Redactor()
    assert Redactor().scrub(value) is value


def test_the_longest_form_wins_over_one_it_contains() -> None:
    redactor = Redactor(["abcdefgh", "abcdefgh-and-more"])
    assert redactor.text("x abcdefgh-and-more y") == f"x {REDACTED} y"


def test_very_short_values_are_not_redacted() -> None:
    assert Redactor(["ab"]).text("abcabc") == "abcabc"


def test_a_basic_credential_is_what_a_client_sends_for_a_url_password() -> None:
    token = basic_credential("user", SECRET)
    assert base64.b64decode(token).decode() == f"user:{SECRET}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://user:pa55word@api.example.com:8443/v1/x?key=1#frag",
            "https://api.example.com:8443/v1/x",
        ),
        ("http://user@h/p", "http://h/p"),
        ("http://h/p?token=abc", "http://h/p"),
        ("http://a:b@c@h/p", "http://h/p"),
        ("http://h/p@q", "http://h/p@q"),
        ("http://[::1/x?y", "http://…"),
    ],
)
def test_a_logged_url_loses_its_credentials_and_query(url: str, shown: str) -> None:
    assert url_for_log(url) == shown


def _answer(body: str) -> Answer:
    return Answer(400, "Bad Request", {}, body.encode(), "utf-8")


def test_an_excerpt_is_redacted_before_it_is_cut() -> None:
    # The value straddles the excerpt's end: cutting first would leave its first half.
    body = "x" * (EXCERPT_CHARS - 5) + SECRET + "tail"
    shown = excerpt(_answer(body), Redactor([SECRET]))
    assert shown == "x" * (EXCERPT_CHARS - 5) + REDACTED + "tail"[: 5 - len(REDACTED)]
    assert SECRET[:5] not in shown
    assert excerpt(_answer(body)) == body[:EXCERPT_CHARS]
