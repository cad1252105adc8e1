"""Pieces shared by the validation phases: limits, JSON pointers, problem codes, wording helpers.

Every phase (`validation_json`, `validation_schema`, `validation_graph`,
`validation_expressions`) returns `schemas.errors.Problem`s whose `pointer` is an RFC 6901
pointer into the document as written; `engine.validation` stamps each with its `source`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from engine.settings import Settings
from schemas.close_names import close_names


@dataclass(frozen=True)
class Limits:
    """Size limits applied before a document is trusted, so an oversized document is refused
    with a clear problem instead of exhausting the parser (docs/authoring.md, 'Validation')."""

    max_document_bytes: int
    """Largest accepted document, in UTF-8 bytes."""
    max_vertices: int
    """Most vertices in one workflow."""
    max_nesting_depth: int
    """Most nested arrays/objects, counting the outermost one as depth 1."""
    max_subschemas: int
    """Most sub-schemas in the inputSchemas of one document."""
    max_expressions: int
    """Most `{{ }}` expressions in the vertices of one document."""

    @classmethod
    def from_settings(cls, settings: Settings | None) -> Limits:
        """The limits of `settings`; without settings, the documented defaults (no env read)."""
        if settings is None:
            fields = Settings.model_fields
            return cls(
                max_document_bytes=int(fields["max_document_bytes"].default),
                max_vertices=int(fields["max_vertices"].default),
                max_nesting_depth=int(fields["max_nesting_depth"].default),
                max_subschemas=int(fields["max_subschemas"].default),
                max_expressions=int(fields["max_expressions"].default),
            )
        return cls(
            max_document_bytes=settings.max_document_bytes,
            max_vertices=settings.max_vertices,
            max_nesting_depth=settings.nesting_depth_limit,
            max_subschemas=settings.max_subschemas,
            max_expressions=settings.max_expressions,
        )


class Code:
    """Stable problem codes (documented in docs/authoring.md)."""

    TOO_LARGE = "too_large"
    TOO_DEEP = "too_deep"
    TOO_MANY_VERTICES = "too_many_vertices"
    TOO_MANY_SUBSCHEMAS = "too_many_subschemas"
    TOO_MANY_EXPRESSIONS = "too_many_expressions"
    EXPRESSION_TOO_LONG = "expression_too_long"
    NOT_UTF8 = "not_utf8"
    BINARY = "binary"
    SYNTAX = "json_syntax"
    DUPLICATE_KEY = "duplicate_key"
    SCHEMA = "schema"
    UNKNOWN_FIELD = "unknown_field"
    MISSING_FIELD = "missing_field"
    MODEL = "model"
    UNKNOWN_DEPENDENCY = "unknown_dependency"
    SELF_DEPENDENCY = "self_dependency"
    CYCLE = "cycle"
    MERGE_SPAWNER = "merge_needs_one_spawner"
    UNKNOWN_WORKFLOW = "unknown_workflow"
    UNKNOWN_WORKFLOW_VERSION = "unknown_workflow_version"
    DUPLICATE_WORKFLOW = "duplicate_workflow"
    WORKFLOW_CYCLE = "workflow_cycle"
    INEFFECTIVE_TOLERANCE = "ineffective_tolerance"
    EXPRESSION_SYNTAX = "expression_syntax"
    UNCLOSED_EXPRESSION = "unclosed_expression"
    UNKNOWN_FUNCTION = "unknown_function"
    FUNCTION_ARGUMENTS = "function_arguments"
    UNKNOWN_CONTEXT = "unknown_context"
    UNKNOWN_VERTEX_REFERENCE = "unknown_vertex_reference"
    UNKNOWN_INPUT_FIELD = "unknown_input_field"
    UNKNOWN_OUTPUT_FIELD = "unknown_output_field"
    NOT_ANCESTOR = "not_ancestor"
    ITEMS_NOT_EXPRESSION = "items_not_expression"
    ITEM_IN_ITEMS = "item_in_items"
    SECRET_NOT_ALLOWED = "secret_not_allowed"
    INVALID_SECRET_REFERENCE = "invalid_secret_reference"
    INPUT = "input"
    EGRESS_DENIED = "egress_denied"
    UNSAFE_PATTERN = "unsafe_pattern"
    UNSATISFIABLE_SCHEMA = "unsatisfiable_schema"
    RESERVED_WORKFLOW = "reserved_workflow"


DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""JSON Schema keywords whose values are instance data, not sub-schemas: a walk of a schema
skips them (a `$ref` or `pattern` key there means nothing)."""


