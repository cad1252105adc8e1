"""Phase 4 of validation: the `{{ }}` expressions in every vertex's `config`.

Each string value inside `config` (recursively; object keys are never templates) is compiled
with `schemas.expressions.parse_template`, the same code that renders it at run time, so a
string that passes here compiles there. Then the JMESPath syntax tree of every expression is
walked (`schemas.expressions.root_paths`) to find the names it reads from the run context
(`input`, `vertices`, `run`, `item`, `index`, `secrets`). Only names evaluated against the
context root count: inside a filter, a projection or the right side of a pipe, names are
relative to the current element.

Rules (docs/authoring.md, "Expressions"):
- every function called is one the engine evaluates with (`function_signatures`), with as
  many arguments as its signature takes;
- the root name must be one of the context's names;
- `vertices.<id>` must name an ancestor of the vertex (reached through dependsOn), and what
  follows must be `.output`, because a vertex's result only exists once it has succeeded;
- `run.<field>` must be `id` or `tenantId`;
- `input.<name>` must be a name the workflow's `inputSchema` lets through, when it is an object
  schema with `additionalProperties: false` (followed into nested properties closed the same
  way);
- a SPAWNER's `items` is either a JSON array or exactly one expression, and cannot use `item`
  or `index` (they only exist once the list is known). `item`/`index` are allowed everywhere
  else: in a SPAWNER's `input` they are the element being spawned; in any other vertex they are
  the element a child run was started for (null in a run not started by a SPAWNER). A workflow
  cannot be proven a top-level-only workflow here, since its parent may be published later.
- `secrets` only in a GATEWAY's `url`, `headers`, `query` and `body` (the parts of a request
  that go to the destination and nowhere else: a `destination` becomes an admission key, shown
  in metrics; a SPAWNER's input and a MERGE are stored), and only as `secrets.<NAME>` alone in
  its `{{ }}`, NAME a secret's name (`SECRET_NAME`): the engine resolves the names it reads in
  the document when the step runs, and redacts values it can recognise.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jmespath import exceptions as jmespath_exceptions
from jmespath.parser import ParsedResult

from engine.validation.common import Code, did_you_mean, jmespath_path, pointer, quoted_list
from engine.validation.graph import RawVertex, RawWorkflow
from engine.validation.input_fields import input_field_problem
from engine.validation.output_paths import output_path_problem
from engine.validation.syntax_hints import Hint, legacy_literal, syntax_hint
from engine.validation.url_head import url_head_problems
from schemas.errors import Problem
from schemas.expressions import (
    SECRETS_ROOT,
    ExpressionError,
    Template,
    expressions_in,
    function_calls,
    function_signatures,
    parse_template,
    root_paths,
    secret_name,
)
from schemas.secret_names import SECRET_NAME, SECRET_NAME_RULE

FUNCTIONS = function_signatures()
"""The functions the engine evaluates expressions with: a call to any other, or with another
number of arguments, fails every run at that step, so it is refused here."""
FUNCTION_CLOSENESS = 0.7
"""`difflib` similarity a built-in must reach to be offered for an unknown function: stricter
than for field names, where 0.6 offers floor for lower."""
CONTEXT_NAMES = ("input", "vertices", "run", "item", "index", SECRETS_ROOT)
RUN_FIELDS = ("id", "tenantId")
MAX_EXPRESSION_CHARS = 16_384
"""Longest expression (between its braces) a document may hold. Parsing one costs about 5 µs
a character, and what JMESPath keeps of the last 128 it parsed (its own cache, in the API
process that validates) grows with their length; no expression needs this much."""
SECRET_FIELDS = frozenset({"url", "headers", "query", "body"})
"""The GATEWAY config fields where `secrets` may be read."""


@dataclass(frozen=True)
class _Site:
    """Where a string sits: its pointer, whether `item`/`index` are forbidden there and
    whether `secrets` may be read there."""

    at: str
    in_items: bool
    secrets_allowed: bool = False
    field: str = ""
    """The config field it is in (the top-level key)."""


def expression_problems(wf: RawWorkflow) -> list[Problem]:
    """Every expression problem in the vertices of one workflow."""
    problems: list[Problem] = []
    for vertex in wf.vertices.values():
        if not isinstance(vertex.config, dict):
            continue
        for site, text in _strings(wf, vertex):
            problems.extend(_check_string(wf, vertex, site, text))
        if vertex.type == "SPAWNER":
            problems.extend(_items_shape(wf, vertex))
        if vertex.type == "GATEWAY":
            problems.extend(url_head_problems(wf, vertex))
    return problems


def _strings(wf: RawWorkflow, vertex: RawVertex) -> Iterator[tuple[_Site, str]]:
    """Every string with a `{{` inside the vertex's config, with its site."""
    config_at = wf.at("vertices", vertex.id, "config")
    stack: list[tuple[_Site, Any]] = [(_Site(config_at, False), vertex.config)]
    while stack:
        site, node = stack.pop()
        if isinstance(node, str):
            if "{{" in node:
                yield site, node
        elif isinstance(node, dict):
            top = site.at == config_at
            for key, value in node.items():
                at = site.at + pointer(key)
                if top:
                    items = vertex.type == "SPAWNER" and key == "items"
                    secrets = vertex.type == "GATEWAY" and key in SECRET_FIELDS
                    stack.append((_Site(at, items, secrets, key), value))
                else:
                    stack.append((dataclasses.replace(site, at=at), value))
        elif isinstance(node, list):
            stack.extend(
                (dataclasses.replace(site, at=site.at + pointer(i)), v) for i, v in enumerate(node)
            )


