"""Phase 1 of validation: raw bytes → JSON value, refusing anything unsafe to parse.

Order matters, cheapest and most protective first:
1. size — a document over `max_document_bytes` is refused before any decoding or parsing;
2. encoding — bytes must be UTF-8 (a leading BOM is tolerated); NUL bytes mean a binary file;
3. nesting depth — counted by a flat regex scan over the text (strings skipped), so a
   10,000-deep document is refused with a line and column instead of reaching the recursive
   `json` decoder, where it would raise `RecursionError`;
4. JSON syntax — `json.loads`, reported with line and column; NaN/Infinity (not JSON) and
   duplicate object keys (which `json` would silently collapse) are problems too.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.validation.common import Code, Limits, pointer
from schemas.errors import Problem

_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# A JSON string (unrolled loop: linear, no backtracking) or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_OPENERS = frozenset("[{")


@dataclass
class Loaded:
    """The outcome of phase 1 for one document.

    `parsed` is True when `data` holds the document's JSON value; later phases then still run,
    even if `problems` is not empty (duplicate keys do not stop the other checks).
    """

    data: Any = None
    problems: list[Problem] = field(default_factory=list)
    parsed: bool = False


class _DuplicateKeys(dict[str, Any]):
    """A JSON object in which some key was written more than once (the last value wins)."""

    duplicates: list[str]


class _NotJson(ValueError):
    pass


def load(raw: bytes | str, limits: Limits) -> Loaded:
    """Turn one raw document into a JSON value, or into the problems that prevent it."""
    too_large = _check_size(raw, limits)
    if too_large:
        return Loaded(problems=[too_large])
    if isinstance(raw, bytes):
        decoded = _decode(raw)
        if isinstance(decoded, Problem):
            return Loaded(problems=[decoded])
        text = decoded
    else:
        text = raw
    if "\x00" in text:
        offset = text.index("\x00")
        return Loaded(problems=[_problem(Code.BINARY, _binary_message(text, offset))])
    too_deep = _check_depth(text, limits.max_nesting_depth)
    if too_deep:
        return Loaded(problems=[too_deep])
    return _parse(text)


def _problem(code: str, message: str, at: str = "") -> Problem:
    return Problem(at, message, code)


def _check_size(raw: bytes | str, limits: Limits) -> Problem | None:
    limit = limits.max_document_bytes
    # A str is measured in UTF-8 bytes; its length in characters is a cheap lower bound.
    size_over = len(raw) > limit or (
        isinstance(raw, str) and len(raw.encode("utf-8", "surrogatepass")) > limit
    )
    if not size_over:
        return None
    return _problem(
        Code.TOO_LARGE,
        f"The document is larger than the limit of {limit:,} bytes; split it into smaller "
        "workflows or raise SCHEMABRIDGE_MAX_DOCUMENT_BYTES.",
    )


def _decode(raw: bytes) -> str | Problem:
    if raw.startswith(_UTF16_BOMS):
        return _problem(
            Code.NOT_UTF8, "The document is UTF-16 text; save it as UTF-8 (JSON requires UTF-8)."
        )
    body = raw.removeprefix(_UTF8_BOM)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if b"\x00" in body[:1024]:
            return _problem(Code.BINARY, "The file is binary data, not a JSON document.")
        line = body.count(b"\n", 0, exc.start) + 1
        return _problem(
            Code.NOT_UTF8,
            f"The document is not UTF-8 text: byte 0x{body[exc.start]:02x} at line {line} "
            f"(byte offset {exc.start}) cannot be decoded; save the file as UTF-8.",
        )


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _binary_message(text: str, offset: int) -> str:
    line, col = _line_col(text, offset)
    return (
        f"The document contains a NUL character at line {line}, column {col}; "
        "it looks like a binary file, not JSON."
    )


def _check_depth(text: str, max_depth: int) -> Problem | None:
    # Cheap exit for the common case: not enough brackets to be too deep.
    if text.count("[") + text.count("{") <= max_depth:
        return None
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in _OPENERS:
            depth += 1
            if depth > max_depth:
                line, col = _line_col(text, match.start())
                return _problem(
                    Code.TOO_DEEP,
                    f"The document nests arrays and objects more than {max_depth} levels deep "
                    f"(at line {line}, column {col}); flatten it or raise "
                    "SCHEMABRIDGE_MAX_NESTING_DEPTH.",
                )
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    duplicates: list[str] = []
    for key, value in pairs:
        if key in result and key not in duplicates:
            duplicates.append(key)
        result[key] = value
    if not duplicates:
        return result
    marked = _DuplicateKeys(result)
    marked.duplicates = duplicates
    return marked


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A `\\uD800`-`\\uDFFF` escape: the only way a lone surrogate gets into a string parsed from
bytes (UTF-8 cannot encode one). A pair, or an escaped backslash before `u`, matches too, and only
costs the walk that then finds nothing."""
_TEXT_PROBLEMS = frozenset({Code.DUPLICATE_KEY, Code.NOT_UTF8})


