"""Reading a GATEWAY answer: bounded body reads, body parsing, excerpts for errors.

A successful answer's body is read up to `max_body_bytes` (`MAX_RESPONSE_BYTES`, default
1 MiB), counted while streaming after content decoding, so neither a lying Content-Length nor
a compressed bomb can exhaust memory. A longer body is cut at the limit and never read further
(the connection is closed, not drained); it is kept as text, flagged `truncated`, since a
prefix of a JSON document is not JSON (docs/security.md, 'Input limits'). A whole body is
parsed: JSON when the media type is JSON (`application/json`, `text/json`, `*+json`; decoded
with the declared charset, else UTF-8; an empty body is null), text otherwise (decoded with
the declared charset, UTF-8 by default, undecodable bytes replaced). A body declared JSON but
unparseable is an `InvalidResponse`, and so is one nesting arrays and objects deeper than the
nesting limit every JSON SchemaBridge reads is held to (`MAX_NESTING_DEPTH`, 64): deeper, it
would crash the parser (a `RecursionError`) or, accepted, carry its depth into the next
step's expressions and request body. An unsuccessful answer's body is only needed for the
error shown to operators, so at most `ERROR_BODY_READ_BYTES` are read from it before the
connection is let go.
"""

from __future__ import annotations

import codecs
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from schemas.errors import SchemaBridgeError
from schemas.json_depth import DEFAULT_MAX_NESTING_DEPTH, nesting_exceeds
from schemas.redaction import Redactor
from vertices.gateway_request import is_json_media_type

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Most bytes of a successful response body a GATEWAY step keeps. Default 1 MiB."""
ERROR_BODY_READ_BYTES = 4096
"""How much of an unsuccessful answer's body is read (for the excerpt)."""
EXCERPT_CHARS = 500
"""Length of the body excerpt kept in a failure's HTTP details."""
DETAIL_HEADERS = (
    "content-type",
    "content-length",
    "retry-after",
    "date",
    "server",
    "x-request-id",
    "x-correlation-id",
    "request-id",
)
"""Response headers copied into a failure's HTTP details (the rest may hold secrets)."""


@dataclass(frozen=True)
class Answer:
    """What one attempt received: status, lower-case headers and the (bounded) raw body."""

    status: int
    reason: str
    headers: dict[str, str]
    content: bytes
    charset: str | None
    truncated: bool = False
    """The body went on past the limit; `content` is its first `limit` bytes."""


class InvalidResponse(SchemaBridgeError):
    """The destination answered, but not with something the step can use.

    `answer` holds the status, headers and as much of the body as was read (for the excerpt).
    """

    code = "invalid_response"

    def __init__(self, message: str, answer: Answer) -> None:
        super().__init__(message)
        self.answer = answer


READ_CHUNK_BYTES = 64 * 1024


async def read_answer(response: aiohttp.ClientResponse, limit: int) -> Answer:
    """Read at most `limit` body bytes; a longer body is cut there (`truncated`)."""
    buffer = bytearray()
    # Decoded chunks (gzip/deflate are undone while streaming); bounded: we stop at the limit.
    async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
        room = limit - len(buffer)
        if len(chunk) > room:
            buffer += chunk[:room]
            return _answer(response, bytes(buffer), truncated=True)
        buffer += chunk
    return _answer(response, bytes(buffer))


async def read_error_answer(response: aiohttp.ClientResponse) -> Answer:
    """Read the start of an unsuccessful answer's body; the rest is never downloaded."""
    buffer = bytearray()
    # Bounded: we stop at ERROR_BODY_READ_BYTES.
    async for chunk in response.content.iter_chunked(ERROR_BODY_READ_BYTES):
        buffer += chunk
        if len(buffer) >= ERROR_BODY_READ_BYTES:
            break
    return _answer(response, bytes(buffer[:ERROR_BODY_READ_BYTES]))


