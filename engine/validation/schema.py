"""Phase 2 of validation: the JSON Schema contract, then the typed pydantic models.

Every `jsonschema` error becomes one `Problem` per offending spot, worded as one plain
sentence by JSON Schema keyword (`required`, `additionalProperties`, `type`, `enum`, ranges,
`pattern`, …) instead of jsonschema's raw text. Unknown fields point at the unknown field
itself; a missing field points at the object that lacks it (the field has no place in the
document yet).

The pydantic models mirror the schema, so once a workflow passes the schema, building its
`Workflow` should not fail; if it does (the two drifted), its errors are reported the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from jsonschema import exceptions as js_exceptions
from jsonschema.protocols import Validator
from pydantic import ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from engine.validation.common import (
    DATA_KEYWORDS,
    Code,
    bounded_hints,
    did_you_mean,
    pointer,
    quoted_list,
    show,
)
from engine.validation.json_text import json_kind
from engine.validation.patterns import UnsafePattern, compiled, input_validator, pattern_problems
from engine.validation.satisfiable import unsatisfiable_problems
from engine.validation.type_case import with_types_fixed
from schemas import loader
from schemas.definitions import Workflow
from schemas.errors import Problem
from schemas.linear_keywords import same_key
from schemas.schema_work import MAX_CHECK_WORK, TooMuchWork, at_most, spend

ITEMS_PATTERN = "^\\{\\{[\\s\\S]*\\}\\}$"
"""A SPAWNER's `items` when it is a string: one `{{ }}` expression and nothing around it."""

PATTERN_HELP: dict[str, tuple[str, str]] = {
    "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$": (
        "workflow name",
        "letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 "
        "characters",
    ),
    "^[A-Za-z_][A-Za-z0-9_-]{0,63}$": (
        "vertex id",
        "letters, digits, '_' and '-', starting with a letter or '_', at most 64 characters",
    ),
    "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$": (
        "HTTP header name",
        "letters, digits and !#$%&'*+.^_`|~- only (no spaces or colons)",
    ),
    "^(https?://[^\\s/\\\\?#][^/\\\\?#]*([/?#]|$)|\\{\\{)": (
        "URL",
        "an absolute http:// or https:// URL with no backslash before its path (RFC 3986 "
        "has none there, browsers read one as '/': write '/', or %5C in user:password@), or "
        "a string that starts with a {{ }} expression",
    ),
    ITEMS_PATTERN: (
        "items expression",
        "exactly one {{ }} expression that evaluates to a list, or a JSON array",
    ),
    "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}(@[1-9][0-9]{0,8})?$": (
        "child workflow reference",
        "a workflow name, optionally followed by @version (e.g. renew-subscription@3)",
    ),
}
"""How to explain each `pattern` of workflow.schema.json; a test keeps it complete."""

_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}

_RANGE_WORDS = {
    "minimum": "at least",
    "maximum": "at most",
    "exclusiveMinimum": "greater than",
    "exclusiveMaximum": "less than",
}


def schema_problems(data: Any) -> list[Problem]:
    """Every way `data` (a parsed workflow file) breaks workflow.schema.json."""
    problems: list[Problem] = []
    for error in loader.file_validator().iter_errors(data):
        problems.extend(_describe(error, None))
    fixed = with_types_fixed(data)
    if fixed is not None:
        # The config of a "gateway" is checked as a GATEWAY's, in this same pass.
        for error in loader.file_validator().iter_errors(fixed):
            problems.extend(_describe(error, None))
    return _once_each(problems)


def instance_problems(schema: dict[str, Any], data: Any, whole: str) -> list[Problem]:
    """Every way `data` breaks `schema` (a draft 2020-12 JSON Schema, already checked valid).

    `whole` names the instance in messages about its root (e.g. "The input").
    """
    problems: list[Problem] = []
    described: set[tuple[tuple[str | int, ...], int]] = set()
    try:
        with at_most(), bounded_hints():
            for error in _validator_of(schema).iter_errors(data):
                if error.validator == "required":
                    # jsonschema raises one `required` error per missing field, and `_missing`
                    # words every missing field of the object from the first: the others
                    # would only repeat it, M missing fields costing M x M.
                    key = (tuple(error.absolute_path), id(error.schema))
                    if key in described:
                        continue
                    described.add(key)
                problems.extend(_describe(error, whole))
    except (Unresolvable, UnsafePattern) as exc:  # refused at authoring time; a backstop
        problems.append(Problem("", f"The schema cannot be applied: {exc}.", Code.INPUT))
    except TooMuchWork:
        return [Problem("", _too_much_work(whole), Code.INPUT)]
    return _once_each(problems)