class NotJson(json.JSONDecodeError):
    """Text `json.loads` would take, or fail on with no position, that is not JSON (RFC 8259):
    bytes that are not UTF-8, `NaN` and `Infinity`, a number no float holds (`1e400`), an
    integer longer than Python reads (`sys.get_int_max_str_digits`). Raised by
    `loads_checked` with what the token is and where, as a `json.JSONDecodeError`, so every
    reader of its errors says it as it says a syntax error."""


class _Refused(ValueError):
    """A token a parse hook refused; `loads_checked` finds where it is."""

    def __init__(self, token: str, message: str) -> None:
        super().__init__(message)
        self.token, self.message = token, message


_BARE_TOKEN = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"|-?(?:Infinity|NaN)|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?'
)
"""A JSON string (skipped), or a number or constant outside strings."""


def _constant(name: str) -> Any:
    raise _Refused(name, f"{name} is not a JSON value; write a number or a string instead")


def _finite(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise _Refused(
            token,
            f"the number {_cut(token)} is out of range: a JSON number here must fit a 64-bit "
            "float, at most about 1.8e308",
        )
    return value


def _cut(token: str) -> str:
    return token if len(token) <= 24 else f"{token[:12]}…{token[-6:]} ({len(token):,} characters)"


def _decoded(raw: bytes) -> str:
    """`raw` as UTF-8 text (a leading byte order mark dropped, as `json.loads` drops it), or
    `NotJson` saying which byte is not UTF-8 and where."""
    if raw.startswith(_UTF16_BOMS):
        raise NotJson("the text is UTF-16; JSON text must be UTF-8", raw.decode("latin-1"), 0)
    body = raw.removeprefix(_UTF8_BOM)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = body.decode("utf-8", "replace")
        at = len(body[: exc.start].decode("utf-8"))
        message = (
            f"byte 0x{body[exc.start]:02x} at byte offset {exc.start + len(raw) - len(body)} is "
            "not UTF-8; JSON text must be UTF-8"
        )
        raise NotJson(message, text, at) from None


def _refused_at(text: str, refused: _Refused) -> NotJson:
    """`refused` as a `NotJson` at the first token outside strings that it names."""
    for match in _BARE_TOKEN.finditer(text):
        if match.group() == refused.token:
            return NotJson(refused.message, text, match.start())
    return NotJson(refused.message, text, 0)  # not reached: the parser read the token there


def _too_long_at(text: str, error: ValueError) -> NotJson:
    """An integer past `sys.get_int_max_str_digits`, which `json.loads` refuses with no
    position, as a `NotJson` at the first one."""
    limit = sys.get_int_max_str_digits()
    for match in _BARE_TOKEN.finditer(text):
        digits = match.group().lstrip("-")
        if digits.isdigit() and limit and len(digits) > limit:
            message = (
                f"the number {match.group()[:12]}… has {len(digits):,} digits, more than the "
                f"{limit:,} an integer may have here; send it as a string"
            )
            return NotJson(message, text, match.start())
    return NotJson(str(error), text, 0)


def loads_checked(text: str | bytes) -> tuple[Any, list[Problem]]:
    """`json.loads(text)` (raising what it raises, and `NotJson` for what it would take that
    is not JSON, see there), with a `duplicate_key` problem for each key written twice in one
    object, pointing at the key, and a `not_utf8` problem for each string or key holding an
    unpaired UTF-16 surrogate (`"\\ud800"`), which no UTF-8 encoder takes: for JSON that
    enters anywhere but a workflow file (a REST body, a CLI option), whose other checks have
    their own places."""
    if isinstance(text, bytes):
        text = _decoded(text)  # holds no surrogate itself: the UTF-8 decoder refuses them
        found = _SURROGATE_ESCAPE.search(text) is not None
    else:  # text from elsewhere (argv) may also hold a surrogate itself, not escaped
        found = _SURROGATE_ESCAPE.search(text) is not None or not _is_unicode(text)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        result = dict(items)  # in C: the common object costs one length check more
        if len(result) == len(items):
            return result
        found = True
        return _pairs(items)

    try:
        data = json.loads(
            text, object_pairs_hook=pairs, parse_constant=_constant, parse_float=_finite
        )
    except _Refused as refused:
        raise _refused_at(text, refused) from None
    except json.JSONDecodeError:
        raise
    except ValueError as error:  # an integer of more digits than Python reads
        raise _too_long_at(text, error) from None
    if not found:  # the common case: no walk over the value
        return data, []
    problems = [p for p in _tree_problems(data) if p.code in _TEXT_PROBLEMS]
    return data, sorted(problems)


def duplicate_key_summary(where: str, problems: list[Problem]) -> str:
    """One line for `problems` (`not_utf8` or `duplicate_key`, from `loads_checked`) of the
    JSON `where` names (`body`, `--input`, a file's path): the first one's pointer and
    message, and how many more. The REST API and the command line say it in these words alike."""
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where} {first.pointer or '/'}: {first.message}{more}"


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value; write a number or a string instead")


