"""`{{ }}` expressions: the template language (schemas.expressions) and what validation checks."""

from __future__ import annotations

import json
import re
from typing import Any

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.validation import parse_document
from schemas.errors import DefinitionError
from schemas.expressions import (
    ExpressionError,
    compile_template,
    expression_spans,
    expressions_in,
    render,
    root_paths,
    where_path_stops,
)

CONTEXT = {
    "input": {"n": 3, "name": "Ada", "tags": ["a", "b"]},
    "vertices": {"fetch": {"output": {"status": 200, "body": {"items": [{"id": 1}]}}}},
    "run": {"id": "r1", "tenantId": "t1"},
    "item": {"id": 7},
    "index": 2,
}

# ── the template language ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ input.n }}", 3),
        ("{{input.tags}}", ["a", "b"]),
        ("{{ vertices.fetch.output.body }}", {"items": [{"id": 1}]}),
        ("{{ input.missing }}", None),
        ("n={{ input.n }}", "n=3"),
        ("{{ input.name }}-{{ index }}", "Ada-2"),
        ("tags: {{ input.tags }}", 'tags: ["a","b"]'),
        ("[{{ input.missing }}]", "[]"),
        ("no expression", "no expression"),
    ],
)
def test_render_keeps_the_type_of_a_whole_expression_and_formats_otherwise(
    template: str, expected: Any
) -> None:
    assert render(template, CONTEXT) == expected


def test_render_walks_objects_and_lists_but_not_keys() -> None:
    value = {"{{ input.n }}": ["{{ item.id }}", 1, None], "b": {"c": "#{{ run.id }}"}}
    assert render(value, CONTEXT) == {"{{ input.n }}": [7, 1, None], "b": {"c": "#r1"}}


@given(st.text(alphabet="{} a}", max_size=24))
def test_expressions_are_found_where_the_regex_of_the_language_finds_them(text: str) -> None:
    # `{{(.*?)}}` (dotall) defines where an expression is; the finder reads it with two
    # str.find a match, where the regex rescanned the text from every unmatched "{{".
    regex = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
    spans = [(m.start(), m.end(), m.group(1).strip()) for m in regex.finditer(text)]
    assert expression_spans(text) == spans
    assert expressions_in(text) == [source for _, _, source in spans]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    context=st.dictionaries(st.sampled_from(["a", "b", "c"]), JSON_VALUES, max_size=3),
    path=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4),
    tail=st.sampled_from(["", "[0]", " | length(@)", "[*].a"]),
)
def test_a_field_chain_reads_what_jmespath_reads(
    context: dict[str, Any], path: list[str], tail: str
) -> None:
    """Chains of fields are walked without the interpreter (`Expression`), anything else goes
    through it: both must give JMESPath's own answer, errors included."""
    source = ".".join(path) + tail
    template = compile_template("{{ " + source + " }}")
    assert (template.parts[0].fields is None) == bool(tail)  # type: ignore[union-attr]
    try:
        expected = jmespath.search(source, context)
    except jmespath.exceptions.JMESPathError:
        with pytest.raises(ExpressionError):
            template.render(context)
        return
    assert template.render(context) == expected


def test_compile_marks_exact_templates_and_caches_them() -> None:
    assert compile_template("{{ a }}").exact
    assert not compile_template(" {{ a }}").exact
    assert compile_template("{{ a }}") is compile_template("{{ a }}")


def test_render_placed_lets_the_caller_write_each_value_given_the_text_before_it() -> None:
    seen: list[tuple[str, str, bool]] = []

    def place(before: str, value: str, null: bool) -> str:
        seen.append((before, value, null))
        return f"<{value}>"

    template = compile_template("a{{ input.n }}b{{ input.tags }}{{ input.missing }}")
    assert template.render_placed(CONTEXT, place) == 'a<3>b<["a","b"]><>'
    # Formatted as `render` formats them; the text before includes earlier placed values; a
    # null is told from an empty string.
    assert seen == [
        ("a", "3", False),
        ("a<3>b", '["a","b"]', False),
        ('a<3>b<["a","b"]>', "", True),
    ]
    assert compile_template("{{ input.n }}").render_placed(CONTEXT, place) == "<3>"


