"""Which destination keys an operator can cap: only keys a GATEWAY call can have.

A call's admission key is its vertex's explicit `destination` name, or else the URL's
`scheme://host:port` as `vertices.gateway_request.destination_key` computes it: lower-case, the
port always written (80/443 when the URL omits it), no path. A cap stored under any other
spelling (`http://host:8080/path`, `127.0.0.1:8765/`, `HTTP://Host`) would silently match
nothing, so it is refused with what the key should have been.
"""

from __future__ import annotations

import re

from schemas.errors import InvalidRequest, StepFailure
from vertices.gateway_request import destination_key

MAX_DESTINATION_CHARS = 300
"""The longest key the store holds."""
GATEWAY_SCHEMES = ("http://", "https://")
SHAPE = (
    "a destination key is scheme://host:port as computed from a GATEWAY url (lower-case, "
    "with its port: e.g. http://billing:8080 or https://api.example.com:443), or a vertex's "
    "explicit destination name"
)
_ADDRESS_WITHOUT_SCHEME = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}(/.*)?$")
"""`host:port`, maybe with a path: an address whose scheme was left out, not a name."""


def _refuse(key: str, why: str, suggestion: str | None = None) -> InvalidRequest:
    hint = f"; did you mean {suggestion!r}?" if suggestion and suggestion != key else ""
    return InvalidRequest(
        f"destination {key!r} can never match a call: {why}{hint} ({SHAPE})",
        code="invalid_destination",
    )


def check_destination(key: str) -> str:
    """`key` when some GATEWAY call can have it as its admission key; otherwise raises
    `InvalidRequest(code="invalid_destination")` saying what the key must look like."""
    if not key.strip():
        raise _refuse(key, "it is empty")
    if key != key.strip():
        raise _refuse(key, "keys never start or end with spaces", key.strip())
    if len(key) > MAX_DESTINATION_CHARS:
        raise _refuse(key[:40] + "…", f"it is longer than {MAX_DESTINATION_CHARS} characters")
    if "{{" in key:
        raise _refuse(key, "expressions are evaluated per call; cap the value they give")
    if "://" in key:
        return _check_url_key(key)
    if _ADDRESS_WITHOUT_SCHEME.match(key):
        address = key.split("/", 1)[0]
        raise _refuse(key, "it is an address without its scheme", f"http://{address.lower()}")
    return key


def _check_url_key(key: str) -> str:
    if not key.lower().startswith(GATEWAY_SCHEMES):
        raise _refuse(key, "GATEWAY calls use http:// or https:// only")
    try:
        canonical = destination_key(key, None)
    except StepFailure as failure:
        raise _refuse(key, failure.message) from failure
    if canonical != key:
        raise _refuse(key, f"calls to that address have the key {canonical!r}", canonical)
    return key
