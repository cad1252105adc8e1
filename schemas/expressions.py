"""`{{ … }}` expressions: JMESPath over the run context.

The run context is `{input, vertices: {<id>: {output}}, run: {id, tenantId}, item, index}`.
A string that is exactly one expression keeps the JSON type of the result; otherwise each
result is formatted into the string (JSON for objects/lists, `""` for null).
Templates are compiled once and cached: evaluation is on the hot path of every step.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jmespath
import jmespath.exceptions
from jmespath.parser import ParsedResult

from schemas.errors import SchemaBridgeError

_EXPR = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


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


def _search(parsed: ParsedResult, context: dict[str, Any]) -> Any:
    try:
        return parsed.search(context)
    except jmespath.exceptions.JMESPathError as exc:
        raise ExpressionError(parsed.expression, str(exc)) from exc


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def expressions_in(text: str) -> list[str]:
    """The stripped source of every `{{ }}` expression in `text`."""
    return [m.group(1).strip() for m in _EXPR.finditer(text)]


@lru_cache(maxsize=4096)
def compile_template(text: str) -> Template:
    """Compile `text`; raise ExpressionError on a JMESPath syntax error or an empty `{{ }}`."""
    parts: list[str | ParsedResult] = []
    pos = 0
    for match in _EXPR.finditer(text):
        if match.start() > pos:
            parts.append(text[pos : match.start()])
        source = match.group(1).strip()
        if not source:
            raise ExpressionError(source, "empty expression")
        try:
            parts.append(jmespath.compile(source))
        except jmespath.exceptions.JMESPathError as exc:
            raise ExpressionError(source, _syntax_reason(exc)) from exc
        pos = match.end()
    if pos < len(text):
        parts.append(text[pos:])
    exact = len(parts) == 1 and not isinstance(parts[0], str)
    return Template(text, tuple(parts), exact)


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
