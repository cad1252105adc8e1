"""Malformed input: every unsafe or broken document becomes a clear DefinitionError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.settings import Settings
from engine.validation import loads_checked, parse_document
from schemas.errors import DefinitionError, Problem

VALID = {
    "name": "ok",
    "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:8765/a"}}},
}


def only_problem(data: bytes | str, **kwargs: Any) -> Problem:
    with pytest.raises(DefinitionError) as caught:
        parse_document(data, **kwargs)
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


def test_not_json() -> None:
    problem = only_problem(b"name: yaml-is-not-json\n")
    assert (problem.pointer, problem.code) == ("", "json_syntax")
    assert problem.message == "The document is not valid JSON: Expecting value (line 1, column 1)."


def test_truncated_json_says_so() -> None:
    text = json.dumps(VALID, indent=2)
    problem = only_problem(text[: len(text) // 2])
    assert problem.code == "json_syntax"
    assert "was it cut short?" in problem.message
    assert "line " in problem.message


def test_an_empty_file() -> None:
    """Said to be empty: not "Expecting value (line 1, column 1)", nor "cut short"."""
    problem = only_problem(b"")
    assert problem.code == "json_syntax"
    assert problem.message == "The document is not valid JSON: it is empty (0 bytes)."
    blank = only_problem(b" \n\t\n")
    assert (
        blank.message == "The document is not valid JSON: it is empty (only blanks, no JSON value)."
    )


def test_a_comma_after_the_last_item_is_named() -> None:
    problem = only_problem('{\n  "name": "ok",\n  "vertices": {},\n}\n')
    assert problem.code == "json_syntax"
    assert problem.message == (
        "The document is not valid JSON: Expecting property name enclosed in double quotes "
        "(line 4, column 1). The `}` there follows a comma: JSON allows none after the last "
        "item, so remove that comma."
    )


def test_single_quotes_are_named() -> None:
    problem = only_problem("{'name': 'ok', 'vertices': {}}")
    assert problem.code == "json_syntax"
    assert problem.message == (
        "The document is not valid JSON: Expecting property name enclosed in double quotes "
        '(line 1, column 2). JSON writes strings and names in double quotes ("), not single '
        "ones."
    )


def test_a_document_over_the_byte_limit_is_refused_before_parsing() -> None:
    huge = b'{"name": "' + b"x" * (50 * 1024 * 1024) + b'"}'
    problem = only_problem(huge)
    assert (problem.pointer, problem.code) == ("", "too_large")
    assert "1,048,576 bytes" in problem.message


def test_the_byte_limit_counts_utf8_bytes_of_a_str() -> None:
    document = json.dumps({**VALID, "description": "é" * 60}, ensure_ascii=False)
    assert len(document) < 200 < len(document.encode())
    problem = only_problem(document, settings=Settings(max_document_bytes=200))
    assert problem.code == "too_large"


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deep_nesting_is_refused_without_recursion(depth: int) -> None:
    problem = only_problem("[" * depth + "]" * depth)
    assert problem.code == "too_deep"
    assert "more than 64 levels deep (at line 1, column 65)" in problem.message


def test_deep_nesting_is_refused_even_when_the_setting_is_huge() -> None:
    problem = only_problem("[" * 10_000 + "]" * 10_000, settings=Settings(max_nesting_depth=10**6))
    assert problem.code == "too_deep"


def _deep_document(leaf: str) -> str:
    body: Any = leaf
    for _ in range(60):  # the workflow's own 4 levels (root, vertices, a, config) + 60 = 64
        body = [body]
    config = {"url": "http://h", "body": body}
    return json.dumps({"name": "deep", "vertices": {"a": {"type": "GATEWAY", "config": config}}})


def test_nesting_at_the_limit_is_fine() -> None:
    assert parse_document(_deep_document("plain"))
    problem = only_problem(_deep_document("plain"), settings=Settings(max_nesting_depth=63))
    assert problem.code == "too_deep"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_document(_deep_document('[[[[{{{{\\"' * 50))
    # The only complaint is about the unclosed `{{`, not about depth.
    assert {p.code for p in caught.value.problems} == {"unclosed_expression"}


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (bytes(range(256)) * 4, "binary"),
        (b"\x00\x00\x00\x01", "binary"),
        (b'{"name": "a\x00"}', "binary"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (b'{"name": "caf\xe9"}', "not_utf8"),
        ('{"a": 1}'.encode("utf-16"), "not_utf8"),
    ],
)
def test_binary_and_non_utf8_input(data: bytes, code: str) -> None:
    problem = only_problem(data)
    assert (problem.pointer, problem.code) == ("", code)


def test_not_utf8_names_the_line_and_byte() -> None:
    problem = only_problem(b'{\n  "name": "caf\xe9"\n}')
    assert "byte 0xe9 at line 2" in problem.message


def test_a_utf8_byte_order_mark_is_tolerated() -> None:
    assert parse_document(b"\xef\xbb\xbf" + json.dumps(VALID).encode())


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_refused(constant: str) -> None:
    document = json.dumps(VALID)[:-1] + f', "description": {constant}}}'
    problem = only_problem(document)
    assert problem.code == "json_syntax"
    assert constant.lstrip("-") in problem.message


def test_an_integer_with_too_many_digits_is_refused() -> None:
    document = '{"name": "a", "vertices": {"a": {"type": "MERGE", "maxAutoRetries": %s}}}'
    problem = only_problem(document % ("9" * 5000))
    assert problem.code == "json_syntax"


def test_duplicate_keys_are_reported_with_the_other_problems() -> None:
    text = (
        '{"name": "a", "name": "b", "vertices": {'
        '"v": {"type": "GATEWAY", "config": {"url": "http://h"}},'
        '"v": {"type": "GATEWAY", "config": {"url": "http://h", "bad": 1}}}}'
    )
    with pytest.raises(DefinitionError) as caught:
        parse_document(text)
    assert [(p.pointer, p.code) for p in caught.value.problems] == [
        ("/name", "duplicate_key"),
        ("/vertices/v", "duplicate_key"),
        ("/vertices/v/config/bad", "unknown_field"),
    ]


def test_json_entering_elsewhere_is_checked_for_keys_written_twice() -> None:
    # A REST body or a CLI option: the value, and each key written twice by its pointer
    # (escaped as RFC 6901 says), the same key in different objects being no duplicate.
    text = '{"a/b": 1, "a/b": 2, "x": [{"k": 1}, {"k": 2, "~": 0, "~": 1}], "k": 3}'
    value, problems = loads_checked(text)
    assert value == {"a/b": 2, "x": [{"k": 1}, {"k": 2, "~": 1}], "k": 3}
    assert [(p.pointer, p.code) for p in problems] == [
        ("/a~1b", "duplicate_key"),
        ("/x/1/~0", "duplicate_key"),
    ]
    assert loads_checked('{"k": {"k": 1}}') == ({"k": {"k": 1}}, [])
    assert loads_checked(b'{"a": 1, "a": 2}')[1][0].pointer == "/a"
