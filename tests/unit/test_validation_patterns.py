"""inputSchema patterns are matched by RE2 in linear time; what RE2 cannot compile is refused
at publication with its pointer, so a submitted input can never hang the API or a worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.validation import check_documents, parse_document, validate_input
from engine.validation.patterns import UnsafePattern, compiled
from schemas.definitions import Workflow


def _workflow(input_schema: dict[str, Any]) -> str:
    return json.dumps(
        {
            "name": "patterned",
            "inputSchema": input_schema,
            "vertices": {"a": {"type": "GATEWAY", "config": {"url": "https://example.com/"}}},
        }
    )


def _published(input_schema: dict[str, Any]) -> Workflow:
    return parse_document(_workflow(input_schema))[0]


EVIL = "^(a+)+$"
"""Exponential on Python's `re` for "aaa…a!": 30 characters take minutes."""


def test_a_catastrophic_pattern_answers_at_once_on_a_hostile_input() -> None:
    workflow = _published(
        {"type": "object", "properties": {"name": {"type": "string", "pattern": EVIL}}}
    )
    hostile = {"name": "a" * 100_000 + "!"}
    # With Python's `re` this call would not return within the test's timeout.
    problems = validate_input(workflow, hostile)
    assert [p.pointer for p in problems] == ["/name"]
    assert validate_input(workflow, {"name": "a" * 100_000}) == []


def test_pattern_properties_are_matched_by_re2_too() -> None:
    workflow = _published(
        {
            "type": "object",
            "patternProperties": {EVIL: {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    assert validate_input(workflow, {"aaaa": 1}) == []
    assert [p.pointer for p in validate_input(workflow, {"aaaa": "x"})] == ["/aaaa"]
    # additionalProperties matches the names against the patterns too: in RE2, at once.
    hostile = "a" * 50_000 + "!"
    problems = validate_input(workflow, {hostile: 1, "aa": 2})
    assert [(p.pointer, p.code) for p in problems] == [(f"/{hostile}", "unknown_field")]


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^x": {}},
        "allOf": [{"unevaluatedProperties": False}],
    }
    report = check_documents([("wf.json", _workflow(schema))])
    assert [(p.pointer, p.code) for p in report.problems] == [
        ("/inputSchema/allOf/0/unevaluatedProperties", "unsafe_pattern")
    ]
    alone = {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}
    assert check_documents([("wf.json", _workflow(alone))]).valid


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "string", "pattern": "^(?=.*\\d)\\w+$"}, "/inputSchema/pattern"),
        (
            {"type": "object", "properties": {"x": {"pattern": "(a)\\1"}}},
            "/inputSchema/properties/x/pattern",
        ),
        (
            {"type": "object", "patternProperties": {"^(?!tmp_)": {}}},
            "/inputSchema/patternProperties/^(?!tmp_)",
        ),
        ({"$defs": {"d": {"pattern": "(?<=a)b"}}}, "/inputSchema/$defs/d/pattern"),
        ({"pattern": "((a{100}){100}){100}"}, "/inputSchema/pattern"),  # too large to compile
    ],
)
def test_patterns_re2_cannot_match_are_refused_at_publication(
    schema: dict[str, Any], pointer: str
) -> None:
    report = check_documents([("wf.json", _workflow(schema))])
    assert [(p.pointer, p.code) for p in report.problems] == [(pointer, "unsafe_pattern")]
    assert "RE2" in report.problems[0].message


def test_patterns_in_data_keywords_are_not_schemas() -> None:
    schema = {"const": {"pattern": "(?=x)"}, "examples": [{"pattern": "(a)\\1"}]}
    assert check_documents([("wf.json", _workflow(schema))]).valid


def test_compiled_patterns_are_cached_and_refusals_explain() -> None:
    assert compiled("^x+$") is compiled("^x+$")
    with pytest.raises(UnsafePattern, match="invalid perl operator"):
        compiled("(?=a)")


def test_a_sub_schema_naming_its_dialect_is_matched_by_re2_too() -> None:
    # jsonschema gives a sub-schema with its own `$schema` its own validator class, whose
    # `pattern` is Python's `re`: 22 characters of input took 0.3 s, each more doubles it.
    dialect = "https://json-schema.org/draft/2020-12/schema"
    workflow = _published(
        {
            "type": "object",
            "properties": {
                "name": {"$schema": dialect, "type": "string", "pattern": EVIL},
                "alias": {"$ref": "#/$defs/alias"},
            },
            "$defs": {
                "alias": {"$schema": "http://json-schema.org/draft-07/schema#", "pattern": EVIL}
            },
        }
    )
    hostile = "a" * 100_000 + "!"
    problems = validate_input(workflow, {"name": hostile, "alias": hostile})
    assert [p.pointer for p in problems] == ["/alias", "/name"]


def test_an_input_off_the_authors_pattern_is_told_to_match_it() -> None:
    """An author's own pattern has no words of ours: the refusal quotes it as a rule to
    match ("must be a match for the pattern …" read as a noun phrase gone wrong)."""
    workflow = _published(
        {
            "type": "object",
            "properties": {"warehouseId": {"type": "string", "pattern": "^wh-[0-9]+$"}},
        }
    )
    [problem] = validate_input(workflow, {"warehouseId": "WH1"})
    assert problem.pointer == "/warehouseId"
    assert problem.message == 'warehouseId must match the pattern ^wh-[0-9]+$; got "WH1".'