@pytest.mark.parametrize("template", ["{{ a[ }}", "{{ }}", "{{ a.. }}", "x {{ ? }}"])
def test_compile_raises_expression_error(template: str) -> None:
    with pytest.raises(ExpressionError):
        compile_template(template)


def test_expression_helpers() -> None:
    assert expressions_in("a {{ x }} b {{y.z}}") == ["x", "y.z"]
    assert expressions_in("{{ x }}") == ["x"]
    assert expressions_in("{{ x") == []


@pytest.mark.parametrize(
    ("source", "paths"),
    [
        ("vertices.a.output[0].b", [["vertices", "a", "output"]]),
        ("@.vertices.a.output.counts", [["vertices", "a", "output", "counts"]]),
        ("length(vertices.a.output.outputs)", [["vertices", "a", "output", "outputs"]]),
        ("input.items[*].x", [["input", "items"]]),
        ("input.items[?x == index].y", [["input", "items"]]),  # `index` of each element
        ("sort_by(input.xs, &n) | [0].m", [["input", "xs"]]),
        # Reads of the whole context, which may reach any of it.
        ("@", [[]]),
        ("*.a.output.outputs", [[]]),
        ("@ | vertices.a.output.outputs", [[]]),
        ("to_array(@)[0].vertices", [[]]),
        ("{x: @}", [[]]),
    ],
)
def test_root_paths_name_what_an_expression_reads_from_the_root(
    source: str, paths: list[list[str]]
) -> None:
    (parsed,) = compile_template("{{ " + source + " }}").parts
    assert not isinstance(parsed, str)
    assert sorted(root_paths(parsed)) == sorted(paths)


# ── validation of expressions ───────────────────────────────────────────────────────────────

URL = "http://127.0.0.1:8765/x"


def chain(body: Any, **extra: dict[str, Any]) -> dict[str, Any]:
    """first → second (→ third), with `body` in the second vertex."""
    return {
        "name": "wf",
        "vertices": {
            "first": {"type": "GATEWAY", "config": {"url": URL}},
            "second": {
                "type": "GATEWAY",
                "dependsOn": ["first"],
                "config": {"url": URL, "body": body},
            },
            "third": {"type": "GATEWAY", "dependsOn": ["second"], "config": {"url": URL}},
            **extra,
        },
    }


def codes(document: Any) -> list[str]:
    try:
        parse_document(json.dumps(document))
    except DefinitionError as error:
        return [p.code for p in error.problems]
    return []


@pytest.mark.parametrize(
    "body",
    [
        "{{ vertices.first.output.body }}",
        "{{ vertices.first.output.body.items[?id > `2`].name }}",
        "{{ input.users[?vertices == 'x'].vertices }}",
        "{{ input.a | vertices }}",
        "{{ sort_by(input.people, &age) }}",
        "{{ length(vertices.first.output.body.items) }}",
        "{{ {a: input.a, b: run.id, c: run.tenantId} }}",
        "{{ [item, index] }}",
        "{{ vertices }}",
        "{{ vertices.*.output }}",
        "{{ input.a || 'fallback' }}",
        '{{ `{"json": true}` }}',
        "Total: {{ input.total }} {{ input.currency }}",
        "}} on its own is plain text",
    ],
)
def test_valid_expressions(body: str) -> None:
    assert codes(chain(body)) == []


def test_an_ancestor_two_steps_back_may_be_read() -> None:
    document = chain("x")
    document["vertices"]["third"]["config"]["body"] = "{{ vertices.first.output }}"
    assert codes(document) == []