def _parse(text: str) -> Loaded:
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return Loaded(problems=[_problem(Code.SYNTAX, _syntax_message(text, exc))])
    except RecursionError:
        # Only reachable with a nesting limit above what the scan allows; kept as a backstop.
        message = "The document nests arrays and objects too deeply to parse."
        return Loaded(problems=[_problem(Code.TOO_DEEP, message)])
    except ValueError as exc:  # _NotJson, or an integer with too many digits
        return Loaded(problems=[_problem(Code.SYNTAX, f"The document is not valid JSON: {exc}.")])
    return Loaded(data=data, problems=_tree_problems(data), parsed=True)


def _syntax_message(text: str, exc: json.JSONDecodeError) -> str:
    return f"The document is not valid JSON: {syntax_reason(text, exc)}"


def syntax_reason(text: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with `text` and where (`exc` is what parsing it raised), with the likely
    cause when it is a common one: a comma after the last item, a text cut short, or single
    quotes. `validate`, the command line's JSON options (`--input`, `--output`) and the REST
    API's `invalid_json` say it in these words alike. Empty, it says so: "Expecting value
    (line 1, column 1)" and "ends too early" would send the reader looking for a cut."""
    if not text.strip():
        return "it is empty (0 bytes)." if not text else "it is empty (only blanks, no JSON value)."
    where = f"line {exc.lineno}, column {exc.colno}"
    hint = ""
    # A string left open always runs to the end: JSON strings cannot span lines.
    if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
        hint = " The document ends too early: was it cut short?"
    elif _after_trailing_comma(text, exc.pos):
        hint = (
            f" The `{text[exc.pos]}` there follows a comma: JSON allows none after the last "
            "item, so remove that comma."
        )
    elif text[exc.pos : exc.pos + 1] == "'":
        # Python's and JavaScript's habit, and a shell's quotes swapped: `"{'a': 1}"`.
        hint = ' JSON writes strings and names in double quotes ("), not single ones.'
    return f"{exc.msg} ({where}).{hint}"


def _after_trailing_comma(text: str, position: int) -> bool:
    """Whether the parser stopped at a `}` or `]` that follows a comma (blanks between)."""
    if position >= len(text) or text[position] not in "}]":
        return False
    return text[:position].rstrip().endswith(",")


def _tree_problems(data: Any) -> list[Problem]:
    """Duplicate keys, and strings that are not valid Unicode (unpaired surrogates)."""
    problems: list[Problem] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, str):
            if not _is_unicode(node):
                problems.append(_problem(Code.NOT_UTF8, _SURROGATE_MESSAGE, _shown(at)))
        elif isinstance(node, dict):
            for key in getattr(node, "duplicates", ()):
                problems.append(
                    _problem(
                        Code.DUPLICATE_KEY,
                        f'The key "{_shown(key)}" appears more than once in this object; '
                        "keep only one (JSON readers silently drop all but the last).",
                        _shown(at + pointer(key)),
                    )
                )
            for key, value in node.items():
                if not _is_unicode(key):
                    message = _SURROGATE_MESSAGE.replace("This text", "This key")
                    problems.append(_problem(Code.NOT_UTF8, message, _shown(at + pointer(key))))
                stack.append((at + pointer(key), value))
        elif isinstance(node, list):
            stack.extend((at + pointer(i), v) for i, v in enumerate(node))
    return problems


_SURROGATE_MESSAGE = (
    "This text holds an unpaired UTF-16 surrogate (such as \\ud800), which is not valid "
    "Unicode; remove it or write the whole character."
)


def _shown(text: str) -> str:
    """`text` with each unpaired surrogate written as its escape (`\\ud800`): a pointer or
    key that holds one could not be said in UTF-8 (an answer, a terminal) otherwise."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def deep_pointer(value: Any, max_depth: int) -> str | None:
    """The pointer of the first array or object of `value` (a parsed JSON value) nested
    deeper than `max_depth` levels (the outermost is level 1), or None. Iterative (any depth
    is safe to ask about), and a pointer is only built for the container it returns."""
    if not isinstance(value, dict | list):
        return None
    path: list[str | int] = []
    levels = [_children(value)]
    while levels:
        if len(levels) > max_depth:
            return pointer(*path)
        for key, child in levels[-1]:
            if isinstance(child, dict | list):
                path.append(key)
                levels.append(_children(child))
                break
        else:
            levels.pop()
            if path:
                path.pop()
    return None


def _children(node: dict[str, Any] | list[Any]) -> Iterator[tuple[str | int, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words: `null`, `a boolean`, `an integer`, `a
    number`, `a string`, `an array` or `an object`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