def _compile(text: str) -> Template | ExpressionError:
    for source in expressions_in(text):
        legacy = legacy_literal(source)
        if legacy is not None:
            return ExpressionError(
                source,
                f"`{legacy}` is not a JSON literal; write a string as 'text' (or `\"text\"`)",
            )
    try:
        return parse_template(text)
    except ExpressionError as exc:
        return exc
    except RecursionError:
        return ExpressionError(text.strip("{} "), "it is nested too deeply to parse")


def _syntax_reason(error: ExpressionError) -> str:
    """A short reason from the JMESPath error behind `error` (its own text spans lines)."""
    cause = error.__cause__
    if isinstance(cause, jmespath_exceptions.IncompleteExpressionError):
        return "it ends too early"
    if isinstance(cause, jmespath_exceptions.LexerError):
        return f"{cause.message} at character {cause.lexer_position + 1}"
    if isinstance(cause, jmespath_exceptions.ParseError):
        return f"{cause.msg} at character {cause.lex_position + 1}"
    return error.reason


def _check_string(wf: RawWorkflow, vertex: RawVertex, site: _Site, text: str) -> list[Problem]:
    sources = expressions_in(text)
    too_long = [source for source in sources if len(source) > MAX_EXPRESSION_CHARS]
    if too_long:  # not parsed at all: parsing, hints and checks all grow with the length
        return [_too_long(site, source) for source in too_long]
    # Each expression on its own first, so every broken one in the string is reported.
    broken = [
        error
        for source in sources
        if isinstance(error := _compile("{{ " + source + " }}"), ExpressionError)
    ]
    compiled = _compile(text) if not broken else broken[0]
    if isinstance(compiled, ExpressionError):
        return [_syntax_problem(wf, site, error) for error in broken or [compiled]]
    problems: list[Problem] = []
    if any(isinstance(p, str) and "{{" in p for p in compiled.parts):
        problems.append(
            Problem(site.at, 'The text has "{{" without a closing "}}".', Code.UNCLOSED_EXPRESSION)
        )
    for part in compiled.parts:
        if isinstance(part, ParsedResult):
            problems.extend(_check_functions(site, part))
            # An empty path reads the whole context (`@`): nothing to check by name.
            paths = [names for names in root_paths(part) if names]
            if any(names[0] == SECRETS_ROOT for names in paths):
                secret = _check_secret(vertex, site, part)
                if secret is not None:
                    problems.append(secret)
                    continue
            for names in paths:
                problem = _check_reference(wf, vertex, site, part.expression, names)
                if problem is not None:
                    problems.append(problem)
    return problems