def test_a_quoted_vertex_id_is_checked_like_any_other() -> None:
    document = chain('{{ vertices."no-such".output }}')
    assert codes(document) == ["unknown_vertex_reference"]
    document["vertices"]["first-step"] = document["vertices"].pop("first")
    document["vertices"]["second"]["dependsOn"] = ["first-step"]
    document["vertices"]["second"]["config"]["body"] = '{{ vertices."first-step".output }}'
    assert codes(document) == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{{ vertices.third.output }}", "not_ancestor"),
        ("{{ vertices.second.output }}", "not_ancestor"),
        ("{{ @.vertices.third.output }}", "not_ancestor"),
        ("{{ length(vertices.third.output) }}", "not_ancestor"),
        ("{{ input.a || vertices.third.output }}", "not_ancestor"),
        ("{{ vertices.nope.output }}", "unknown_vertex_reference"),
        ("{{ vertices.first.body }}", "unknown_context"),
        ("{{ inputs.a }}", "unknown_context"),
        ("{{ run.tenant }}", "unknown_context"),
        ("{{ a[ }}", "expression_syntax"),
        ("{{ }}", "expression_syntax"),
        ("{{ `not json` }}", "expression_syntax"),
        ("{{ " + "(" * 5000 + "a" + ")" * 5000 + " }}", "expression_syntax"),
        ("open {{ input.a", "unclosed_expression"),
        ("{{ lenght(input.a) }}", "unknown_function"),
        ("{{ sort_by(input.xs, &lenght(@)) }}", "unknown_function"),
        ("{{ input.xs[?startswith(@, 'a')] }}", "unknown_function"),
        ("{{ length(input.a, input.b) }}", "function_arguments"),
        ("{{ merge() }}", "function_arguments"),
        ("{{ join(',') }}", "function_arguments"),
    ],
)
def test_invalid_expressions(body: str, code: str) -> None:
    assert codes(chain({"nested": [body]})) == [code]


def test_every_broken_expression_in_one_string_is_reported() -> None:
    assert codes(chain("{{ a[ }} and {{ b.. }} and {{ fine }}")) == ["expression_syntax"] * 2


def test_messages_quote_the_expression_and_say_what_to_do() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(chain("{{ vertices.third.output.x }}")))
    [problem] = caught.value.problems
    assert problem.pointer == "/vertices/second/config/body"
    assert problem.message == (
        'The expression {{ vertices.third.output.x }} reads vertices.third, but "third" is not '
        'an ancestor of "second", so its output may not exist yet; add "third" to dependsOn of '
        '"second" (directly or through another vertex).'
    )


def problem(body: Any) -> tuple[str, str, str]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(chain(body)))
    [found] = caught.value.problems
    return found.pointer, found.code, found.message


def test_an_unknown_function_is_named_with_the_closest_one() -> None:
    assert problem("{{ lenght(input.x) }}") == (
        "/vertices/second/config/body",
        "unknown_function",
        "The expression {{ lenght(input.x) }} calls lenght(), which is not a JMESPath built-in "
        '(the engine adds no functions). Did you mean "length"?',
    )
    _, _, message = problem("{{ sortby(input.x, &a) }}")
    assert message.endswith('Did you mean "sort_by" or "sort"?')
    # lower() is no slip for floor(): JMESPath has no such function, so no guess.
    _, _, message = problem("{{ lower(input.x) }}")
    assert "floor" not in message.split("built-ins are")[0]
    assert message.startswith(
        "The expression {{ lower(input.x) }} calls lower(), which is not a JMESPath built-in"
    )
    _, _, message = problem("{{ frobnicate(input.x) }}")
    assert message.endswith(
        "The built-ins are abs, avg, ceil, contains, ends_with, floor, "
        "join, keys, length, map, max, max_by, merge, min, min_by, not_null, "
        "reverse, sort, sort_by, starts_with, sum, to_array, to_number, "
        "to_string, type, values."
    )


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "{{ input.lines[?qty > 1].sku }}",
            "numbers are written in backticks (`1`): write {{ input.lines[?qty > `1`].sku }}.",
        ),
        (
            "{{ input.lines[?`0` < qty && qty <= 2.5] }}",
            "(`2.5`): write {{ input.lines[?`0` < qty && qty <= `2.5`] }}.",
        ),
        ("{{ input.xs[?n == -1] }}", "(`-1`): write {{ input.xs[?n == `-1`] }}."),
        ("{{ input.xs[?1 <= n] }}", "(`1`): write {{ input.xs[?`1` <= n] }}."),
        # a default, and a value chosen by a condition
        ("{{ input.status || 200 }}", "(`200`): write {{ input.status || `200` }}."),
        (
            "{{ input.fail && 500 || 200 }}",
            "(`500`): write {{ input.fail && `500` || `200` }}.",
        ),
    ],
)
def test_a_bare_number_in_a_comparison_gets_its_backticks(body: str, said: str) -> None:
    _, code, message = problem(body)
    assert code == "expression_syntax"
    assert message.endswith(said)