def pointer(*parts: str | int) -> str:
    """Join `parts` into an RFC 6901 JSON pointer (`~` → `~0`, `/` → `~1`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def join(base: str, *parts: str | int) -> str:
    """`base` (already a pointer) extended by `parts`."""
    return base + pointer(*parts)


def show(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of `value` for messages (long values are cut with `…`)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A JMESPath unquoted identifier; any other name is written in double quotes."""


def jmespath_path(names: Iterable[str]) -> str:
    """`names` as a JMESPath path, each quoted when it is not a bare identifier
    (`vertices."paid-orders".output`): a message's suggestion must compile."""
    return ".".join(n if _BARE.fullmatch(n) else json.dumps(n, ensure_ascii=False) for n in names)


MOST_LISTED = 20
"""Names a message lists before it says how many more there are: an inputSchema closed on a
thousand properties would otherwise repeat all of them in the message of every unknown name
an input or an expression reads."""


def quoted_list(names: Iterable[Any]) -> str:
    """`"a", "b" and "c"`; past `MOST_LISTED` names, `"a", …, "t" and 230 more`. Only the
    names shown are turned into text, and a sequence is not copied: a message per unknown
    name, or per value outside an `enum`, costs the same whatever the names allowed."""
    listed = names if isinstance(names, Sequence) else list(names)
    more = len(listed) - MOST_LISTED
    items = [f'"{n}"' for n in listed[:MOST_LISTED]]
    if more > 0:
        return ", ".join(items) + f" and {more:,} more"
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


HINT_COMPARISONS = 10_000
"""Names one check (`check_documents`, an input check) may compare for "did you mean" hints.
One comparison of similar names costs up to ~100 µs (difflib), so without a bound a document or
an input reading thousands of unknown names, each against a thousand candidates, took minutes.
A typical document's few slips against its 500 vertices use a few thousand; past the bound the
problems are still reported, without a hint."""

_HINTS_LEFT: ContextVar[list[int] | None] = ContextVar("hint_comparisons_left", default=None)


@contextmanager
def bounded_hints(comparisons: int = HINT_COMPARISONS) -> Iterator[None]:
    """Bound the comparisons of the `did_you_mean` calls made inside."""
    token = _HINTS_LEFT.set([comparisons])
    try:
        yield
    finally:
        _HINTS_LEFT.reset(token)


def did_you_mean(name: str, candidates: Iterable[str], *, any_case: bool = False) -> str:
    """` Did you mean "x"?` when a candidate is close to `name` (`any_case`: compared in
    lower case, offered as written), else "" (also past the running `bounded_hints`: once a
    call finds too few comparisons left for its candidates, no later call offers a hint)."""
    left = _HINTS_LEFT.get()
    if left is not None and left[0] <= 0:
        return ""  # past the bound: the candidates are not even read
    fold = str.lower if any_case else str
    offered = {fold(candidate): candidate for candidate in candidates}
    if left is not None:
        if left[0] < len(offered):
            # Spent: else each later unknown name would still fold its thousand candidates
            # only to be refused.
            left[0] = 0
            return ""
        left[0] -= len(offered)
    matches = close_names(fold(name), offered)
    return f' Did you mean "{offered[matches[0]]}"?' if matches else ""
