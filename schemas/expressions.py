"""`{{ … }}` expressions: JMESPath over the run context.

The run context is `{input, vertices: {<id>: {output}}, run: {id, tenantId}, item, index}`,
and `secrets` in a GATEWAY step that references any: `secrets.<NAME>` is read from the
tenant's secret store when the step runs, and only the names the vertex references are there
(`secret_references`).
A string that is exactly one expression keeps the JSON type of the result; otherwise each
result is formatted into the string (JSON for objects/lists, `""` for null).
Templates are compiled once and cached: evaluation is on the hot path of every step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jmespath
import jmespath.exceptions
from jmespath import functions as jmespath_functions
from jmespath.parser import ParsedResult
from jmespath.visitor import TreeInterpreter

if TYPE_CHECKING:
    from jmespath.visitor import _TreeNode

from schemas.errors import SchemaBridgeError

SECRETS_ROOT = "secrets"
"""The context root that holds secrets' values (only in a GATEWAY step that references any)."""


class ExpressionError(SchemaBridgeError, ValueError):
    """An expression failed to compile or evaluate. `expression` is its source text."""

    code = "expression_error"

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"expression {{{{ {expression} }}}}: {reason}")
        self.expression = expression
        self.reason = reason


@dataclass(frozen=True)
class Template:
    """A compiled string: literal parts and expressions, alternating."""

    source: str
    parts: tuple[str | ParsedResult, ...]
    exact: bool
    """True when the whole string is one expression (the result keeps its JSON type)."""
    secret_names: frozenset[str] = frozenset()
    """The secrets it references, each written `secrets.<NAME>` (see `secret_name`)."""

    def render(self, context: dict[str, Any]) -> Any:
        if self.exact:
            return _search(self.parts[0], context)  # type: ignore[arg-type]
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(_format(_search(part, context)))
        return "".join(out)

    def render_placed(self, context: dict[str, Any], place: Callable[[str, str, bool], str]) -> str:
        """Render as text (even an `exact` template), each expression's formatted result
        written as `place(text_before_it, formatted, is_null)` returns it: where a value lands
        can change how it must be written (a URL percent-encodes a value in its path).
        `text_before_it` is the rendered text so far, earlier placed values included; `is_null`
        tells a null (formatted as "") from an empty string."""
        before = ""
        for part in self.parts:
            if isinstance(part, str):
                before += part
            else:
                value = _search(part, context)
                before += place(before, _format(value), value is None)
        return before