@pytest.mark.parametrize(
    "body",
    ["{{ input.a + input.b }}", "{{ input.a - 1 }}", "{{ input.a * 2 }}", "{{ input.a / 2 }}"],
)
def test_arithmetic_is_said_to_be_missing_from_jmespath(body: str) -> None:
    _, code, message = problem(body)
    assert code == "expression_syntax"
    assert "; JMESPath has no arithmetic (+, -, *, /): its only numeric functions are" in message


def test_other_syntax_errors_get_no_number_or_arithmetic_hint() -> None:
    _, _, message = problem("{{ input.lines[.sku }}")
    assert "backticks" not in message and "arithmetic" not in message
    _, _, message = problem("{{ input.lines['a' == `1` }}")
    assert "backticks" not in message and "arithmetic" not in message


def test_a_wrong_argument_count_shows_the_signature() -> None:
    _, code, message = problem("{{ length(input.a, input.b) }}")
    assert code == "function_arguments"
    assert message == (
        "The expression {{ length(input.a, input.b) }} calls length() with 2 arguments; it "
        "takes 1 argument: length(string|array|object)."
    )
    _, _, message = problem("{{ not_null() }}")
    assert message.endswith("it takes at least 1 argument: not_null(any, …).")


@pytest.mark.parametrize(
    "body",
    [
        "{{ not_null(input.a, input.b, 'x') }}",
        "{{ merge(input.a, input.b, input.c) }}",
        "{{ max_by(input.xs, &n).name }}",
        "{{ map(&to_string(@), input.xs) }}",
        "{{ ends_with(input.s, 'x') && starts_with(input.s, 'y') }}",
    ],
)
def test_functions_called_as_their_signature_says_are_accepted(body: str) -> None:
    assert codes(chain(body)) == []


def hyphenated(body: str) -> dict[str, Any]:
    """`chain(body)` with its first vertex renamed "paid-orders"."""
    document = chain(body)
    document["vertices"]["paid-orders"] = document["vertices"].pop("first")
    document["vertices"]["second"]["dependsOn"] = ["paid-orders"]
    return document


def only_problem(document: Any) -> tuple[str, str]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    [found] = caught.value.problems
    return found.code, found.message


@pytest.mark.parametrize(
    ("body", "hint"),
    [
        (
            "{{ vertices.paid-orders.output.body }}",
            "Unknown token '-' at character 14; a name with \"-\" must be in double quotes: "
            'write {{ vertices."paid-orders".output.body }}.',
        ),
        (
            "{{ input.order-id }}",
            'a name with "-" must be in double quotes: write {{ input."order-id" }}.',
        ),
        (  # no vertex has that id: how to quote, not a corrected expression
            "{{ vertices.paid-ordrs.output }}",
            'a name with "-" must be in double quotes, as in "paid-ordrs".',
        ),
        (
            "{{ vertices.a-1.output }}",
            'Unexpected token: -1 at character 11; a name with "-" must be in double quotes, '
            'as in "a-1".',
        ),
    ],
)
def test_a_name_with_a_hyphen_gets_how_to_quote_it(body: str, hint: str) -> None:
    code, message = only_problem(hyphenated(body))
    assert code == "expression_syntax"
    assert message.startswith(f"The expression {body} does not compile: ")
    assert message.endswith(hint)


def test_a_syntax_error_without_a_hyphenated_name_gets_no_quoting_hint() -> None:
    _, message = only_problem(hyphenated("{{ 'paid-orders' }} {{ vertices[ }}"))
    assert message == "The expression {{ vertices[ }} does not compile: it ends too early."


