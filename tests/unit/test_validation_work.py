"""What validation costs is bounded by what a document or an input holds, never by a product
of the two or by the square of either (docs/security.md, 'Input limits').

Work is counted as Python function calls (cProfile), not seconds: the bound does not depend on
the machine or on what else it runs, and a regression of the re-crawl kind (every `$ref`
lookup crawling the whole root schema again) multiplies it.
"""

from __future__ import annotations

import cProfile
import json
import pstats
from collections.abc import Callable
from typing import Any

from engine.validation import check_documents, parse_document, validate_input
from engine.validation.schema import instance_problems
from schemas.definitions import Workflow


def calls(action: Callable[[], object]) -> int:
    """Python function calls `action` makes."""
    profile = cProfile.Profile()
    profile.runcall(action)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def document(input_schema: Any) -> str:
    return json.dumps(
        {
            "name": "x",
            "inputSchema": input_schema,
            "vertices": {"v": {"type": "GATEWAY", "config": {"url": "https://a.example/x"}}},
        }
    )


def published(input_schema: dict[str, Any]) -> Workflow:
    return parse_document(document(input_schema))[0]


def per_item(work: Callable[[int], object], small: int, large: int) -> float:
    """The calls each more item costs between `small` and `large` items (the fixed cost of a
    check left out)."""
    work(small)  # warm caches (the workflow schema's validator is built on first use)
    return (calls(lambda: work(large)) - calls(lambda: work(small))) / (large - small)


def test_each_sub_schema_of_an_input_schema_costs_a_bounded_amount_of_work() -> None:
    # Checked against the draft 2020-12 meta-schema, an empty sub-schema passes 8 `$ref` and
    # `$dynamicRef` lookups: about 1,100 calls. Each lookup used to crawl the whole workflow
    # schema again (about 5,500 calls a sub-schema, 3 ms: 3,000 of them held an API process
    # for 10 s).
    def check(n: int) -> None:
        report = check_documents([("d", document({"anyOf": [{}] * n}))])
        assert report.valid, report.problems

    assert per_item(check, 50, 250) < 2_000


def test_an_anchor_reference_costs_the_same_whatever_the_size_of_the_input_schema() -> None:
    # `"$ref": "#item"` resolves through the anchors of the input schema. A lookup that
    # missed them used to crawl the whole schema again, for every item of every input.
    def schema(extra_defs: int) -> dict[str, Any]:
        defs: dict[str, Any] = {f"d{i}": {"type": "string"} for i in range(extra_defs)}
        defs["item"] = {"$anchor": "item", "type": "integer"}
        return {"type": "array", "items": {"$ref": "#item"}, "$defs": defs}

    defs = 400
    small, large = published(schema(0)), published(schema(defs))
    items = list(range(200))
    assert validate_input(large, items) == []
    extra = calls(lambda: validate_input(large, items)) - calls(
        lambda: validate_input(small, items)
    )
    assert extra < 100 * defs  # the schema crawled once per check, not once per item


def test_a_versions_input_schema_is_compiled_once_for_all_its_inputs() -> None:
    # Building a validator crawls the whole schema (about 30 calls a sub-schema). A version's
    # schema is one object for the life of the store, so only its first check pays that: a
    # submission's check then costs what its input does, not what its schema holds.
    workflow = published({"type": "object", "properties": {f"p{i}": {} for i in range(500)}})
    assert validate_input(workflow, {}) == []
    assert calls(lambda: validate_input(workflow, {"p1": "a"})) < 1_000


def test_unique_items_costs_one_pass_whatever_the_items() -> None:
    # Objects do not sort, nor do numbers mixed with strings: jsonschema then compared every
    # item with every other one (5,000 objects: 12.5 million comparisons, 70 s).
    workflow = published({"type": "array", "uniqueItems": True})

    def check(n: int) -> None:
        assert validate_input(workflow, [{"id": i} for i in range(n)]) == []
        assert validate_input(workflow, [i if i % 2 else str(i) for i in range(n)]) == []

    assert per_item(check, 500, 2_500) < 100
    problems = validate_input(workflow, [{"id": 1}, 1, "1", True, {"id": 1.0}])
    assert [(p.pointer, p.code) for p in problems] == [("/4", "schema")]


