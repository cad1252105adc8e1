"""What to do about an expression that does not compile, for the mistakes JMESPath's own error
leaves unexplained: a name with a `-`, a bare number in a comparison or a default, arithmetic.

JMESPath reads `vertices.paid-orders.output` as `vertices.paid`, then a `-` it has no use for
("Unknown token '-'"), or a number (`a-1`: "Unexpected token: -1"); neither says that such a
name must be written in double quotes (`vertices."paid-orders"`, docs/authoring.md,
'Expressions'). A secret's name cannot have a `-` at all, quoted or not (`SECRET_NAME`), so
`secrets.crm-token` gets the naming rule instead.

`[?qty > 1]` and `input.status || 200` give "invalid token": a JSON literal such as a number
is written in backticks (`` [?qty > `1`] ``, `` input.status || `200` ``). `a + b` gives
"Unknown token +": JMESPath has no arithmetic at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import jmespath
from jmespath import exceptions as jmespath_exceptions

from engine.validation.common import Code
from schemas.expressions import SECRETS_ROOT
from schemas.secret_names import SECRET_NAME_RULE

_HYPHENATED = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)+")
"""A name with `-` in it, as written unquoted."""
_AFTER_SECRETS = re.compile(rf"(?<![A-Za-z0-9_.\"]){SECRETS_ROOT}\s*\.\s*$")
_AFTER_VERTICES = re.compile(r"(?<![A-Za-z0-9_.\"])vertices\s*\.\s*$")
_AFTER_HEADERS = re.compile(
    r"(?<![A-Za-z0-9_.\"])vertices\s*\.\s*(?:\"([^\"]+)\"|([A-Za-z0-9_-]+))"
    r"\s*\.\s*output\s*\.\s*headers\s*\.\s*$"
)
"""Right after `vertices.<id>.output.headers.`: where a GATEWAY's response header name goes."""


@dataclass(frozen=True)
class Hint:
    text: str
    """What to add to the syntax error, starting with "; " (or, `instead`, what to say in
    place of it)."""
    code: str = Code.EXPRESSION_SYNTAX
    instead: bool = False
    """True: the syntax error is beside the point (the name would be refused quoted too)."""


_COMPARED_NUMBER = re.compile(
    r"(?<=[=<>|&])(\s*)(-?\d+(?:\.\d+)?)(?![\w.])|(?<![\w.\]`])(-?\d+(?:\.\d+)?)(?=\s*[=<>!|&])"
)
"""A number written bare right beside a comparison or a logical operator (either side):
`qty > 1`, and the default of `input.status || 200`."""
_ARITHMETIC = re.compile(r"[+/]|\s[-*]\s")


def syntax_hint(
    source: str, vertex_ids: Collection[str], gateways: Collection[str] = ()
) -> Hint | None:
    """The hint for `source` (an expression that does not compile), if one applies;
    `gateways`: the ids of the GATEWAY vertices among `vertex_ids`."""
    return (
        hyphen_hint(source, vertex_ids, gateways) or number_hint(source) or arithmetic_hint(source)
    )


def number_hint(source: str) -> Hint | None:
    """`[?qty > 1]`, `input.status || 200`: numbers compared or given as a default must be
    JSON literals, in backticks."""
    stretches = list(_unquoted(source))
    if not any(_COMPARED_NUMBER.search(text) for _, text in stretches):
        return None
    corrected, last = [], 0
    for start, text in stretches:
        corrected.append(source[last:start])
        corrected.append(_COMPARED_NUMBER.sub(_backticked, text))
        last = start + len(text)
    corrected.append(source[last:])
    fixed = "".join(corrected)
    number = next(m for _, t in stretches if (m := _COMPARED_NUMBER.search(t)))
    shown = (number.group(2) or number.group(3)).strip()
    write = f": write {{{{ {fixed} }}}}" if _compiles(fixed) else ""
    return Hint(f"; numbers are written in backticks (`{shown}`){write}")