_VALIDATORS: dict[int, tuple[dict[str, Any], Validator]] = {}
"""The validator of each inputSchema checked, by `id` (the schema is kept with it, so no other
dict can take its id). Building one crawls the whole schema (`schemas.pinned_validator`):
measured 30 µs for a schema of two properties and 7 ms for one of 1,001 sub-schemas, where
checking an input costs 20-80 µs. A version's schema is one object for the life of the store
(`StoreCore.get_version` caches versions), so every submission of it, and every input a
deployment's warning checks, reuses the first one's validator."""
_VALIDATORS_KEPT = 1_024


def _validator_of(schema: dict[str, Any]) -> Validator:
    """`input_validator(schema)`, built once per schema object (see `_VALIDATORS`)."""
    kept = _VALIDATORS.get(id(schema))
    if kept is None or kept[0] is not schema:
        if len(_VALIDATORS) >= _VALIDATORS_KEPT:
            _VALIDATORS.clear()
        kept = (schema, input_validator(schema))
        _VALIDATORS[id(schema)] = kept
    return kept[1]


def _too_much_work(whole: str) -> str:
    return (
        f"{whole} is too costly to check against the inputSchema: it takes more than "
        f"{MAX_CHECK_WORK:,} steps (a recursive schema with unevaluatedProperties, for one, "
        "checks each level of nesting again for every level above it; many sub-schemas "
        "each refusing a large input, for another). Send a smaller or flatter input, or "
        "simplify the schema."
    )


def _once_each(problems: list[Problem]) -> list[Problem]:
    """`problems` in order, each once: jsonschema raises one `required` error per missing
    field, and each is described with every missing field of its object (`_missing`)."""
    return list(dict.fromkeys(problems))


def input_schema_problems(workflow: dict[str, Any], base: str) -> list[Problem]:
    """`$ref`s and patterns of a workflow's inputSchema that would fail when a run's input is
    checked (patterns: see `engine.validation.patterns`), and the parts of it no value can
    match (`engine.validation.satisfiable`).

    Only references inside the schema itself are allowed (SchemaBridge never fetches schemas
    over the network), and each must resolve. References below a nested `$id` are relative to
    that `$id` and are left to the meta-schema; one that resolves to nothing in the schema is
    never fetched either (`schemas.pinned_validator`): the input check reports it.
    """
    schema = workflow.get("inputSchema")
    if not isinstance(schema, dict):
        return []
    problems = pattern_problems(schema, ("inputSchema",), base)
    problems += unsatisfiable_problems(schema, ("inputSchema",), base)
    resolver = Registry().with_resource("", DRAFT202012.create_resource(schema)).resolver("")
    stack: list[tuple[tuple[str | int, ...], Any]] = [(("inputSchema",), schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))
        if not isinstance(node, dict) or (len(path) > 1 and isinstance(node.get("$id"), str)):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str):
            problem = _unresolvable(resolver, ref)
            if problem:
                problems.append(Problem(base + pointer(*path, "$ref"), problem, Code.SCHEMA))
        stack.extend(((*path, k), v) for k, v in node.items() if k not in DATA_KEYWORDS)
    return problems


def _unresolvable(resolver: Any, ref: str) -> str | None:
    if not ref.startswith("#"):
        return (
            f"$ref {show(ref)} points outside this schema; SchemaBridge does not fetch schemas, "
            "so put the definition under $defs and refer to it as #/$defs/<name>."
        )
    try:
        resolver.lookup(ref)
    except Unresolvable:
        return f"$ref {show(ref)} does not point at anything in this schema."
    return None


def _subject(path: Sequence[str | int], whole: str | None = None) -> str:
    """How a message names the value at `path`; `whole` names the root (None: a workflow file)."""
    if not path:
        return whole or "The document"
    last = path[-1]
    if isinstance(last, int):
        parent = path[-2] if len(path) > 1 else None
        if isinstance(parent, str):
            return f"{parent}[{last}]"
        return f"Item {last}" if whole else f"Workflow {last}"
    if len(path) > 1 and path[-2] == "vertices":
        return f'Vertex "{last}"'
    return last


