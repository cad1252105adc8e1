"""How a GATEWAY answer's body becomes the step output's `body`, and what an unusable JSON body
says (docs/authoring.md, 'GATEWAY: one HTTP call')."""

from __future__ import annotations

from typing import Any

import pytest

from vertices.gateway_response import Answer, InvalidResponse, parse_body


def answer(content: bytes, content_type: str | None, *, charset: str | None = None) -> Answer:
    headers = {"content-type": content_type} if content_type else {}
    return Answer(200, "OK", headers, content, charset)


@pytest.mark.parametrize(
    ("content", "content_type", "body"),
    [
        (b"", "application/json", None),  # an empty 200 declared JSON
        (b"  \n", "application/json", None),
        (b"null", "application/json", None),  # a JSON null reads the same as an empty body
        (b"", None, ""),  # an empty 204 (no content type)
        (b"", "text/plain", ""),
        (b'{"a": 1}', "application/problem+json", {"a": 1}),
        (b'\xef\xbb\xbf{"a": 1}', "application/json", {"a": 1}),  # a UTF-8 byte order mark
        (b'{"a": 1}', "text/plain", '{"a": 1}'),  # not declared JSON: the text as it came
        (b"caf\xc3\xa9", "text/html", "café"),
    ],
)
def test_body_shapes(content: bytes, content_type: str | None, body: Any) -> None:
    assert parse_body(answer(content, content_type)) == body


def test_a_declared_charset_decodes_the_json() -> None:
    content = '{"a": "é"}'.encode("utf-16")
    parsed = parse_body(answer(content, "application/json; charset=utf-16", charset="utf-16"))
    assert parsed == {"a": "é"}


@pytest.mark.parametrize(
    ("content", "charset", "said"),
    [
        # json.loads on bytes guessed UTF-16 here and reported the codec's complaint.
        (b"\x00\xffnot json{{{", None, "is not valid JSON (not UTF-8 text)"),
        (b"\xff\xfe\x00", "utf-16", "is not valid JSON (not utf-16 text)"),
        (b'{"items": [1, 2', None, "is not valid JSON: Expecting"),
        (b"NaN", None, "is not valid JSON: NaN is not a JSON value"),
    ],
)
def test_an_unusable_json_body_says_why(content: bytes, charset: str | None, said: str) -> None:
    with pytest.raises(InvalidResponse) as caught:
        parse_body(answer(content, "application/json", charset=charset))
    assert caught.value.message.startswith(f"body declared application/json {said}")
    assert "codec" not in caught.value.message
