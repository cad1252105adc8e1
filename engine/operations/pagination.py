"""Opaque cursors and page limits of keyset-paginated lists.

A cursor is the base64url text of a small JSON object: the list it belongs to (`kind`), the
keys of the last row of the page it follows, a digest of the list's scope (its filter, the
parent run, the tenant) and a check digest over all of that. A cursor that does not decode, was
edited, or comes from another list or another filter is refused with
`InvalidRequest(code="invalid_cursor")` rather than silently starting somewhere else.

The check digest catches edited and truncated cursors; it is not a secret, and it does not
need to be: a cursor only says where a page starts, and what a caller may see is decided by the
query's own conditions (its tenant scope), never by the cursor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from schemas.errors import InvalidRequest

MAX_LIMIT = 500
"""The largest page any list serves."""
MAX_ROW_ID = 2**63 - 1
"""The largest row id the store can hold (SQLite's INTEGER, PostgreSQL's bigint): a cursor
past it is refused, not sent to the database, whose driver cannot even bind it."""
MAX_INTEGER = 2**31 - 1
"""The largest value of an integer column (a version, an item index: PostgreSQL's integer),
for the parameters that name one."""
CURSOR_VERSION = 1
_DIGEST_CHARS = 16


def check_limit(limit: int, *, maximum: int = MAX_LIMIT) -> int:
    """`limit` when it is in 1..maximum, else `InvalidRequest(code="invalid_limit")`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidRequest(
            f"limit must be an integer from 1 to {maximum}; got {limit!r}", code="invalid_limit"
        )
    return limit


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]


def scope_digest(kind: str, scope: dict[str, Any]) -> str:
    """The digest of a list's scope: the same list with the same filter, the same digest."""
    return _digest({"kind": kind, "scope": scope})


def encode_cursor(kind: str, keys: Sequence[Any], scope: str) -> str:
    """The cursor of the page after the row with `keys`, in the list `kind` with `scope`
    (a `scope_digest`)."""
    body = {"v": CURSOR_VERSION, "k": kind, "p": list(keys), "s": scope}
    body["c"] = _digest(body)
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def invalid_cursor(reason: str) -> InvalidRequest:
    """`invalid_cursor`, naming the parameter that carried it (`details.parameter`)."""
    return InvalidRequest(
        f"invalid cursor: {reason}", code="invalid_cursor", details={"parameter": "cursor"}
    )


def invalid_filter(
    message: str, parameter: str, accepted: frozenset[str] | None = None
) -> InvalidRequest:
    """`invalid_filter`, naming the filter's `parameter` (its name on the wire: the REST
    query parameter, a batch retry's `filter` field) and, for a closed set, the values it
    `accepted` (`details.parameter`, `details.accepted`), as `invalid_cursor` names its own."""
    details: dict[str, Any] = {"parameter": parameter}
    if accepted is not None:
        details["accepted"] = sorted(accepted)
    return InvalidRequest(message, code="invalid_filter", details=details)


def decode_cursor(cursor: str, kind: str, scope: str) -> list[Any]:
    """The row keys a cursor carries, after checking it is intact and belongs to the list
    `kind` with `scope`; otherwise `InvalidRequest(code="invalid_cursor")`."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        body = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (UnicodeError, binascii.Error, ValueError, RecursionError) as exc:
        # RecursionError: a cursor is any caller's text; the longest a route takes decodes to
        # 1,500 brackets, past what the parser recurses through (a real one nests 2 deep).
        raise invalid_cursor("it is not a cursor this server issued") from exc
    if not isinstance(body, dict) or not isinstance(body.get("p"), list):
        raise invalid_cursor("it is not a cursor this server issued")
    check = body.pop("c", None)
    if check != _digest(body) or body.get("v") != CURSOR_VERSION:
        raise invalid_cursor("it was altered")
    if body.get("k") != kind:
        raise invalid_cursor(f"it belongs to another list ({body.get('k')}), not to {kind}")
    if body.get("s") != scope:
        raise invalid_cursor(
            "it belongs to the same list with other filters; start again without it"
        )
    keys: list[Any] = body["p"]
    return keys


def time_and_id_key(keys: list[Any]) -> tuple[float, str]:
    """The (creation time, id) a cursor of a list newest first carries (runs, deployments),
    or `invalid_cursor`. A cursor's check digest is no secret: its keys are any caller's, so
    each is checked to be what the database can compare (a finite float, an id), never a 500
    there."""
    match keys:
        case [int() | float() as created_at, str() as row_id] if not isinstance(created_at, bool):
            if abs(created_at) <= MAX_ROW_ID:  # NaN and infinity are not either
                return float(created_at), row_id
    raise invalid_cursor("it was altered")
