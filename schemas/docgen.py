"""Generate the authoring reference (Markdown) from workflow.schema.json.

    python -m schemas.docgen > docs/authoring-reference.md

The reference is derived, never hand-edited: tests/unit/test_docgen.py fails when the
committed file differs from this output, so the schema and the documentation cannot drift.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from schemas import loader

SECTIONS = (
    "workflow",
    "vertex",
    "gatewayConfig",
    "retryPolicy",
    "spawnerConfig",
    "mergeConfig",
    "failureTolerance",
)
"""The `$defs` entries documented, in reading order."""

_HEADER = """\
# Workflow reference

<!-- Generated from schemas/workflow.schema.json by `python -m schemas.docgen`.
     Do not edit by hand: change the schema and regenerate. -->

This reference lists every field of a workflow document. The guide, with examples and the
expression language, is [authoring.md](authoring.md). The schema's `$id` is
`{schema_id}`.

{file_description}
"""


def generate() -> str:
    """The whole reference as Markdown text (ends with one newline)."""
    schema = loader.workflow_schema()
    defs: dict[str, Any] = schema["$defs"]
    parts = [_HEADER.format(schema_id=schema["$id"], file_description=_cell(schema["description"]))]
    parts.extend(_section(defs[name], defs) for name in SECTIONS)
    return "\n".join(parts).rstrip("\n") + "\n"


def _anchor(title: str) -> str:
    """The GitHub-style anchor of a `## title` heading."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return "#" + kept.replace(" ", "-")


def _link(ref: str, defs: dict[str, Any]) -> str:
    name = ref.rsplit("/", 1)[-1]
    if name not in defs:
        return f"`{ref}`"
    title = str(defs[name]["title"])
    return f"[{title}]({_anchor(title)})"


def _section(node: dict[str, Any], defs: dict[str, Any]) -> str:
    required = set(node.get("required", []))
    lines = [
        f"## {node['title']}",
        "",
        _cell(node["description"]),
        "",
        "| Field | Type | Required | Default | Constraints | Description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for field, prop in node.get("properties", {}).items():
        merged = _merged(prop, defs)
        row = [
            f"`{field}`",
            _type(field, prop, node, defs),
            "yes" if field in required else "no",
            _default(prop),
            _constraints(merged),
            _cell(str(merged.get("description", ""))),
        ]
        lines.append("| " + " | ".join(row) + " |")
    extra = _extra_notes(node)
    if extra:
        lines.extend(["", extra])
    return "\n".join(lines) + "\n"


def _merged(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`prop` with its `$ref` target's keywords filled in (the property's own win)."""
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs[ref.rsplit("/", 1)[-1]]
        return {**target, **prop}
    return prop


def _type(field: str, prop: dict[str, Any], owner: dict[str, Any], defs: dict[str, Any]) -> str:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _link(ref, defs)
    if isinstance(ref, str):
        return "JSON Schema" if "json-schema.org" in ref else f"`{ref}`"
    conditional = _conditional_refs(field, owner, defs)
    if conditional:
        return "object: " + "; ".join(conditional)
    return _plain_type(prop, defs)


def _plain_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "enum" in prop:
        return "one of " + ", ".join(_code(str(v)) for v in prop["enum"])
    kind = prop.get("type")
    if kind is None:
        return "any JSON"
    kinds = [kind] if isinstance(kind, str) else list(kind)
    names = []
    for k in kinds:
        if k == "array" and isinstance(prop.get("items"), dict):
            names.append(f"array of {_plain_type(prop['items'], defs)}")
        elif k == "object" and isinstance(prop.get("additionalProperties"), dict):
            values = prop["additionalProperties"]
            inner = _link(values["$ref"], defs) if "$ref" in values else _plain_type(values, defs)
            names.append(f"object of {inner}")
        else:
            names.append(str(k))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _conditional_refs(field: str, owner: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """For `config`: which schema applies for which `type` (from the owner's if/then rules)."""
    found = []
    for rule in owner.get("allOf", []):
        condition = rule.get("if", {}).get("properties", {})
        then = rule.get("then", {}).get("properties", {}).get(field, {})
        for key, test in condition.items():
            if "const" in test and "$ref" in then:
                found.append(f"{key} `{test['const']}` → {_link(then['$ref'], defs)}")
    return found


def _default(prop: dict[str, Any]) -> str:
    if "default" not in prop:
        return ""
    return _code(json.dumps(prop["default"]))


def _bounds(prop: dict[str, Any]) -> str | None:
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        return f"{low} to {high}"
    if low is not None:
        return f"≥ {low}"
    if high is not None:
        return f"≤ {high}"
    return None


def _constraints(prop: dict[str, Any]) -> str:
    notes = []
    bounds = _bounds(prop)
    if bounds:
        notes.append(bounds)
    # An array's elements' bounds (successCodes: each 100 to 599), which the validator
    # enforces: left out, the reference let an author think 99 or 600 would do.
    items = prop.get("items")
    item_bounds = _bounds(items) if isinstance(items, dict) else None
    if item_bounds:
        notes.append(f"each {item_bounds}")
    if any(prop.get(k) == 1 for k in ("minLength", "minItems", "minProperties")):
        notes.append("non-empty")
    if "maxLength" in prop:
        notes.append(f"at most {prop['maxLength']} characters")
    if prop.get("uniqueItems"):
        notes.append("no repeats")
    if "pattern" in prop:
        notes.append(f"pattern {_code(prop['pattern'])}")
    names = prop.get("propertyNames", {})
    if isinstance(names, dict) and "pattern" in names:
        notes.append(f"keys match {_code(names['pattern'])}")
    return _cell("; ".join(notes))


def _code(text: str) -> str:
    """`text` as a Markdown code span, even when it contains a backtick."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _extra_notes(node: dict[str, Any]) -> str:
    if node.get("additionalProperties") is False:
        return "Any other field is an error."
    return ""


def _cell(text: str) -> str:
    """`text` safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> None:
    sys.stdout.write(generate())


if __name__ == "__main__":
    main()
