"""An inputSchema part no value can match is refused at publication (`unsatisfiable_schema`),
at the keyword to change: otherwise every run of the workflow (or every run that sends the
field) would be refused at submission, long after the author could have been told."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.validation import check_documents
from schemas.errors import Problem


def _found(input_schema: Any) -> list[Problem]:
    document = {
        "name": "impossible",
        "inputSchema": input_schema,
        "vertices": {"a": {"type": "GATEWAY", "config": {"url": "https://example.com/"}}},
    }
    return check_documents([("wf.json", json.dumps(document))]).problems


def _problems(input_schema: Any) -> list[tuple[str, str]]:
    return [(p.pointer, p.code) for p in _found(input_schema)]


def _messages(input_schema: Any) -> list[str]:
    return [p.message for p in _found(input_schema)]


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"enum": []}, "/inputSchema/enum"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "/inputSchema/minLength"),
        ({"type": "number", "minimum": 5, "maximum": 2}, "/inputSchema/minimum"),
        ({"type": "integer", "minimum": 2.5, "maximum": 2}, "/inputSchema/minimum"),
        ({"type": "number", "exclusiveMinimum": 2, "maximum": 2}, "/inputSchema/exclusiveMinimum"),
        (
            {"type": ["integer", "number"], "minimum": 2, "exclusiveMaximum": 2},
            "/inputSchema/minimum",
        ),
        (
            {"type": "number", "exclusiveMinimum": 3, "exclusiveMaximum": 3},
            "/inputSchema/exclusiveMinimum",
        ),
        # The tightest lower bound is the one named.
        (
            {"type": "number", "minimum": 1, "exclusiveMinimum": 4, "maximum": 3},
            "/inputSchema/exclusiveMinimum",
        ),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "/inputSchema/minItems"),
        ({"type": "object", "minProperties": 3, "maxProperties": 1}, "/inputSchema/minProperties"),
        (
            {"type": "array", "contains": {}, "minContains": 2, "maxContains": 1},
            "/inputSchema/minContains",
        ),
        (
            {"type": "object", "required": ["a", "b", "c"], "maxProperties": 2},
            "/inputSchema/required",
        ),
        (
            {"type": "object", "required": ["x", "a"], "properties": {"a": False}},
            "/inputSchema/required/1",
        ),
        ({"required": ["a"], "properties": {"a": {"not": {}}}}, "/inputSchema/required/0"),
        ({"not": {}}, "/inputSchema/not"),
        ({"type": "object", "not": True}, "/inputSchema/not"),
        ({"not": {"title": "anything", "description": "at all"}}, "/inputSchema/not"),
        ({"allOf": [{"type": "object"}, {"enum": []}]}, "/inputSchema/allOf/1/enum"),
        ({"allOf": [{"type": "object"}, False]}, "/inputSchema/allOf/1"),
        ({"allOf": [{"not": {}}]}, "/inputSchema/allOf/0/not"),
        ({"type": "string", "const": 3}, "/inputSchema/const"),
        ({"type": ["string", "null"], "const": True}, "/inputSchema/const"),
        ({"type": "integer", "enum": ["1", 2.5, None]}, "/inputSchema/enum"),
    ],
)
def test_a_schema_no_value_can_match_is_refused_at_its_keyword(schema: Any, pointer: str) -> None:
    assert _problems(schema) == [(pointer, "unsatisfiable_schema")]


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        (
            {
                "type": "object",
                "required": ["age"],
                "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 3}},
            },
            "/inputSchema/properties/age/minimum",
        ),
        (
            {"allOf": [{"required": ["p"], "properties": {"p": {"enum": []}}}]},
            "/inputSchema/allOf/0/properties/p/enum",
        ),
        ({"anyOf": [{"enum": []}, False, {"not": {}}]}, "/inputSchema/anyOf"),
        ({"oneOf": [{"type": "string", "minLength": 2, "maxLength": 1}]}, "/inputSchema/oneOf"),
        (
            {
                "required": ["p"],
                "properties": {
                    "p": {"type": "object", "required": ["q"], "properties": {"q": False}}
                },
            },
            "/inputSchema/properties/p/required/0",
        ),
    ],
)
def test_nested_schemas_are_checked_too(schema: dict[str, Any], pointer: str) -> None:
    assert _problems(schema) == [(pointer, "unsatisfiable_schema")]


@pytest.mark.parametrize(
    "schema",
    [
        # Forbidding an optional property is what false and {"not": {}} are for.
        {"type": "object", "properties": {"legacy": False, "old": {"not": {}}}},
        {"type": "object", "additionalProperties": False, "properties": {"a": {}}},
        {"prefixItems": [{"type": "string"}], "items": False},
        # Equal inclusive bounds leave exactly one value; exclusive ones with room between.
        {"minimum": 2, "maximum": 2, "minLength": 3, "maxLength": 3},
        {"exclusiveMinimum": 1, "exclusiveMaximum": 1.5},
        {"minItems": 0, "maxItems": 0, "minProperties": 1, "maxProperties": 1},
        {"required": ["a", "b"], "maxProperties": 2},
        {"type": ["string", "null"], "const": None},
        {"type": "integer", "const": 1.0},
        {"type": "number", "enum": [True, "x", 3]},
        {"enum": [None]},
        # Bounds of one kind of value without a type limiting values to it: another kind
        # matches (a string matches {"minimum": 5, "maximum": 2}).
        {"minimum": 5, "maximum": 2},
        {"type": ["string", "null"], "minLength": 5, "maxLength": 2},
        {"required": ["a", "b", "c"], "maxProperties": 2},
        # Impossible schemas where they only narrow what is accepted (the review's cases).
        {"anyOf": [{"type": "string"}, {"type": "number", "minimum": 5, "maximum": 1}]},
        {"type": "object", "properties": {"legacy": {"enum": []}}},
        {"type": "object", "additionalProperties": {"enum": []}},
        {"patternProperties": {"^x": {"type": "string", "minLength": 2, "maxLength": 1}}},
        {"type": "array", "items": {"enum": []}},
        {"$defs": {"d": {"type": "object", "minProperties": 2, "maxProperties": 1}}},
        # A `not` that refuses something, and impossible schemas where they only change what
        # `not` and `if` accept.
        {"not": {"type": "null"}},
        {"not": {"enum": []}},
        {"if": {"enum": []}, "then": {"type": "string"}},
        {"not": {"$ref": "#/$defs/any"}, "$defs": {"any": {"type": "string"}}},
    ],
)
def test_schemas_some_value_matches_are_accepted(schema: dict[str, Any]) -> None:
    assert _problems(schema) == []


def test_every_impossible_part_is_reported_in_one_pass() -> None:
    schema = {
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"type": "string", "minLength": 9, "maxLength": 1},
            "b": {"type": "integer", "minimum": 10, "maximum": 0},
            "c": {"type": "integer", "minimum": 10, "maximum": 0},  # optional: left alone
        },
        "allOf": [{"enum": []}],
    }
    assert sorted(_problems(schema)) == [
        ("/inputSchema/allOf/0/enum", "unsatisfiable_schema"),
        ("/inputSchema/properties/a/minLength", "unsatisfiable_schema"),
        ("/inputSchema/properties/b/minimum", "unsatisfiable_schema"),
    ]


def test_the_message_says_why_and_what_to_change() -> None:
    [bounds] = _messages({"type": "string", "minLength": 5, "maxLength": 2})
    assert bounds == (
        "minLength 5 is greater than maxLength 2, so no string can match this schema: "
        "lower minLength or raise maxLength."
    )
    [required] = _messages({"required": ["a"], "properties": {"a": False}})
    assert '"a" is required' in required and "remove it from required" in required
    [const] = _messages({"type": "string", "const": 3})
    assert const == (
        'const 3 is not of type "string", so no value can match this schema: change const or type.'
    )
    assert all("\n" not in m for m in _messages({"not": {}, "enum": [], "minimum": 1}))
    [branches] = _messages({"anyOf": [{"enum": []}, False]})
    assert branches.startswith("every branch of anyOf refuses every value on its own")


def test_type_without_any_type_was_already_refused_by_the_meta_schema() -> None:
    assert _problems({"type": []}) == [("/inputSchema/type", "schema")]


def test_a_malformed_schema_is_left_to_the_meta_schema() -> None:
    # Bounds that are not numbers, a type name that does not exist: the contract reports
    # them (`schema`); this check must neither crash on them nor add to them.
    codes = {code for _, code in _problems({"minimum": "5", "maximum": 2, "type": "strng"})}
    assert codes == {"schema"}
    assert _problems({"minLength": True, "maxLength": 0}) == [("/inputSchema/minLength", "schema")]
