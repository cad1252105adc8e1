"""The nesting limit every JSON SchemaBridge reads is held to, and its measure on text
(docs/security.md, 'Input limits').

Here rather than in `engine.validation` because a GATEWAY (`vertices/gateway_response.py`)
measures a downstream's answer with it, and vertices never import the engine. The limit's
value comes from `engine.settings.Settings.nesting_depth_limit`, whose default is
`DEFAULT_MAX_NESTING_DEPTH` and whose ceiling is `HARD_MAX_NESTING_DEPTH`.
"""

from __future__ import annotations

DEFAULT_MAX_NESTING_DEPTH = 64
"""Most nested arrays and objects (the outermost counts as 1) by default."""
HARD_MAX_NESTING_DEPTH = 256
"""Ceiling on the nesting limit whatever the settings say: deeper data could exhaust Python's
stack inside the JSON parser, the JSON Schema validator or expression evaluation, which
recurse."""

_DELETE = bytes(byte for byte in range(256) if byte not in b'[]{}"')
"""Every byte but brackets, braces and quotes. No byte of a multi-byte UTF-8 sequence is ASCII,
so deleting these bytes from UTF-8 text keeps exactly its brackets, braces and quotes."""
_BRACES = bytes.maketrans(b"{}", b"[]")


def nesting_exceeds(text: str, max_depth: int) -> bool:
    """Whether the JSON `text` nests arrays and objects deeper than `max_depth`, decided with
    string operations that run in C (no Python step per value or per bracket): escapes are
    dropped, then every byte but brackets, braces (made brackets) and quotes, then what lies
    between quotes (the strings); each pass then removes every innermost `[]`, so the text is
    at most `max_depth` deep exactly when `max_depth` passes leave nothing. Text that is not
    JSON (unbalanced or mismatched brackets) may be answered either way: parsing it says what
    is wrong.

    A text holding no more brackets than `max_depth` cannot be too deep, and one `str.count`
    per bracket proves it: that is all a typical small document costs. Otherwise it costs less
    than parsing the text, up to twice that for a large text nearly as deep as the limit
    throughout (bench/results-limits.md)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    if "\\" in text:
        # Inside a string backslashes pair up from the left, so once every pair is dropped a
        # backslash is left before a quote only where that quote is escaped (and outside
        # strings no backslash is JSON).
        text = text.replace("\\\\", "").replace('\\"', "")
    kept = text.encode("utf-8", "surrogatepass").translate(_BRACES, _DELETE)
    brackets = b"".join(kept.split(b'"')[::2])
    for _ in range(max_depth):
        if not brackets:
            return False
        inner_removed = brackets.replace(b"[]", b"")
        if len(inner_removed) == len(brackets):
            return False  # unbalanced: not JSON
        brackets = inner_removed
    return bool(brackets)
