"""`input.<name>` against the workflow's inputSchema, when that schema closes the input.

With `"additionalProperties": false` (and no `patternProperties`), an object schema admits only
the names under its `properties`, so an expression reading any other name always gets null and
renders "" (a misspelt `input.custmerId` calls `http://x.example/`). Nested properties closed
the same way are followed; a level that is open, or uses `$ref` or a combinator, ends the
check. Only `input`: a child's `item` has no schema.
"""

from __future__ import annotations

from typing import Any

from engine.validation.common import Code, did_you_mean, jmespath_path, quoted_list
from engine.validation.graph import RawWorkflow
from schemas.errors import Problem


def input_field_problem(wf: RawWorkflow, at: str, shown: str, names: list[str]) -> Problem | None:
    """The problem with `names` (a path read from the root, starting with `input`), if any;
    `shown` starts the message ("The expression {{ … }}")."""
    schema = wf.input_schema
    for depth, name in enumerate(names[1:], start=1):
        allowed = _closed_properties(schema)
        if allowed is None:
            return None
        if name not in allowed:
            where = "the inputSchema"
            if depth > 1:
                where += f" of {jmespath_path(names[:depth])}"
            listed = f"only {quoted_list(allowed)}" if allowed else "no names"
            return Problem(
                at,
                f"{shown} reads {jmespath_path(names[: depth + 1])}, but {where} allows "
                f"{listed} (additionalProperties is false), so it is always null."
                f"{did_you_mean(name, allowed)}",
                Code.UNKNOWN_INPUT_FIELD,
            )
        schema = allowed[name]
    return None


def _closed_properties(schema: Any) -> dict[str, Any] | None:
    """The `properties` of an object schema that admits no other names, else None."""
    if not isinstance(schema, dict) or schema.get("additionalProperties") is not False:
        return None
    if any(k in schema for k in ("patternProperties", "$ref", "allOf", "anyOf", "oneOf")):
        return None
    properties = schema.get("properties", {})
    return properties if isinstance(properties, dict) else None