def test_a_secret_name_with_a_hyphen_gets_the_naming_rule() -> None:
    document = chain("x")
    document["vertices"]["second"]["config"]["headers"] = {"X": "{{ secrets.crm-token }}"}
    assert only_problem(document) == (
        "invalid_secret_reference",
        'The expression {{ secrets.crm-token }} names the secret "crm-token", which is not a '
        "secret name: a name is 1 to 128 letters, digits and underscores, not starting with a "
        "digit (e.g. CRM_TOKEN); store it as CRM_TOKEN and write {{ secrets.CRM_TOKEN }}.",
    )


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            '{{ vertices."paid-orders".outputs.body }}',
            "unknown_context",
            'The expression {{ vertices."paid-orders".outputs.body }} reads '
            'vertices."paid-orders".outputs; a vertex\'s result is under '
            'vertices."paid-orders".output (did you mean vertices."paid-orders".output.body?).',
        ),
        (
            '{{ vertices."paid-orders".body }}',
            "unknown_context",
            'The expression {{ vertices."paid-orders".body }} reads vertices."paid-orders".body; '
            'a vertex\'s result is under vertices."paid-orders".output (e.g. '
            'vertices."paid-orders".output.body).',
        ),
        (
            '{{ vertices."paid-ordrs".output }}',
            "unknown_vertex_reference",
            'The expression {{ vertices."paid-ordrs".output }} reads vertices."paid-ordrs", but '
            'there is no vertex "paid-ordrs". Did you mean "paid-orders"?',
        ),
    ],
)
def test_suggestions_quote_the_ids_that_need_it(body: str, code: str, message: str) -> None:
    assert only_problem(hyphenated(body)) == (code, message)


CLOSED = {
    "type": "object",
    "properties": {
        "customerId": {"type": "string"},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "additionalProperties": False,
        },
        "notes": {"type": "object"},
    },
    "additionalProperties": False,
}


def with_input_schema(body: str, schema: Any) -> dict[str, Any]:
    return {**chain(body), "inputSchema": schema}


def test_a_misspelt_input_field_of_a_closed_input_schema_is_named() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(with_input_schema("{{ input.custmerId }}", CLOSED)))
    [found] = caught.value.problems
    assert (found.pointer, found.code, found.message) == (
        "/vertices/second/config/body",
        "unknown_input_field",
        "The expression {{ input.custmerId }} reads input.custmerId, but the inputSchema allows "
        'only "customerId", "address" and "notes" (additionalProperties is false), so it is '
        'always null. Did you mean "customerId"?',
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{{ input.customerId }}", []),
        ("{{ input }}", []),
        ("{{ input.address.city }}", []),
        ("{{ input.notes.anything }}", []),  # notes is not closed
        ("{{ input.customerId.deeper }}", []),  # a string's fields: not the schema's concern
        ("{{ input.xs[?customerIdd] }}", ["unknown_input_field"]),  # `xs` is unknown
        ("{{ input.address.cty }}", ["unknown_input_field"]),
        ('{{ input."customer-id" }}', ["unknown_input_field"]),
        ("{{ length(input.custmerId) }}", ["unknown_input_field"]),
    ],
)
def test_input_reads_are_checked_against_a_closed_input_schema(
    body: str, expected: list[str]
) -> None:
    assert codes(with_input_schema(body, CLOSED)) == expected


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"customerId": {}}},
        {"type": "object", "properties": {"customerId": {}}, "additionalProperties": True},
        {"properties": {"a": {}}, "patternProperties": {"^c": {}}, "additionalProperties": False},
        {"type": "object", "additionalProperties": {"type": "string"}},
    ],
)
def test_an_open_input_schema_lets_any_input_name_through(schema: dict[str, Any]) -> None:
    assert codes(with_input_schema("{{ input.custmerId }}", schema)) == []


def test_a_closed_input_schema_without_properties_allows_no_names() -> None:
    schema = {"type": "object", "additionalProperties": False}
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(with_input_schema("{{ input.a }}", schema)))
    assert "the inputSchema allows no names" in caught.value.problems[0].message


def spawner_document(items: Any, child_input: Any = None) -> list[dict[str, Any]]:
    config: dict[str, Any] = {"items": items, "workflow": "child"}
    if child_input is not None:
        config["input"] = child_input
    parent = {
        "name": "parent",
        "vertices": {
            "collect": {"type": "GATEWAY", "config": {"url": URL}},
            "fan": {"type": "SPAWNER", "dependsOn": ["collect"], "config": config},
        },
    }
    child = {
        "name": "child",
        "vertices": {
            "c": {"type": "GATEWAY", "config": {"url": URL + "/{{ item.id }}/{{ index }}"}}
        },
    }
    return [parent, child]