def _object_name(error: js_exceptions.ValidationError, whole: str | None) -> str:
    path = list(error.absolute_path)
    if whole is not None:
        return _subject(path, whole)
    if len(path) > 1 and path[-2] == "vertices":
        return _subject(path)
    if not path:
        return "The workflow"
    if len(path) == 1 and isinstance(path[0], int):
        return f"Workflow {path[0]}"
    title = error.schema.get("title") if isinstance(error.schema, dict) else None
    return title if isinstance(title, str) else _subject(path)


def _describe(error: js_exceptions.ValidationError, whole: str | None) -> Iterator[Problem]:
    path = list(error.absolute_path)
    at = pointer(*path)
    keyword = error.validator
    if keyword == "required":
        yield from _missing(error, at, whole)
    elif keyword == "additionalProperties" and error.validator_value is False:
        yield from _unknown(error, path, whole)
    elif keyword in ("anyOf", "oneOf") and error.context:
        yield from _describe(js_exceptions.best_match(error.context), whole)
    elif keyword == "pattern" and "propertyNames" in error.schema_path:
        yield _bad_name(error, path)
    elif keyword == "uniqueItems" and isinstance(error.instance, list):
        yield from _repeated(error.instance, path, whole)
    else:
        yield Problem(at, _sentence(error, path, whole), Code.SCHEMA)


def _missing(error: js_exceptions.ValidationError, at: str, whole: str | None) -> Iterator[Problem]:
    if not isinstance(error.instance, dict) or not isinstance(error.validator_value, list):
        yield Problem(at, f"{error.message}.", Code.MISSING_FIELD)
        return
    owner = _object_name(error, whole)
    for name in error.validator_value:
        if name not in error.instance:
            yield Problem(
                at, f'{owner} is missing the required field "{name}".', Code.MISSING_FIELD
            )


def _unknown(
    error: js_exceptions.ValidationError, path: list[str | int], whole: str | None
) -> Iterator[Problem]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    allowed = list(schema.get("properties", {}))
    known = set(allowed)
    # Once per error, not once per unknown name: an input may hold thousands of them.
    listed = f" Allowed fields: {quoted_list(allowed)}."
    matchers = [compiled(p) for p in schema.get("patternProperties", {})]
    owner = _object_name(error, whole)
    instance = error.instance if isinstance(error.instance, dict) else {}
    spend(len(instance) * len(matchers))
    for key in instance:
        if key in known or any(m.search(key) for m in matchers):
            continue
        hint = did_you_mean(key, allowed) or listed
        message = f'Unknown field "{key}" in {_lower_first(owner)}.{hint}'
        yield Problem(pointer(*path, key), message, Code.UNKNOWN_FIELD)


def _lower_first(text: str) -> str:
    # "The workflow" → "the workflow"; titles such as "GATEWAY config" stay as they are.
    return "t" + text[1:] if text.startswith("The ") else text


def _bad_name(error: js_exceptions.ValidationError, path: list[str | int]) -> Problem:
    name = str(error.instance)
    noun, rule = PATTERN_HELP.get(str(error.validator_value), ("name", "a different name"))
    return Problem(
        pointer(*path, name), f"{show(name)} is not a valid {noun}: use {rule}.", Code.SCHEMA
    )


def _sentence(
    error: js_exceptions.ValidationError, path: list[str | int], whole: str | None
) -> str:
    keyword = str(error.validator)
    value = error.validator_value
    subject = _subject(path, whole)
    instance = error.instance
    if keyword == "type":
        return _type_sentence(subject, value, instance, path, whole)
    if keyword == "enum" and isinstance(value, list):
        # "GATEWY" or "gateway" for "GATEWAY": a close option, in any case.
        hint = (
            did_you_mean(instance, map(str, value), any_case=True)
            if isinstance(instance, str)
            else ""
        )
        # quoted_list writes each value shown as str(v) would, and only the 20 it shows.
        options = quoted_list(value).replace(" and ", " or ")
        return f"{subject} must be one of {options}; got {show(instance)}.{hint}"
    if keyword == "const":
        return f"{subject} must be {show(value)}."
    if keyword in _RANGE_WORDS:
        return f"{subject} must be {_RANGE_WORDS[keyword]} {value}; got {show(instance)}."
    if keyword == "format":
        name = {"regex": "regular expression"}.get(str(value), str(value))
        return f"{subject} must be a valid {name}; got {show(instance)}."
    if keyword == "pattern":
        known = PATTERN_HELP.get(str(value))
        # An author's own pattern (an inputSchema's) has no words of ours: it is quoted.
        rule = f"be {known[1]}" if known else f"match the pattern {value}"
        around = _around_hint(instance) if value == ITEMS_PATTERN else ""
        return f"{subject} must {rule}; got {show(instance)}.{around}"
    sized = _size_sentence(keyword, value, subject, instance, error.schema)
    if sized:
        return sized
    return f"{subject} is invalid: {error.message}."


