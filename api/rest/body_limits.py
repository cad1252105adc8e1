"""How large a body each route reads, below `SCHEMABRIDGE_MAX_BODY_BYTES`.

The global limit (10 MiB) is what a list of workflow documents needs. Every other route takes
something much smaller, bounded by a setting of its own once parsed: a run's input
(`MAX_INPUT_BYTES`, 256 KiB as compact JSON), a resolved output (`MAX_RESPONSE_BYTES`), ids and
a few fields. Parsing is what costs: 10 MiB of small objects held an API process's event loop
for about 3 s (parse, key checks, validation, the input's own size check), every request
beside it waiting, before the input was refused as too large. A route's limit is its
content's bound `SPREAD` times over (room for indentation and the body's other fields), so
an input within its bound is never refused for its whitespace, and anything larger is refused
before it is parsed.
"""

from __future__ import annotations

import re

from engine.settings import Settings

SPREAD = 3
"""How many times its content's compact UTF-8 size a body may be, whitespace aside and each
`\\uXXXX` escape counted as the one character it stands for: room for `\\/` and numbers
written longer than Python writes them."""
_WHITESPACE = (b" ", b"\n", b"\r", b"\t")
_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{4}")
"""A `\\uXXXX` escape: 6 bytes for a character whose UTF-8 may be 1. Go escapes `<`, `>`
and `&` so, .NET those and `'`, `+` and every non-ASCII character, Python's `ensure_ascii`
DEL: an input within its limit, sent by such a client, was 6 times its compact size and
refused. Counted as 1 byte each, they never let more of what costs to parse (objects,
arrays, numbers) through: each is 6 bytes of a string, counted at least 1."""
ESCAPED_AT_MOST = 2
"""A body over its limit by more than this factor, whitespace aside, is refused without
looking for escapes: a content all 6-byte escapes is twice its `SPREAD` of 3, and the search
costs ~30 ms a MiB, so it runs on at most twice the limit."""
ROOM = 64 * 1024
"""Added to every bound: the body's other fields."""
OTHER_CONTENT_BYTES = 256 * 1024
"""The content of a route with no setting of its own (ids, limits, caps, filters): 10,000
ids, the most a batch takes, are ~400 KB as JSON."""

DOCUMENT_PATHS = frozenset({"/workflows", "/workflows/validate", "/workflows/preview"})
"""Routes that read workflow documents, a list of them in one body: the global limit."""
_SUBMISSION = re.compile(r"/workflows/[^/]+/runs")
_RESOLVE = re.compile(r"/runs/[^/]+/steps/[^/]+/resolve")


def _routed(path: str) -> str:
    """The path a request is routed to: Starlette answers `/workflows/` with a 307 to
    `/workflows` (trailing slashes stripped), which a client follows with its body; refused
    here with another route's bound, a list of documents never got there."""
    return path.rstrip("/") or "/"


def body_limit(path: str, settings: Settings) -> int:
    """The most bytes a request to `path` (as sent, before routing) reads, whitespace aside.
    Matched on the path rather than the route, so a body is refused before anything parses
    it (`api.rest.body_depth` measures its nesting, the route parses it)."""
    path = _routed(path)
    if path in DOCUMENT_PATHS:
        return settings.max_body_bytes
    if _SUBMISSION.fullmatch(path):
        content = settings.max_input_bytes
    elif _RESOLVE.fullmatch(path):
        content = settings.max_response_bytes
    else:
        content = OTHER_CONTENT_BYTES
    return min(settings.max_body_bytes, SPREAD * content + ROOM)


def over(body: bytes, limit: int) -> bool:
    """Whether `body` holds more than `limit` bytes that are not JSON whitespace, each
    `\\uXXXX` escape counted as one (spaces in strings, and a `\\\\u0041` that is not an
    escape, are not told apart: they are let through, never refused)."""
    if len(body) <= limit:
        return False
    size = len(body) - sum(body.count(space) for space in _WHITESPACE)
    if size <= limit:
        return False
    if size > ESCAPED_AT_MOST * limit or b"\\u" not in body:
        return True
    return size - 5 * len(_ESCAPE.findall(body)) > limit


def too_large_message(path: str, limit: int, settings: Settings) -> str:
    """What a body over the route's limit is told: the bound and the setting behind it."""
    path = _routed(path)
    if path in DOCUMENT_PATHS or limit == settings.max_body_bytes:
        behind = "SCHEMABRIDGE_MAX_BODY_BYTES on the server"
    elif _SUBMISSION.fullmatch(path):
        behind = (
            f"{SPREAD} times a run input's limit of {settings.max_input_bytes:,} bytes as "
            f"compact JSON and {ROOM:,} for its other fields, SCHEMABRIDGE_MAX_INPUT_BYTES on "
            "the server"
        )
    elif _RESOLVE.fullmatch(path):
        behind = (
            f"{SPREAD} times an output's limit of {settings.max_response_bytes:,} bytes as "
            f"compact JSON and {ROOM:,} for its other fields, SCHEMABRIDGE_MAX_RESPONSE_BYTES on "
            "the server"
        )
    else:
        behind = "what this route's fields can hold"
    return (
        f"the request body is larger than the {limit:,} bytes this route reads, whitespace "
        f"aside ({behind}): send a smaller one, passing large data by reference (a URL the "
        "workflow fetches)"
    )
