"""Parts of an `inputSchema` that no value can ever match (`unsatisfiable_schema`).

An inputSchema that refuses every input publishes a workflow none of whose runs can be
submitted; a required field whose schema refuses every value does the same. Either is a
mistake, never an intention, so it is refused when the workflow is published, at the keyword
to change. This is a bounded set of local checks, each comparing keywords of one sub-schema,
not a satisfiability solver, and it must never refuse a schema that some value matches. It
catches, in a schema every input must match:

- `"enum": []`;
- under a `type` that allows only the kind of value they bound, a lower bound above its upper
  bound: `minLength` > `maxLength` (strings), `minItems` > `maxItems` and `minContains` >
  `maxContains` (arrays), `minProperties` > `maxProperties` and more distinct `required` names
  than `maxProperties` (objects), and the tightest of `minimum`/`exclusiveMinimum` against the
  tightest of `maximum`/`exclusiveMaximum` (numbers; equal bounds when either is exclusive).
  Without such a `type` a value of another kind matches: `{"minLength": 5, "maxLength": 2}`
  accepts every number;
- a `const`, or every value of an `enum`, of a JSON type the sibling `type` does not allow;
- a schema that refuses everything (`false`, or `"not"` holding a schema that accepts
  everything: `{}`, `true`, only annotations).

The schemas every input must match are the inputSchema itself, each member of its `allOf`,
and the schema of each property its `required` lists, recursively; an `anyOf` or a `oneOf`
is refused when every one of its branches fails one of the checks above on its own keywords.
An impossible schema anywhere else only narrows what is accepted, and is often meant to: an
optional property's `false` forbids it, `"items": {"enum": []}` allows only the empty array,
`additionalProperties`/`patternProperties` forbid names, `then`/`else`/`not`/`if` change what
applies. Not caught either: anything that needs a `$ref` followed, bounds that leave room only
for non-integers under `"type": "integer"`, `multipleOf`, `pattern` or `format` against other
keywords, and a `const` or `enum` value against bounds or `pattern`. `"type": []` is refused by
the draft 2020-12 meta-schema already. Each sub-schema is visited once, and each check is
linear in the keywords it reads, so the cost follows the document's size (bounded by
`max_subschemas` beforehand).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from jsonschema import Draft202012Validator

from engine.validation.common import Code, pointer, quoted_list, show
from schemas.errors import Problem

Path = tuple[str | int, ...]

_ANNOTATIONS = frozenset(
    {
        "$comment",
        "$id",
        "$anchor",
        "$schema",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
"""Keywords that assert nothing: a schema holding only these accepts every value. `format` is
not among them: it would assert with a format checker, and a check here must never refuse a
schema that some value matches."""


@dataclass(frozen=True)
class _Pair:
    """A lower bound and the upper bound it must not exceed, on one kind of value."""

    low: str
    high: str
    noun: str
    """What the bounds constrain, as the message names it (`string`, `array`, …), and the
    JSON type a sibling `type` must limit values to for the bounds to refuse every value."""
    fix: str


_PAIRS = (
    _Pair("minLength", "maxLength", "string", "lower minLength or raise maxLength"),
    _Pair("minItems", "maxItems", "array", "lower minItems or raise maxItems"),
    _Pair("minProperties", "maxProperties", "object", "lower minProperties or raise maxProperties"),
    _Pair("minContains", "maxContains", "array", "lower minContains or raise maxContains"),
)

_NUMBERS = frozenset({"number", "integer"})

_TYPES = Draft202012Validator.TYPE_CHECKER
_TYPE_NAMES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def unsatisfiable_problems(schema: Any, at: Path, base: str) -> list[Problem]:
    """A problem for every part of `schema` (an inputSchema found at `base` + `at`) that no
    value can match, as the module's docstring lists them."""
    problems: list[Problem] = []
    if _refuses_all(schema):
        where = (*at, "not") if isinstance(schema, dict) else at
        problems.append(_problem(where, base, _refuses_all_message(schema, "the inputSchema")))
    stack: list[tuple[Path, Any]] = [(at, schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        problems.extend(_problem(where, base, text) for where, text in _node_problems(path, node))
        problems.extend(_problem(where, base, text) for where, text in _branch_problems(path, node))
        stack.extend(_musts(path, node))
    return problems


def _problem(where: Path, base: str, message: str) -> Problem:
    return Problem(base + pointer(*where), message, Code.UNSATISFIABLE_SCHEMA)


def _musts(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, Any]]:
    """The sub-schemas of `node` every value it accepts matches too: its `allOf` members,
    and the schemas of the properties its `required` lists."""
    allof = node.get("allOf")
    yield from (
        ((*path, "allOf", i), v) for i, v in enumerate(allof if isinstance(allof, list) else [])
    )
    properties, required = node.get("properties"), node.get("required")
    if isinstance(properties, dict) and isinstance(required, list):
        for name in dict.fromkeys(n for n in required if isinstance(n, str) and n in properties):
            yield (*path, "properties", name), properties[name]


def _branch_problems(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """An `anyOf` or `oneOf` none of whose branches any value can match."""
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches and all(map(_impossible, branches)):
            message = (
                f"every branch of {key} refuses every value on its own, so no value can "
                f"match this schema: fix a branch (each is refused for the reasons above)."
            )
            yield (*path, key), message


def _impossible(schema: Any) -> bool:
    """Whether `schema` fails one of the checks on its own keywords."""
    if _refuses_all(schema):
        return True
    return isinstance(schema, dict) and next(_node_problems((), schema), None) is not None


def _node_problems(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """(where, message) for each impossible combination of `node`'s own keywords."""
    if node.get("enum") == []:
        message = (
            "enum is empty, so no value can match this schema: list the values it accepts, "
            "or remove enum."
        )
        yield (*path, "enum"), message
    for pair in _PAIRS:
        low, high = node.get(pair.low), node.get(pair.high)
        if not _only(node, {pair.noun}):
            continue  # a value of another kind matches whatever these bounds say
        if _is_number(low) and _is_number(high) and low > high:
            message = (
                f"{pair.low} {low} is greater than {pair.high} {high}, so no {pair.noun} can "
                f"match this schema: {pair.fix}."
            )
            yield (*path, pair.low), message
    yield from _range_problems(path, node)
    yield from _required_problems(path, node)
    yield from _type_problems(path, node)
    allof = node.get("allOf")
    for index, member in enumerate(allof if isinstance(allof, list) else []):
        if _refuses_all(member):
            where = (*path, "allOf", index, *(("not",) if isinstance(member, dict) else ()))
            yield where, _refuses_all_message(member, f"allOf[{index}]")


def _range_problems(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """The tightest lower bound of a number against the tightest upper one."""
    if not _only(node, _NUMBERS):
        return
    lows = [k for k in ("minimum", "exclusiveMinimum") if _is_number(node.get(k))]
    highs = [k for k in ("maximum", "exclusiveMaximum") if _is_number(node.get(k))]
    if not lows or not highs:
        return
    # At equal values the exclusive bound is the tighter one: it is listed last, and max/min
    # keep the first of equals, hence the reversed order for the lower bound.
    low = max(reversed(lows), key=lambda k: node[k])
    high = min(reversed(highs), key=lambda k: node[k])
    low_value, high_value = node[low], node[high]
    exclusive = low.startswith("exclusive") or high.startswith("exclusive")
    if low_value > high_value:
        why = f"{low} {low_value} is greater than {high} {high_value}"
    elif low_value == high_value and exclusive:
        why = f"{low} {low_value} and {high} {high_value} leave nothing between them"
    else:
        return
    yield (*path, low), f"{why}, so no number can match this schema: lower {low} or raise {high}."


def _required_problems(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    required = node.get("required")
    if not isinstance(required, list):
        return
    names = [name for name in required if isinstance(name, str)]
    most = node.get("maxProperties")
    if _only(node, {"object"}) and _is_number(most) and len(set(names)) > most:
        message = (
            f"required lists {len(set(names))} properties but maxProperties is {most}, so no "
            "object can match this schema: raise maxProperties or require fewer properties."
        )
        yield (*path, "required"), message
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return
    for index, name in enumerate(required):
        if isinstance(name, str) and _refuses_all(properties.get(name, True)):
            message = (
                f"{show(name)} is required, but its schema (properties/{name}) accepts no "
                "value, so no object can match this schema: remove it from required, or give "
                "it a schema its values match."
            )
            yield (*path, "required", index), message


def _type_problems(path: Path, node: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """A `const`, or every value of an `enum`, that the sibling `type` refuses."""
    allowed = _allowed_types(node.get("type"))
    if allowed is None:
        return
    types = quoted_list(allowed).replace(" and ", " or ")
    if "const" in node and not _of_type(node["const"], allowed):
        message = (
            f"const {show(node['const'])} is not of type {types}, so no value can match this "
            "schema: change const or type."
        )
        yield (*path, "const"), message
    values = node.get("enum")
    if isinstance(values, list) and values and not any(_of_type(v, allowed) for v in values):
        message = (
            f"No value of enum is of type {types}, so no value can match this schema: change "
            "the values of enum or type."
        )
        yield (*path, "enum"), message


def _allowed_types(value: Any) -> list[str] | None:
    """The type names `value` (a `type` keyword) allows; None when it is absent or malformed
    (the meta-schema reports a malformed one)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        return None
    if not all(isinstance(n, str) and n in _TYPE_NAMES for n in names):
        return None
    return names


def _only(node: dict[str, Any], kinds: set[str] | frozenset[str]) -> bool:
    """Whether `node`'s `type` limits its values to `kinds`."""
    allowed = _allowed_types(node.get("type"))
    return allowed is not None and set(allowed) <= kinds


def _of_type(value: Any, types: list[str]) -> bool:
    return any(_TYPES.is_type(value, name) for name in types)


def _refuses_all(schema: Any) -> bool:
    """`false`, or a schema with a `not` that accepts everything (`{}`, `true`, annotations
    only): a schema that refuses every value whatever its other keywords say."""
    if schema is False:
        return True
    if not isinstance(schema, dict) or "not" not in schema:
        return False
    inner = schema["not"]
    return inner is True or (isinstance(inner, dict) and set(inner) <= _ANNOTATIONS)


def _refuses_all_message(schema: Any, subject: str) -> str:
    if schema is False:
        return (
            f"{subject} is false, which no value matches, so nothing can match this schema: "
            "remove it."
        )
    return (
        f"not holds a schema that accepts every value, so {subject} refuses every value: "
        "remove not, or put inside it the schema of the values to refuse."
    )


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
