"""Phase 1 of validation, its end: how much a parsed document holds, counted before any later
phase reads it (docs/security.md, 'Input limits').

Each later phase costs more per byte for some contents than for others, and a document may
be 1 MiB, so what it holds is bounded before those phases run; a document over a bound stops
here, with one problem per bound at the place where it was passed:

- vertices per workflow (`max_vertices`): the graph phase's work;
- sub-schemas in the inputSchemas of the document (`max_subschemas`): each is checked
  against the draft 2020-12 meta-schema, 0.3 to 0.9 ms of jsonschema apiece (3,000 took 1
  to 3 s, by the machine's load), so that 3 bytes (`{},`) cost about as much as a whole
  vertex and the 350,000 of a 1 MiB document would hold an API process for minutes;
- `{{ }}` expressions in the vertices of the document (`max_expressions`): each is parsed
  and checked, 50 to 100 µs apiece (a 1 MiB document holds 200,000 `{{a}}`).

Counting is one pass over the parsed JSON (and two `str.find` per expression).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.validation.common import Code, Limits, join
from engine.validation.graph import workflow_objects
from schemas.errors import Problem
from schemas.expressions import expression_spans

SCHEMA_KEYWORDS = frozenset(
    {
        "additionalProperties",
        "propertyNames",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
"""Keywords whose value is one sub-schema (draft 2020-12 applicators, as its meta-schema
checks them)."""
SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
"""Keywords whose value is a list of sub-schemas."""
SCHEMA_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
"""Keywords whose value maps names to sub-schemas (`definitions` and `dependencies` too: the
2020-12 meta-schema still checks them)."""


def size_problems(data: Any, limits: Limits) -> list[Problem]:
    """Where a parsed document holds more than `limits` allow (checked before the rest)."""
    objects = workflow_objects(data)
    problems = [p for base, obj in objects if (p := _vertex_problem(base, obj, limits))]
    subschemas = [
        (join(base, "inputSchema"), subschema_count(obj["inputSchema"]))
        for base, obj in objects
        if "inputSchema" in obj
    ]
    problems += _over(subschemas, limits.max_subschemas, _subschemas_message)
    expressions = [
        (join(base, "vertices", vid, "config"), _expression_count(vertex.get("config")))
        for base, obj in objects
        if isinstance(obj.get("vertices"), dict)
        for vid, vertex in obj["vertices"].items()
        if isinstance(vertex, dict)
    ]
    problems += _over(expressions, limits.max_expressions, _expressions_message)
    return problems


def subschema_count(schema: Any) -> int:
    """The schemas in `schema`, itself included: every value where draft 2020-12 expects a
    schema, whatever it holds (a boolean, or something that is no schema at all, costs the
    meta-schema's check as much)."""
    count = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        count += 1
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in SCHEMA_KEYWORDS:
                stack.append(value)
            elif key in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
                stack.extend(value)
            elif key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
                stack.extend(value.values())
    return count


def _expression_count(config: Any) -> int:
    """The `{{ }}` expressions in the strings of a vertex's config (object keys are never
    templates)."""
    count = 0
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "{{" in node:
                count += len(expression_spans(node))
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _over(
    counts: list[tuple[str, int]], limit: int, message: Callable[[str, int, int, int], Problem]
) -> list[Problem]:
    """One problem at the place whose count takes the document's total past `limit`."""
    total = sum(count for _, count in counts)
    if total <= limit:
        return []
    running = 0
    for at, count in counts:
        running += count
        if running > limit:
            return [message(at, count, total, limit)]
    return []  # unreachable: the running total reaches `total`


def _vertex_problem(base: str, obj: dict[str, Any], limits: Limits) -> Problem | None:
    vertices = obj.get("vertices")
    count = len(vertices) if isinstance(vertices, dict) else 0
    if count <= limits.max_vertices:
        return None
    return Problem(
        join(base, "vertices"),
        f"The workflow has {count:,} vertices; the limit is {limits.max_vertices:,} (split it "
        "with a SPAWNER and a child workflow, or raise SCHEMABRIDGE_MAX_VERTICES).",
        Code.TOO_MANY_VERTICES,
    )


def _subschemas_message(at: str, count: int, total: int, limit: int) -> Problem:
    held = f"The inputSchema holds {count:,} sub-schemas"
    if total != count:
        held += f", which makes {total:,} in the document's inputSchemas"
    return Problem(
        at,
        f"{held}; the limit is {limit:,} in one document (the inputSchema itself and every "
        "schema inside it count: each property's, each anyOf entry's, …). Simplify it, "
        "validate the workflows in separate documents, or raise SCHEMABRIDGE_MAX_SUBSCHEMAS.",
        Code.TOO_MANY_SUBSCHEMAS,
    )


def _expressions_message(at: str, count: int, total: int, limit: int) -> Problem:
    return Problem(
        at,
        f"The document holds {total:,} {{{{ }}}} expressions ({count:,} in this config); the "
        f"limit is {limit:,} in one document. Split the workflow with a SPAWNER and a child "
        "workflow, validate the workflows in separate documents, or raise "
        "SCHEMABRIDGE_MAX_EXPRESSIONS.",
        Code.TOO_MANY_EXPRESSIONS,
    )
