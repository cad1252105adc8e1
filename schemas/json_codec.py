"""The JSON codec of the hot path: orjson, with the standard library where orjson refuses.

Every child of a fan-out has its input, its step's output, its run's output and its log lines
written to JSON columns and read back, several small documents each; `json` spends 10-60 µs
on each of those, orjson a tenth of that. The store's engines use `dumps` and `loads` for
every JSON column (`engine.store.db`).

The values are the same as with `json`; only the text differs (compact, UTF-8 unescaped,
shortest float forms such as `1e16`), and nothing reads these columns as text except to parse
them. Where orjson refuses a value that `json` takes, `json` does it, so no document that was
accepted before is refused now:

* `dumps`: keys that are not strings (`json` turns `1` into `"1"`), integers beyond 64 bits,
  types orjson does not know, and a float NaN or infinity (orjson would write `null`; `json`
  writes `NaN`, which PostgreSQL refuses, as before) — all go through `json.dumps`;
* `loads`: `NaN`, `Infinity`, integers beyond 64 bits (which `json` parses) go through
  `json.loads`. Invalid JSON raises `json.JSONDecodeError` either way (orjson's error is a
  subclass of it).

A non-finite float is looked for only when orjson's text contains `null`, so the check costs
nothing on documents without one.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def dumps(value: Any) -> str:
    """`value` as compact JSON text (see the module docstring for what falls back)."""
    encoded = _encoded(value)
    return encoded.decode() if isinstance(encoded, bytes) else encoded


def dumps_sized(value: Any) -> tuple[str, int]:
    """`value` as `dumps` writes it, and that text's size in UTF-8 bytes, counted on the
    bytes orjson produced rather than by encoding the text again (a fan-out sizes every
    child's input this way, on its way to the insert: `vertices.spawner`)."""
    encoded = _encoded(value)
    if isinstance(encoded, bytes):
        return encoded.decode(), len(encoded)
    return encoded, len(encoded.encode("utf-8", "surrogatepass"))


def _encoded(value: Any) -> bytes | str:
    """orjson's UTF-8 bytes, or `json`'s text where orjson refuses `value` or would write a
    non-finite float as `null`: the one choice `dumps` and `dumps_sized` both make."""
    try:
        raw = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _stdlib_dumps(value)
    if b"null" in raw and _non_finite(value):
        return _stdlib_dumps(value)
    return raw


def _stdlib_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _non_finite(value: Any) -> bool:
    """Whether a float NaN or infinity is anywhere in `value`."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    return False


def loads(text: str | bytes) -> Any:
    """The value of JSON `text` (see the module docstring for what falls back)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