def test_item_and_index_belong_in_a_spawners_input_and_in_child_workflows() -> None:
    document = spawner_document(
        "{{ vertices.collect.output.body.items }}", {"id": "{{ item.id }}", "n": "{{ index }}"}
    )
    assert codes(document) == []


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ("{{ item.children }}", ["item_in_items"]),
        ("{{ input.lists[index] }}", ["expression_syntax"]),
        ("{{ [index] }}", ["item_in_items"]),
        (
            "{{ vertices.collect.output.body.a }}{{ vertices.collect.output.body.b }}",
            ["items_not_expression"],
        ),
        (" {{ vertices.collect.output.body.a }}", ["schema"]),
        (["{{ item }}"], ["item_in_items"]),
        ([1, "{{ input.x }}"], []),
    ],
)
def test_a_spawners_items(items: Any, expected: list[str]) -> None:
    assert codes(spawner_document(items)) == expected


# Strings from the JMESPath alphabet inside {{ }}: the validator must never crash on them.
_jmespath_text = st.text(
    alphabet=st.sampled_from(list("abvertices.[]{}()*?@&|!=<>'\"`,:-0123 \\$")), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(_jmespath_text)
def test_arbitrary_expression_text_gives_problems_not_crashes(source: str) -> None:
    codes(chain("{{ " + source + " }}"))


@pytest.mark.parametrize(
    ("text", "context", "said"),
    [
        ("{{ input.a.b }}", {"input": {"a": 3}}, "input.a is a number, not an object"),
        ("{{ input.a.b }}", {"input": {"a": [1]}}, "input.a is an array, not an object"),
        (
            "{{ input.x }}",
            {"input": {"b": 1, "a": 2}},
            "input has no field 'x'; its fields are: a, b",
        ),
        (
            "{{ nothing }}",
            {"input": {}},
            "the context has no field 'nothing'; its fields are: input",
        ),
        ("{{ input.a }}", {"input": {"a": None}}, None),  # the value itself is null
        ("{{ length(input.a) }}", {"input": {}}, None),  # not a chain of fields
        ("id-{{ input.a }}", {"input": {}}, None),  # not one whole expression
    ],
)
def test_where_a_chain_of_fields_stops(
    text: str, context: dict[str, Any], said: str | None
) -> None:
    assert where_path_stops(text, context) == said


def test_a_misspelt_dependency_is_named_where_an_expression_reads_past_it() -> None:
    """The tour: dependsOn ["colect"] where three expressions read vertices.collect gave one
    unknown_dependency and three not_ancestor problems each saying to add "collect" to
    dependsOn, which would leave the typo there. Each says the typo to fix instead, found
    on the vertex or an ancestor of it."""
    document = chain("{{ vertices.first.output }}")
    document["vertices"]["second"]["dependsOn"] = ["frist"]
    document["vertices"]["third"]["config"]["body"] = "{{ vertices.first.output }}"
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    found = sorted((p.pointer, p.code, p.message) for p in caught.value.problems)
    assert [(pointer, code) for pointer, code, _ in found] == [
        ("/vertices/second/config/body", "not_ancestor"),
        ("/vertices/second/dependsOn/0", "unknown_dependency"),
        ("/vertices/third/config/body", "not_ancestor"),
    ]
    assert found[0][2] == (
        'The expression {{ vertices.first.output }} reads vertices.first, but "first" is not '
        'an ancestor of "second": dependsOn of "second" names "frist", which is no vertex; '
        'write "first" there.'
    )
    # From "third", the typo is on its ancestor "second".
    assert 'dependsOn of "second" names "frist"' in found[2][2]
    # An entry close to nothing the expression reads leaves the usual advice.
    document["vertices"]["second"]["dependsOn"] = ["unrelated"]
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(document))
    [advice] = [p.message for p in caught.value.problems if p.code == "not_ancestor"][:1]
    assert 'add "first" to dependsOn of "second"' in advice