def _too_long(site: _Site, source: str) -> Problem:
    return Problem(
        site.at,
        f"The expression {{{{ {source[:60]}… }}}} is {len(source):,} characters long; the limit is "
        f"{MAX_EXPRESSION_CHARS:,}. Compute the value in an earlier step, or split it into "
        "several expressions.",
        Code.EXPRESSION_TOO_LONG,
    )


def _check_functions(site: _Site, part: ParsedResult) -> Iterator[Problem]:
    """Calls of functions the engine does not have, or with a wrong number of arguments."""
    shown = f"The expression {_shown(part.expression)}"
    for name, count in function_calls(part):
        signature = FUNCTIONS.get(name)
        if signature is None:
            yield Problem(
                site.at,
                f"{shown} calls {name}(), which is not a JMESPath built-in (the engine adds no "
                f"functions).{_functions_near(name)}",
                Code.UNKNOWN_FUNCTION,
            )
        elif not signature.accepts(count):
            least = "at least " if signature.variadic else ""
            wanted = len(signature.types)
            yield Problem(
                site.at,
                f"{shown} calls {name}() with {_arguments(count)}; it takes {least}"
                f"{_arguments(wanted)}: {signature}.",
                Code.FUNCTION_ARGUMENTS,
            )


def _functions_near(name: str) -> str:
    """The built-ins `name` is a slip for, only when really close: `lenght` is `length`, but
    `lower` is no slip for `floor` (it wants something JMESPath does not have), so then every
    built-in is listed instead of a guess."""
    near = difflib.get_close_matches(name, list(FUNCTIONS), n=3, cutoff=FUNCTION_CLOSENESS)
    if near:
        return f" Did you mean {quoted_list(near).replace(' and ', ' or ')}?"
    return f" The built-ins are {', '.join(FUNCTIONS)}."


def _arguments(count: int) -> str:
    return f"{count} argument{'' if count == 1 else 's'}"


def _syntax_problem(wf: RawWorkflow, site: _Site, error: ExpressionError) -> Problem:
    shown = f"The expression {_shown(error.expression)}"
    gateways = [v for v, vertex in wf.vertices.items() if vertex.type == "GATEWAY"]
    hint = syntax_hint(error.expression, wf.vertices, gateways) or Hint("")
    if hint.instead:
        return Problem(site.at, f"{shown} {hint.text}.", hint.code)
    return Problem(
        site.at, f"{shown} does not compile: {_syntax_reason(error)}{hint.text}.", hint.code
    )


def _check_secret(vertex: RawVertex, site: _Site, part: ParsedResult) -> Problem | None:
    """A problem with an expression that reads `secrets`, if it has one."""
    shown = f"The expression {_shown(part.expression)}"
    if vertex.type == "GATEWAY" and site.field == "destination":
        return Problem(
            site.at,
            f"{shown} reads secrets, which a destination cannot use: the destination is the "
            "call's admission key, shown in metrics, the destinations API and Redis keys; read "
            "secrets in the url (its path, query or user:password@), headers, query and body.",
            Code.SECRET_NOT_ALLOWED,
        )
    if not site.secrets_allowed:
        where = "this field" if vertex.type == "GATEWAY" else f"a {vertex.type}"
        return Problem(
            site.at,
            f"{shown} reads secrets, which {where} cannot use: secrets may only be read in a "
            "GATEWAY's url, headers, query and body, where they go to the destination and are "
            "never stored.",
            Code.SECRET_NOT_ALLOWED,
        )
    name = secret_name(part)
    if name is None:
        return Problem(
            site.at,
            f"{shown} must read one secret and nothing else: write {{{{ secrets.NAME }}}} "
            "alone between the braces (text around the braces is fine, as in "
            '"Bearer {{ secrets.API_TOKEN }}").',
            Code.INVALID_SECRET_REFERENCE,
        )
    if not SECRET_NAME.fullmatch(name):
        return Problem(
            site.at,
            f'{shown} names the secret "{name}", which is not a secret name: {SECRET_NAME_RULE}.',
            Code.INVALID_SECRET_REFERENCE,
        )
    return None


def _shown(source: str) -> str:
    return f"{{{{ {source} }}}}" if source else "{{ }}"