def test_an_enum_costs_one_lookup_whatever_its_length() -> None:
    def schema(values: int) -> dict[str, Any]:
        # "code-0" last: jsonschema compared an item with every value before it.
        codes = [f"code-{i}" for i in reversed(range(values))]
        return {"type": "array", "items": {"enum": codes}}

    short, long = published(schema(10)), published(schema(1_000))
    items = ["code-0"] * 1_000
    assert validate_input(long, items) == []
    extra = calls(lambda: validate_input(long, items)) - calls(lambda: validate_input(short, items))
    assert extra < 10 * 1_000  # building the 1,000 keys once, not comparing them per item
    assert [p.pointer for p in validate_input(long, ["code-9", "code-1000"])] == ["/1"]


def test_an_input_too_costly_to_check_is_refused_with_one_problem() -> None:
    # Each level of this recursive schema re-evaluates the levels below it for
    # unevaluatedProperties: the work doubles with every level of the input's nesting.
    workflow = published(
        {
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "allOf": [{"properties": {"child": {"$ref": "#/$defs/node"}}}],
                    "unevaluatedProperties": False,
                }
            },
        }
    )
    shallow: dict[str, Any] = {}
    for _ in range(4):
        shallow = {"child": shallow}
    assert validate_input(workflow, shallow) == []
    deep: dict[str, Any] = {}
    for _ in range(40):
        deep = {"child": deep}
    [problem] = validate_input(workflow, deep)
    assert (problem.pointer, problem.code) == ("", "input")
    assert "too costly to check" in problem.message


def test_an_errors_message_costs_what_it_holds() -> None:
    # jsonschema writes the whole instance into most messages: 900 sub-schemas each refusing
    # a 270 KB array made 900 copies of it, 2.6 s, where the bound is about a second.
    large = list(range(40_000))
    for combined in ("allOf", "anyOf"):
        workflow = published({combined: [{"type": "string"}] * 900})
        [problem] = validate_input(workflow, large)
        assert "too costly to check" in problem.message, combined
    # One such error is worth its copy: reported as usual.
    [one] = validate_input(published({"type": "string"}), large)
    assert one.message == "The input must be a string, not an array."


CLOSED = {
    "type": "object",
    "additionalProperties": False,
    "properties": {f"field_{i}": {"type": "string"} for i in range(900)},
}
"""An input schema closed on 900 names alike enough that difflib compares each in full."""


def test_hints_for_unknown_input_names_are_bounded() -> None:
    # Each unknown name was compared with all 900 (about 30 ms each), and each message
    # listed all 900.
    workflow = published(CLOSED)

    def check(n: int) -> None:
        problems = validate_input(workflow, {f"fiel_{i}": "x" for i in range(n)})
        assert [p.code for p in problems] == ["unknown_field"] * n
        assert all(len(p.message) < 1_000 for p in problems)

    assert per_item(check, 100, 300) < 2_000


def test_each_missing_required_field_costs_one_problem() -> None:
    # jsonschema raises one `required` error per missing field, and each was worded with every
    # missing field of its object, duplicates dropped at the end: an input `{}` against 2,000
    # required fields took 39 s.
    def check(n: int) -> None:
        schema = {"type": "object", "required": [f"f{i}" for i in range(n)]}
        problems = instance_problems(schema, {}, "The input")
        assert [p.message for p in problems] == [
            f'The input is missing the required field "f{i}".' for i in range(n)
        ]

    assert per_item(check, 100, 300) < 200


class Counted(str):
    """A name whose comparisons, hashing and formatting are Python calls, so that `calls` sees
    work done once per allowed name (over plain strings a comprehension is one call)."""

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        return str.__hash__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


def test_an_unknown_input_name_costs_the_same_whatever_the_names_allowed() -> None:
    # Each unknown name was looked up in a list of the allowed names, quoted all of them for
    # its message and, past the hints' bound, still folded them all only to offer no hint:
    # 20,000 unknown names (a 249 KB input) against 1,000 allowed took 7.6 s.
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {Counted(f"field_{i}"): {"type": "string"} for i in range(900)},
    }

    def check(n: int) -> None:
        problems = instance_problems(schema, {f"x{i}": "x" for i in range(n)}, "The input")
        assert [p.code for p in problems] == ["unknown_field"] * n

    assert per_item(check, 100, 300) < 100


def test_a_value_outside_an_enum_costs_the_same_whatever_the_values_allowed() -> None:
    # Each such value's message turned every allowed value into text to show 20 of them: an
    # array of 2,000 against an enum of 100,000 values took 15 s.
    schema = {"type": "array", "items": {"enum": [Counted(f"code_{i}") for i in range(900)]}}

    def check(n: int) -> None:
        problems = instance_problems(schema, [f"q{i}" for i in range(n)], "The input")
        assert len(problems) == n
        assert problems[-1].message.endswith(f'"code_19" or 880 more; got "q{n - 1}".')

    assert per_item(check, 100, 300) < 400  # the 20 values shown included; 1,890 before


