"""Regular expressions of an `inputSchema` (`pattern`, `patternProperties`), matched in linear
time (docs/security.md, 'Input limits').

jsonschema matches patterns with Python's `re`, a backtracking engine: a pattern such as
`^(a+)+$` takes exponential time on `aaaa…!`, so one submitted input could hold a worker or an
API process for minutes (measured in bench/regex_patterns.py). SchemaBridge matches them with
RE2 (google-re2), whose time is linear in the input whatever the pattern. RE2 has no
backreferences and no lookaround, and refuses patterns too large to compile in its memory
budget: such a pattern is refused when the workflow is published (`unsafe_pattern`, with its
pointer), so no run ever meets a pattern it cannot match safely.

jsonschema matches patterns in three keywords, all replaced here: `pattern`,
`patternProperties` and `additionalProperties` (which skips the names `patternProperties`
match). A fourth, `unevaluatedProperties`, asks jsonschema's own helper which names the
`patternProperties` of every subschema match; rather than re-implement that walk, an
inputSchema that uses `unevaluatedProperties` together with `patternProperties` is refused at
publication.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator

from engine.validation.common import DATA_KEYWORDS, Code, pointer, show
from schemas.errors import Problem
from schemas.linear_keywords import enum, unique_items
from schemas.pinned_validator import pinned, pinned_validator
from schemas.schema_work import counted, spend

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is our problem to report, not stderr noise


class UnsafePattern(ValueError):
    """A pattern RE2 cannot compile (a feature it lacks, or too large)."""


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached: the same schema checks every input). Raises
    `UnsafePattern` with RE2's reason."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise UnsafePattern(text) from None


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    # `validator` is a jsonschema validator instance (`descend` is not in its protocol).
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        matcher = compiled(pattern)
        spend(len(instance))  # every name against every pattern
        for key, value in instance.items():
            if matcher.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    matchers = [compiled(p) for p in schema.get("patternProperties", {})]
    spend(len(instance) * len(matchers))  # every name against every pattern
    extras = sorted(
        (
            name
            for name in instance
            if name not in properties and not any(m.search(name) for m in matchers)
        ),
        key=str,
    )
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        joined = ", ".join(repr(extra) for extra in extras)
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({joined} {verb} unexpected)")


InputValidator: type[Validator] = pinned(
    validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        counted(
            {
                **Draft202012Validator.VALIDATORS,
                "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties,
                "uniqueItems": unique_items,
                "enum": enum,
            }
        ),
    )
)
"""Draft 2020-12, with every pattern matched by RE2, `uniqueItems` and `enum` in linear time
(`schemas.linear_keywords`), every keyword counted against the running
`schemas.schema_work.at_most`, and never another class whatever a sub-schema's
`$schema` says (`schemas.pinned_validator`). Build one with `input_validator`."""


def input_validator(schema: Any) -> Validator:
    """An `InputValidator` for `schema`, its `$ref`s resolved in a registry crawled once and
    never fetched (`schemas.pinned_validator`): a lookup of an `$anchor` costs the same
    whatever the schema's size, for every item of an input."""
    return pinned_validator(InputValidator, schema)


def pattern_problems(schema: Any, at: tuple[str | int, ...], base: str) -> list[Problem]:
    """A problem for every `pattern` and `patternProperties` key under `schema` (found at
    `base` + `at`) that RE2 cannot compile, and for `unevaluatedProperties` in a schema that
    also uses `patternProperties` (see the module's docstring)."""
    problems: list[Problem] = []
    unevaluated: list[tuple[str | int, ...]] = []
    has_pattern_properties = False
    stack: list[tuple[tuple[str | int, ...], Any]] = [(at, schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        found: list[tuple[tuple[str | int, ...], str]] = []
        if isinstance(node.get("pattern"), str):
            found.append(((*path, "pattern"), node["pattern"]))
        if isinstance(node.get("patternProperties"), dict):
            has_pattern_properties = True
            found.extend(((*path, "patternProperties", k), k) for k in node["patternProperties"])
        if "unevaluatedProperties" in node:
            unevaluated.append((*path, "unevaluatedProperties"))
        for where, pattern in found:
            try:
                compiled(pattern)
            except UnsafePattern as exc:
                problems.append(
                    Problem(base + pointer(*where), _message(pattern, exc), Code.UNSAFE_PATTERN)
                )
        stack.extend(((*path, k), v) for k, v in node.items() if k not in DATA_KEYWORDS)
    if has_pattern_properties:
        problems.extend(
            Problem(base + pointer(*where), _UNEVALUATED, Code.UNSAFE_PATTERN)
            for where in unevaluated
        )
    return problems


_UNEVALUATED = (
    "unevaluatedProperties cannot be used in an inputSchema that also uses "
    "patternProperties: SchemaBridge cannot bound the time its pattern matching takes. Use "
    "additionalProperties beside the patternProperties instead."
)


def _message(pattern: str, exc: UnsafePattern) -> str:
    return (
        f"The pattern {show(pattern)} cannot be matched in linear time ({exc}): SchemaBridge "
        "matches inputSchema patterns with RE2, which has no backreferences or lookaround "
        "and refuses very large patterns. Rewrite it without them."
    )