def _type_sentence(
    subject: str, value: Any, instance: Any, path: list[str | int], whole: str | None
) -> str:
    if not path and whole is None:
        return (
            "The document must be a workflow (a JSON object) or a list of workflows, "
            f"not {json_kind(instance)}."
        )
    wanted = [value] if isinstance(value, str) else list(value)
    names = [_TYPE_NAMES.get(str(w), str(w)) for w in wanted]
    joined = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
    if wanted == ["array"] and not isinstance(instance, dict | list) and instance is not None:
        # `"successCodes": 200`: the one value, as the array it belongs in.
        return f"{subject} must be an array, e.g. {show([instance])}; got {json_kind(instance)}."
    return f"{subject} must be {joined}, not {json_kind(instance)}."


def _around_hint(instance: Any) -> str:
    """For a string that is one `{{ }}` expression with text around it (`"{{ input.list }} "`,
    refused where only an expression may stand): how to write it."""
    if not isinstance(instance, str) or instance.count("{{") != 1:
        return ""
    start, end = instance.find("{{"), instance.find("}}")
    if end < start or (start == 0 and end + 2 == len(instance)):
        return ""
    return f" Remove the text around the expression: write {show(instance[start : end + 2])}."


def _size_sentence(
    keyword: str, value: Any, subject: str, instance: Any, schema: Any
) -> str | None:
    if keyword == "minItems" and subject == "The document":
        return "The document is an empty list; it must hold at least one workflow."
    if keyword in ("minLength", "minItems", "minProperties") and value == 1:
        fields = list(schema.get("properties", {})) if isinstance(schema, dict) else []
        if keyword == "minProperties" and fields:
            return f"{subject} must set at least one of {quoted_list(fields)}."
        return f"{subject} must not be empty."
    units = {
        "minLength": ("at least", "characters long"),
        "maxLength": ("at most", "characters long"),
        "minItems": ("at least", "items"),
        "maxItems": ("at most", "items"),
        "minProperties": ("at least", "entries"),
        "maxProperties": ("at most", "entries"),
    }
    if keyword not in units:
        return None
    bound, unit = units[keyword]
    size = len(instance) if isinstance(instance, (str, list, dict)) else "?"
    return f"{subject} must have {bound} {value} {unit.removesuffix(' long')}; it has {size}."


def _repeated(items: list[Any], path: list[str | int], whole: str | None) -> Iterator[Problem]:
    """One problem per entry of a `uniqueItems` array that repeats an earlier one, at the
    entry's own pointer (the one to delete), naming where the first is: the array as a whole
    would leave the author to find them, and a third copy is a second entry to remove."""
    subject = _subject(path, whole)
    first: dict[Any, int] = {}
    for index, item in enumerate(items):
        seen = first.setdefault(same_key(item), index)
        if seen != index:
            yield Problem(
                pointer(*path, index),
                f"{subject} already lists {show(item)} (at {pointer(*path, seen)}); remove "
                "this entry.",
                Code.SCHEMA,
            )


# ── typed models ────────────────────────────────────────────────────────────────────────────


def build_workflow(raw: dict[str, Any], base: str) -> tuple[Workflow | None, list[Problem]]:
    """The typed `Workflow` for one schema-valid workflow object found at pointer `base`."""
    document = {k: v for k, v in raw.items() if k != "$schema"}  # editor hint, not workflow data
    try:
        return Workflow.model_validate(document), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            parts = _raw_path(document, err["loc"])
            subject = _subject(parts)
            problems.append(
                Problem(base + pointer(*parts), f"{subject}: {err['msg']}.", Code.MODEL)
            )
        return None, problems


def _raw_path(document: Any, loc: tuple[int | str, ...]) -> list[str | int]:
    """`loc` reduced to the segments that exist in the document (drops union tags)."""
    node = document
    parts: list[str | int] = []
    for segment in loc:
        present = (isinstance(node, dict) and segment in node) or (
            isinstance(node, list) and isinstance(segment, int) and 0 <= segment < len(node)
        )
        if present:
            node = node[segment]
            parts.append(segment)
    return parts