def json_type(value: Any) -> str:
    """The JSON name of `value`'s type (object, array, string, number, boolean, null): what an
    author wrote, never a Python name such as dict or int."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


_INTERPRETER = TreeInterpreter()
"""One interpreter for every search: `ParsedResult.search` builds a new one per call, and with
it a new cache of visit methods (2.9 % of the embedded default's CPU per fan-out child). It
keeps no state between visits beyond that cache."""


class Expression(ParsedResult):
    """A compiled expression. One that reads a plain chain of fields (`item.id`, `input`) is
    read by walking the context's objects, without the tree interpreter: the templates of a
    fan-out's children are mostly such chains. The walk reads a field as the interpreter does
    (`value.get`), so a field of anything that is not an object, or of a null, is null."""

    def __init__(self, expression: str, parsed: _TreeNode) -> None:
        super().__init__(expression, parsed)
        self.fields = _field_chain(parsed)

    def search(self, value: Any, options: Any = None) -> Any:
        if options is not None:
            return super().search(value, options)
        if self.fields is None:
            return _INTERPRETER.visit(self.parsed, value)
        try:
            for name in self.fields:
                value = value.get(name)
        except AttributeError:  # not an object, or null: as the interpreter's own field visit
            return None
        return value


def _field_chain(node: _TreeNode) -> tuple[str, ...] | None:
    """The field names `node` reads one after another, or None when it does anything else."""
    if node["type"] == "field":
        return (node["value"],)
    if node["type"] != "subexpression":
        return None
    names: list[str] = []
    for child in node["children"]:
        chain = _field_chain(child)
        if chain is None:
            return None
        names += chain
    return tuple(names)


def _search(parsed: ParsedResult, context: dict[str, Any]) -> Any:
    try:
        return parsed.search(context)
    except jmespath.exceptions.JMESPathTypeError as exc:
        # jmespath names an array element's type as Python does ("int"): say the JSON name.
        expected = " or ".join(str(t) for t in exc.expected_types)
        reason = (
            f"in function {exc.function_name}(), invalid type for value: "
            f"{json.dumps(exc.current_value, ensure_ascii=False, default=str)}, expected "
            f"{expected}, received: {json_type(exc.current_value)}"
        )
        raise ExpressionError(parsed.expression, reason) from exc
    except jmespath.exceptions.JMESPathError as exc:
        raise ExpressionError(parsed.expression, str(exc)) from exc


@dataclass(frozen=True)
class FunctionSignature:
    """How many arguments a function takes, and of which JMESPath types (`types[i]` for the
    i-th; an empty tuple: any type)."""

    name: str
    types: tuple[tuple[str, ...], ...]
    variadic: bool
    """True: the last argument may repeat, so `len(types)` is the least count."""

    def accepts(self, count: int) -> bool:
        return count >= len(self.types) if self.variadic else count == len(self.types)

    def __str__(self) -> str:
        shown = ["|".join(t) if t else "any" for t in self.types]
        if self.variadic and shown:
            shown[-1] += ", …"
        return f"{self.name}({', '.join(shown)})"


def function_signatures() -> dict[str, FunctionSignature]:
    """The functions `_search` evaluates with, by name.

    `ParsedResult.search` without options uses JMESPath's built-in `Functions`; the engine
    registers no functions of its own. Validation reads this table so a function the run could
    not call is refused before anything runs (and would follow if custom functions were added
    here)."""
    table = jmespath_functions.Functions.FUNCTION_TABLE
    return {
        name: FunctionSignature(
            name,
            tuple(tuple(arg.get("types", ())) for arg in entry["signature"]),
            bool(entry["signature"]) and bool(entry["signature"][-1].get("variadic")),
        )
        for name, entry in table.items()
    }


def function_calls(parsed: ParsedResult) -> list[tuple[str, int]]:
    """(name, argument count) of every function call in the expression, anywhere in it."""
    calls: list[tuple[str, int]] = []
    # Iterative walk: expression depth is user-controlled.
    stack: list[dict[str, Any]] = [dict(parsed.parsed)]
    while stack:
        node = stack.pop()
        children = node.get("children", [])
        if node.get("type") == "function_expression":
            calls.append((str(node["value"]), len(children)))
        stack.extend(c for c in children if isinstance(c, dict))
    return calls


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _matches(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, text between the braces) of each `{{ }}` in `text`, left to right: one
    opens at the first `{{`, closes at the first `}}` after it, and the next is looked for
    after that. Two `str.find` a match, so linear in `text`. (The regex `\\{\\{(.*?)\\}\\}`
    it replaces scanned the rest of the text again from every `{{` with no `}}` after it:
    80 KB of `{{` took 64 s, in the API process that validated them.)"""
    pos = 0
    while (start := text.find("{{", pos)) >= 0:
        end = text.find("}}", start + 2)
        if end < 0:
            return
        yield start, end + 2, text[start + 2 : end]
        pos = end + 2


def expressions_in(text: str) -> list[str]:
    """The stripped source of every `{{ }}` expression in `text`."""
    return [source.strip() for _, _, source in _matches(text)]


def expression_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, stripped source) of every `{{ }}` expression in `text`."""
    return [(start, end, source.strip()) for start, end, source in _matches(text)]


@lru_cache(maxsize=4096)
def compile_template(text: str) -> Template:
    """`parse_template`, cached: the templates of published workflows, which every step
    renders. Validation parses with `parse_template`, so a document nobody publishes never
    takes a place here (4,096 texts of up to a megabyte each)."""
    return parse_template(text)


def parse_template(text: str) -> Template:
    """Compile `text`; raise ExpressionError on a JMESPath syntax error or an empty `{{ }}`."""
    parts: list[str | ParsedResult] = []
    pos = 0
    for start, end, between in _matches(text):
        if start > pos:
            parts.append(text[pos:start])
        source = between.strip()
        if not source:
            raise ExpressionError(source, "empty expression")
        try:
            compiled = jmespath.compile(source)
            parts.append(Expression(compiled.expression, compiled.parsed))
        except jmespath.exceptions.JMESPathError as exc:
            raise ExpressionError(source, _syntax_reason(exc)) from exc
        pos = end
    if pos < len(text):
        parts.append(text[pos:])
    exact = len(parts) == 1 and not isinstance(parts[0], str)
    names = frozenset(
        name
        for part in parts
        if not isinstance(part, str) and (name := secret_name(part)) is not None
    )
    return Template(text, tuple(parts), exact, names)


def secret_name(parsed: ParsedResult) -> str | None:
    """NAME when the expression is exactly `secrets.NAME`, else None.

    A secret is referenced only in that form: the engine resolves the names it can read from
    the document before the step runs, and a value that no function, slice or projection has
    transformed is a value the redactor recognises (schemas/redaction.py).
    """
    node = parsed.parsed
    if node.get("type") != "subexpression":
        return None
    children = node.get("children", [])
    if len(children) != 2:  # `secrets` and the name, nothing more
        return None
    root, name = children
    if root.get("type") != "field" or root.get("value") != SECRETS_ROOT:
        return None
    if name.get("type") != "field":
        return None
    return str(name["value"])


def templates_in(value: Any, containing: str = "") -> Iterator[Template]:
    """The compiled templates among the strings inside `value` (recursively through dicts and
    lists; object keys are never templates), only of strings that hold `containing` (a cheap
    filter before compiling). Templates that do not compile are passed over: rendering
    reports them, with the field they are in."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "{{" in node and containing in node:
                try:
                    yield compile_template(node)
                except ExpressionError:
                    continue
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def secret_references(value: Any) -> frozenset[str]:
    """The names of the secrets the strings inside `value` reference (`templates_in`)."""
    names: set[str] = set()
    for template in templates_in(value, SECRETS_ROOT):
        names |= template.secret_names
    return frozenset(names)


_STOP: dict[str, Any] = {"type": "__stop__", "children": []}
"""Marks the end of the leading field chain (after a projection, names are per element)."""
_CHAIN = frozenset(
    {"subexpression", "index_expression", "projection", "filter_projection"}
    | {"value_projection", "flatten"}
)
_WHOLE = frozenset({"current", "identity"})
"""Nodes that stand for the value they are applied to: at the root, the whole context."""


def root_paths(parsed: ParsedResult) -> list[list[str]]:
    """The leading field names of every path the expression evaluates against the context
    root: `vertices.a.output[0].b` gives `["vertices", "a", "output"]`, and the expression
    reads at most what lies under those names. An empty list is a read of the whole context
    (`@`, `*`, `[*]`, `@[0]`), which may reach any of it.

    Inside a filter, a projection, an `&expref` or the right side of a pipe, names are
    relative to the current element, so they are not paths from the root. Used by validation
    (which vertices an expression reads) and by the engine (whether a step needs a MERGE's
    outputs loaded, `engine.execution.merge_outputs`).
    """
    found: list[list[str]] = []
    # Iterative walk: (node, evaluated against the root?). Expression depth is user-controlled.
    stack: list[tuple[dict[str, Any], bool]] = [(dict(parsed.parsed), True)]
    while stack:
        current, at_root = stack.pop()
        kind = current.get("type")
        if kind == "field":
            if at_root:
                found.append([str(current["value"])])
        elif kind in _WHOLE:
            if at_root:
                found.append([])
        elif kind in _CHAIN:
            elements = _chain(current)
            head = elements[0]
            if head.get("type") not in ("field", "current"):
                stack.append((head, at_root))
            elif at_root:
                found.append(_leading_fields(elements))
            stack.extend((e, False) for e in elements[1:])
        elif kind in ("pipe", "expref"):
            children = current["children"]
            if kind == "pipe":
                stack.append((children[0], at_root))
            stack.extend((c, False) for c in children[1 if kind == "pipe" else 0 :])
        else:
            stack.extend((c, at_root) for c in current.get("children", []))
    return found


def _template_fields(text: str) -> list[str] | None:
    """The fields a template that is one expression reading a chain of fields reads, in
    order (`vertices.fetch.output.body` → its four names); None for any other template."""
    template = compile_template(text)
    part = template.parts[0] if template.exact else None
    fields = getattr(part, "fields", None)
    return list(fields) if fields else None


def where_path_stops(text: str, context: dict[str, Any]) -> str | None:
    """Why a template that is one expression reading a chain of fields (`{{ vertices.fetch
    .output.body.orders }}`) evaluated to null, in words: the first field along it that is
    missing ("vertices.fetch.output.body has no field 'orders'; its fields are: id, rows"), or
    not an object ("vertices.fetch.output.body is a string, not an object"). None for any
    other template, or when the chain reaches its end (the value itself is null)."""
    fields = _template_fields(text)
    if not fields:
        return None
    value: Any = context
    for depth, name in enumerate(fields):
        where = ".".join(fields[:depth]) or "the context"
        if not isinstance(value, dict):
            return f"{where} is {_a(json_type(value))}, not an object"
        if name not in value:
            known = ", ".join(sorted(str(key) for key in value)[:10]) or "none"
            return f"{where} has no field {name!r}; its fields are: {known}"
        value = value[name]
    return None


def cut_body(text: str, context: dict[str, Any]) -> str | None:
    """The output whose cut body a template that is one chain of fields stops at, as a path
    ("vertices.fetch.output"): the chain reads into `….body` of an output flagged
    `bodyTruncated` (an answer longer than MAX_RESPONSE_BYTES, kept as text), where it was
    looking for fields. None otherwise. "body is a string, not an object" sent the author to
    the expression when the answer's size was the cause."""
    fields = _template_fields(text)
    if not fields:
        return None
    value: Any = context
    for depth, name in enumerate(fields):
        if not isinstance(value, dict) or name not in value:
            return None
        if (
            name == "body"
            and depth + 1 < len(fields)
            and value.get("bodyTruncated") is True
            and isinstance(value[name], str)
        ):
            return ".".join(fields[:depth])
        value = value[name]
    return None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _chain(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node as a flat list of steps, each applied to the result of the previous one."""
    elements: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        kind = current.get("type")
        children = current.get("children", [])
        if kind in ("subexpression", "index_expression"):
            stack.extend(reversed(children))
        elif kind in _CHAIN:  # projections and flatten: later steps run per element
            stack.extend([*reversed(children[1:]), _STOP, children[0]])
        else:
            elements.append(current)
    return elements


def _leading_fields(elements: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for element in elements:
        kind = element.get("type")
        if kind == "current" and not names:
            continue  # `@.vertices.a` reads the root just like `vertices.a`
        if kind != "field":
            break
        names.append(str(element["value"]))
    return names


def _syntax_reason(exc: jmespath.exceptions.JMESPathError) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"invalid JMESPath: {first}"


def render(value: Any, context: dict[str, Any]) -> Any:
    """Render every string inside `value` (recursively through dicts and lists)."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        return compile_template(value).render(context)
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    return value