def _backticked(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        return f"{match.group(1)}`{match.group(2)}`"
    return f"`{match.group(3)}`"


def arithmetic_hint(source: str) -> Hint | None:
    """`a + b`, `a - b`, `a * 2`, `a / 2`: JMESPath cannot compute."""
    if not any(_ARITHMETIC.search(text) for _, text in _unquoted(source)):
        return None
    return Hint(
        "; JMESPath has no arithmetic (+, -, *, /): its only numeric functions are sum(), "
        "avg(), abs(), ceil() and floor(), so compute other values before the run or in the "
        "service you call"
    )


def hyphen_hint(
    source: str, vertex_ids: Collection[str], gateways: Collection[str] = ()
) -> Hint | None:
    """The hint for `source` (an expression that does not compile), when it has a name with
    `-` outside quotes; None otherwise. A response header name of one of `gateways` is
    written in lower case, as the GATEWAY stores it (`output_paths` refuses any other)."""
    found = list(_hyphenated(source))
    if not found:
        return None
    for position, name in found:
        if _AFTER_SECRETS.search(source[:position]):
            meant = name.replace("-", "_").upper()
            return Hint(
                f'names the secret "{name}", which is not a secret name: {SECRET_NAME_RULE}; '
                f"store it as {meant} and write {{{{ secrets.{meant} }}}}",
                Code.INVALID_SECRET_REFERENCE,
                instead=True,
            )
    written = [(p, n, _header_name(source[:p], n, gateways)) for p, n in found]
    corrected = _quoted(source, written)
    vertices = [n for p, n in found if _AFTER_VERTICES.search(source[:p])]
    if _compiles(corrected) and all(n in vertex_ids for n in vertices):
        lowered = any(n != w for _, n, w in written)
        case = " (response header names are stored in lower case)" if lowered else ""
        return Hint(
            f'; a name with "-" must be in double quotes: write {{{{ {corrected} }}}}{case}'
        )
    return Hint(f'; a name with "-" must be in double quotes, as in "{found[0][1]}"')


def _hyphenated(source: str) -> Iterator[tuple[int, str]]:
    """(position, name) of each name with `-` outside quotes and backticks."""
    for start, text in _unquoted(source):
        for match in _HYPHENATED.finditer(text):
            yield start + match.start(), match.group()


def _unquoted(source: str) -> Iterator[tuple[int, str]]:
    """(position, text) of the stretches of `source` outside '…', "…" and `…` (with the
    lexer's backslash escapes)."""
    position = start = 0
    end = len(source)
    while position < end:
        quote = source[position]
        if quote not in "'\"`":
            position += 1
            continue
        if position > start:
            yield start, source[start:position]
        close = position + 1
        while close < end and source[close] != quote:
            close += 2 if source[close] == "\\" else 1
        position = start = close + 1
    if start < end:
        yield start, source[start:]


def _header_name(before: str, name: str, gateways: Collection[str]) -> str:
    """`name` as it is to be written after `before`: lower-cased where it is a response header
    name of a GATEWAY (`Content-Type` would read null in every run)."""
    match = _AFTER_HEADERS.search(before)
    if match is not None and (match.group(1) or match.group(2)) in gateways:
        return name.lower()
    return name


def _quoted(source: str, found: list[tuple[int, str, str]]) -> str:
    """`source` with each of the names `found` (position, name, written as) in double
    quotes."""
    out, last = [], 0
    for position, name, written in found:
        out.append(source[last:position])
        out.append(f'"{written}"')
        last = position + len(name)
    out.append(source[last:])
    return "".join(out)


def _compiles(source: str) -> bool:
    # A hint never suggests a backtick literal JMESPath only warns about (and the warning,
    # raised once per text it caches, would depend on what was compiled before).
    if legacy_literal(source) is not None:
        return False
    try:
        jmespath.compile(source)
    except (jmespath_exceptions.JMESPathError, RecursionError):
        return False
    return True


def legacy_literal(source: str) -> str | None:
    """The first backtick literal in `source` that is not JSON, if any.

    JMESPath still accepts such literals as strings but warns (`PendingDeprecationWarning`) and
    caches the result, so whether the warning shows depends on what was compiled before. The
    validator decides up front instead, mirroring the lexer's quoting rules: `'raw'`,
    `"identifier"` and `` `literal` ``, each with backslash escapes.
    """
    position, end = 0, len(source)
    while position < end:
        quote = source[position]
        if quote not in "'\"`":
            position += 1
            continue
        close = position + 1
        while close < end and source[close] != quote:
            close += 2 if source[close] == "\\" else 1
        if quote == "`" and close < end:
            lexeme = source[position + 1 : close].replace("\\`", "`")
            if not _is_json(lexeme):
                return lexeme
        position = close + 1
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True