def _headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    """Lower-case names; a repeated header's values joined with ", " (RFC 9110 §5.3)."""
    headers: dict[str, str] = {}
    for name, value in response.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _answer(response: aiohttp.ClientResponse, content: bytes, *, truncated: bool = False) -> Answer:
    return Answer(
        status=response.status,
        reason=response.reason or "",
        headers=_headers(response),
        content=content,
        charset=response.charset,
        truncated=truncated,
    )


def _encoding(charset: str | None) -> str:
    if charset:
        try:
            return codecs.lookup(charset).name
        except LookupError:
            pass
    return "utf-8"


def bounded_excerpt(
    content: bytes, charset: str | None, redactor: Redactor | None = None
) -> tuple[str, bool]:
    """The first `EXCERPT_CHARS` characters of a body (an answer's, or a request's), as text,
    redacted before it is cut (a secret across the cut must not leave its first half behind);
    and whether there is more. Only what the excerpt can show is decoded: a window that still
    holds a secret the cut would split (`redactor.longest` more characters), and a character
    the window cuts in half is left out rather than shown as U+FFFD."""
    window = (EXCERPT_CHARS + (redactor.longest if redactor else 0)) * 4
    decoder = codecs.getincrementaldecoder(_encoding(charset))(errors="replace")
    text = decoder.decode(content[:window], final=len(content) <= window)
    if redactor:
        text = redactor.text(text)
    return text[:EXCERPT_CHARS], len(content) > window or len(text) > EXCERPT_CHARS


def excerpt(answer: Answer, redactor: Redactor | None = None) -> str:
    """The first `EXCERPT_CHARS` characters of the answer's body (`bounded_excerpt`)."""
    return bounded_excerpt(answer.content, answer.charset, redactor)[0]


def detail_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in DETAIL_HEADERS if name in headers}


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would make the step output unstorable.
    raise ValueError(f"{name} is not a JSON value")


def _json_text(answer: Answer) -> str:
    """The body as text for the JSON parser: the declared charset, else UTF-8 (RFC 8259 §8.1;
    a leading UTF-8 byte order mark is allowed). Undecodable bytes are an `InvalidResponse`
    saying so, not the codec's guess at what the bytes might have been."""
    encoding = "utf-8"
    if answer.charset:
        with contextlib.suppress(LookupError):
            encoding = codecs.lookup(answer.charset).name
    try:
        return answer.content.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except UnicodeDecodeError as exc:
        label = "UTF-8" if encoding == "utf-8" else encoding
        raise InvalidResponse(
            f"{_declared(answer)} is not valid JSON (not {label} text)", answer
        ) from exc


def _declared(answer: Answer) -> str:
    return f"body declared {answer.headers.get('content-type')}"


def parse_body(answer: Answer, max_depth: int = DEFAULT_MAX_NESTING_DEPTH) -> Any:
    """The body for the step output: JSON when declared JSON, else text (always text when
    `truncated`: the start of a JSON document does not parse). JSON nested deeper than
    `max_depth` is an `InvalidResponse`.

    The depth is measured on the text before it is parsed, never by parsing twice: a body
    with no more brackets than `max_depth` (nearly every answer) costs two `str.count`, and
    only a bracket-rich one the passes of `nesting_exceeds`, which run in C."""
    if not answer.truncated and is_json_media_type(answer.headers.get("content-type")):
        text = _json_text(answer)
        if not text.strip():
            return None
        if nesting_exceeds(text, max_depth):
            raise _too_deep(answer, max_depth)
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            # Unbalanced brackets (`[` a hundred thousand times, never closed) are not
            # measured above, and the parser gives up on them before it sees they never close.
            raise _too_deep(answer, max_depth) from None
        except ValueError as exc:  # JSONDecodeError: its message gives the position
            raise InvalidResponse(f"{_declared(answer)} is not valid JSON: {exc}", answer) from exc
    return answer.content.decode(_encoding(answer.charset), errors="replace")


def _too_deep(answer: Answer, max_depth: int) -> InvalidResponse:
    return InvalidResponse(
        f"{_declared(answer)} nests arrays and objects deeper than {max_depth} levels, "
        "the limit of SCHEMABRIDGE_MAX_NESTING_DEPTH",
        answer,
    )