def test_hints_for_unknown_names_an_expression_reads_are_bounded() -> None:
    def check(n: int) -> None:
        body = [f"{{{{ input.fiel_{i} }}}}" for i in range(n)]
        text = json.dumps(
            {
                "name": "x",
                "inputSchema": CLOSED,
                "vertices": {
                    "v": {
                        "type": "GATEWAY",
                        "config": {"url": "https://a.example/x", "method": "POST", "body": body},
                    }
                },
            }
        )
        problems = check_documents([("d", text)]).problems
        assert [p.code for p in problems] == ["unknown_input_field"] * n
        assert all(len(p.message) < 1_000 for p in problems)

    assert per_item(check, 100, 300) < 5_000


def test_an_input_schema_over_the_sub_schema_limit_is_refused_before_it_is_checked() -> None:
    # The reproduction of the security review: 3,000 sub-schemas of 60 KB held an API process
    # for 6.6 s, every tenant's requests with it.
    text = document({"anyOf": [{"pattern": "^a$"}] * 3_000})
    [problem] = check_documents([("d", text)]).problems
    assert (problem.pointer, problem.code) == ("/inputSchema", "too_many_subschemas")
    assert "3,001 sub-schemas; the limit is 1,000" in problem.message
    # The meta-schema check never ran: a handful of calls per sub-schema counted, no more.
    assert calls(lambda: check_documents([("d", text)])) < 50 * 3_000


def test_the_sub_schema_limit_counts_every_schema_position_and_the_whole_document() -> None:
    # (`not` holds a schema that refuses something: `"not": {}` would refuse every input.)
    at_limit = {
        "not": {"type": "null"},
        "properties": {f"p{i}": {"items": True} for i in range(499)},
    }
    assert check_documents([("d", document(at_limit))]).valid
    # Booleans and values that are not schemas at all cost the meta-schema check as much.
    for over in ({"allOf": [True] * 1_000}, {"anyOf": [1] * 1_000}, {"$defs": {"a": at_limit}}):
        codes = [p.code for p in check_documents([("d", document(over))]).problems]
        assert codes == ["too_many_subschemas"], over
    # Values under other keywords are data, not schemas.
    data = {"enum": [{}] * 5_000, "default": {"anyOf": [{}] * 5_000}, "x-note": [{}] * 5_000}
    assert check_documents([("d", document(data))]).valid
    # In a list, the workflows' inputSchemas count together: the one that passes the limit.
    half: dict[str, Any] = {"anyOf": [{}] * 600}
    workflows = [json.loads(document(half)) for _ in range(2)]
    workflows[1]["name"] = "y"
    [problem] = check_documents([("d", json.dumps(workflows))]).problems
    assert (problem.pointer, problem.code) == ("/1/inputSchema", "too_many_subschemas")
    assert "which makes 1,202 in the document's inputSchemas" in problem.message


def gateway_document(body: Any) -> str:
    return json.dumps(
        {
            "name": "x",
            "vertices": {
                "v": {
                    "type": "GATEWAY",
                    "config": {"url": "https://a.example/x", "method": "POST", "body": body},
                }
            },
        }
    )


def test_expressions_over_the_limit_are_refused_before_they_are_parsed() -> None:
    [problem] = check_documents([("d", gateway_document(["{{ input.a }}"] * 10_001))]).problems
    assert (problem.pointer, problem.code) == ("/vertices/v/config", "too_many_expressions")
    assert check_documents([("d", gateway_document(["{{ input.a }}"] * 10_000))]).valid
    long = "{{ " + " || ".join(["input.a"] * 2_000) + " }}"
    [problem] = check_documents([("d", gateway_document({"text": long}))]).problems
    assert (problem.pointer, problem.code) == (
        "/vertices/v/config/body/text",
        "expression_too_long",
    )
    assert len(problem.message) < 300


def test_braces_without_an_end_are_found_in_one_pass() -> None:
    # The regex that found expressions scanned the rest of the text again from every "{{"
    # that had no "}}" after it: 80 KB of "{" took 64 s, this would take hours.
    for text in ("{{" * 200_000, "{{ input.a }}" + "{" * 400_000):
        problems = check_documents([("d", gateway_document(text))]).problems
        assert [p.code for p in problems] == ["unclosed_expression"]