def _items_shape(wf: RawWorkflow, vertex: RawVertex) -> Iterator[Problem]:
    items = vertex.config.get("items") if isinstance(vertex.config, dict) else None
    if not (isinstance(items, str) and items.startswith("{{") and items.endswith("}}")):
        return  # a JSON array, or a string the schema's pattern already refuses
    compiled = _compile(items)
    if isinstance(compiled, Template) and not compiled.exact:
        yield Problem(
            wf.at("vertices", vertex.id, "config", "items"),
            "items must be exactly one {{ }} expression that evaluates to a list (nothing "
            "around it), or a JSON array.",
            Code.ITEMS_NOT_EXPRESSION,
        )


# ── references ──────────────────────────────────────────────────────────────────────────────


def _check_reference(
    wf: RawWorkflow, vertex: RawVertex, site: _Site, source: str, names: list[str]
) -> Problem | None:
    shown = f"The expression {_shown(source)}"
    root = names[0]
    if root not in CONTEXT_NAMES:
        hint = did_you_mean(root, CONTEXT_NAMES) or f" Use {quoted_list(CONTEXT_NAMES)}."
        message = f'{shown} reads "{root}", which is not part of the run context.{hint}'
        return Problem(site.at, message, Code.UNKNOWN_CONTEXT)
    if root in ("item", "index") and site.in_items:
        return Problem(
            site.at,
            f"{shown} uses {root}, which is not defined while a SPAWNER's items are computed; "
            "use item and index in its input instead.",
            Code.ITEM_IN_ITEMS,
        )
    if root == "run" and len(names) > 1 and names[1] not in RUN_FIELDS:
        hint = did_you_mean(names[1], RUN_FIELDS) or ' It has only "id" and "tenantId".'
        message = f"{shown} reads run.{names[1]}, which does not exist.{hint}"
        return Problem(site.at, message, Code.UNKNOWN_CONTEXT)
    if root == "vertices" and len(names) > 1:
        return _check_vertex_reference(wf, vertex, site, shown, names)
    if root == "input" and len(names) > 1:
        return input_field_problem(wf, site.at, shown, names)
    return None


def _check_vertex_reference(
    wf: RawWorkflow, vertex: RawVertex, site: _Site, shown: str, names: list[str]
) -> Problem | None:
    target = names[1]
    read = jmespath_path(names[:2])
    if target not in wf.vertices:
        hint = did_you_mean(target, wf.vertices)
        message = f'{shown} reads {read}, but there is no vertex "{target}".{hint}'
        return Problem(site.at, message, Code.UNKNOWN_VERTEX_REFERENCE)
    if target == vertex.id:
        message = f'{shown} reads the output of its own vertex "{target}", which cannot exist yet.'
        return Problem(site.at, message, Code.NOT_ANCESTOR)
    if not wf.is_ancestor(target, vertex.id):
        misspelt = wf.misspelt_dependency(target, vertex.id)
        if misspelt is not None:
            owner, entry = misspelt
            return Problem(
                site.at,
                f'{shown} reads {read}, but "{target}" is not an ancestor of "{vertex.id}": '
                f'dependsOn of "{owner}" names "{entry}", which is no vertex; write "{target}" '
                "there.",
                Code.NOT_ANCESTOR,
            )
        return Problem(
            site.at,
            f'{shown} reads {read}, but "{target}" is not an ancestor of '
            f'"{vertex.id}", so its output may not exist yet; add "{target}" to dependsOn of '
            f'"{vertex.id}" (directly or through another vertex).',
            Code.NOT_ANCESTOR,
        )
    if len(names) > 2 and names[2] != "output":
        # `outputs` (a MERGE's list is output.outputs) is a slip for `output`; `body` is a
        # field of the output with `output.` left out.
        if did_you_mean(names[2], ["output"]):
            fix = f"did you mean {jmespath_path([*names[:2], 'output', *names[3:]])}?"
        else:
            fix = f"e.g. {jmespath_path([*names[:2], 'output', *names[2:]])}"
        return Problem(
            site.at,
            f"{shown} reads {jmespath_path(names[:3])}; a vertex's result is under "
            f"{jmespath_path([*names[:2], 'output'])} ({fix}).",
            Code.UNKNOWN_CONTEXT,
        )
    return output_path_problem(site.at, shown, wf.vertices[target].type, names)
