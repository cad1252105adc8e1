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


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "content",
    [
        _nested(65),
        _nested(200),  # parsed fine before the limit, and passed on to the next step
        _nested(100_000),  # a RecursionError in the parser before the limit
        b"[" * 100_000,  # never closed: the parser recurses before it finds the end
        b"[" * 100_000 + b"}",
        b'{"a": ' * 70 + b"1" + b"}" * 70,
    ],
)
def test_json_nested_past_the_limit_is_an_invalid_response(content: bytes) -> None:
    with pytest.raises(InvalidResponse) as caught:
        parse_body(answer(content, "application/json"))
    assert caught.value.message == (
        "body declared application/json nests arrays and objects deeper than 64 levels, "
        "the limit of SCHEMABRIDGE_MAX_NESTING_DEPTH"
    )
    # Balanced texts are refused by the depth check before any parse (no exception behind the
    # refusal); an unclosed one is only seen deep by the parser, whose RecursionError it is.
    balanced = content.count(b"[") + content.count(b"{") == (
        content.count(b"]") + content.count(b"}")
    )
    behind = caught.value.__context__
    assert behind is None if balanced else isinstance(behind, RecursionError), repr(behind)


def test_json_at_the_limit_is_parsed_and_brackets_in_strings_do_not_count() -> None:
    at_limit = parse_body(answer(_nested(64), "application/json"))
    for _ in range(63):
        (at_limit,) = at_limit
    assert at_limit == []
    value = parse_body(answer(b'[{"a": "' + b"[{" * 500 + b'"}]', "application/json"))
    assert value == [{"a": "[{" * 500}]
    # A deployment's own limit, not the default, is what is applied.
    assert parse_body(answer(_nested(3), "application/json"), 3) == [[[]]]
    with pytest.raises(InvalidResponse, match="deeper than 3 levels"):
        parse_body(answer(_nested(4), "application/json"), 3)


def test_the_limit_applies_to_json_only() -> None:
    deep = _nested(1_000)
    assert parse_body(answer(deep, "text/plain")) == deep.decode()
    truncated = Answer(200, "OK", {"content-type": "application/json"}, deep, None, True)
    assert parse_body(truncated) == deep.decode()  # a cut body is text, whatever it holds
