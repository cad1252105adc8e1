"""`uniqueItems` and `enum` in time linear in the instance (docs/security.md, 'Input limits').

jsonschema's `uniqueItems` sorts the array, and when its items do not sort (objects, or
numbers mixed with strings) compares every item with every other one: 5,000 distinct objects
in a 64 KB run input took 70 s. Its `enum` compares the instance with each allowed value in
turn, so an array of 50,000 items under `{"items": {"enum": [250 values]}}` cost 12.5 million
comparisons. Both are answered here with hashing, under the same equality (`same_key`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import ValidationError


def same_key(value: Any) -> Any:
    """A hashable key equal for the JSON values JSON Schema counts as equal: 1 and 1.0,
    objects in any key order; true and 1 not (as jsonschema's `equal`)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("number", value)
    if isinstance(value, float):
        # Integral floats as the int they equal, exactly (2**53 + 1 stays apart from 2.0**53).
        return ("number", int(value) if value.is_integer() else value)
    if isinstance(value, list):
        return ("array", tuple(same_key(v) for v in value))
    if isinstance(value, dict):
        return ("object", tuple(sorted((k, same_key(v)) for k, v in value.items())))
    return ("other", repr(value))


def unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """`uniqueItems`, one pass over the array."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = same_key(item)
        if key in seen:
            yield ValidationError(f"the array of {len(instance)} items has non-unique elements")
            return
        seen.add(key)


_ENUM_KEYS: dict[int, tuple[Any, frozenset[Any]]] = {}
"""The keys of each `enum` list met, by `id` (the list is kept with them, so no other list can
take its id): a schema checks many instances against the same list."""
_ENUMS_KEPT = 1_024


def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """`enum`, one set lookup for the instance (the list's keys computed once)."""
    if isinstance(enums, list):
        kept = _ENUM_KEYS.get(id(enums))
        if kept is None or kept[0] is not enums:
            if len(_ENUM_KEYS) >= _ENUMS_KEPT:
                _ENUM_KEYS.clear()
            kept = (enums, frozenset(same_key(v) for v in enums))
            _ENUM_KEYS[id(enums)] = kept
        allowed = kept[1]
    else:  # not a valid schema (publication refuses it): what iterating it gives, as jsonschema
        allowed = frozenset(same_key(v) for v in enums)
    if same_key(instance) not in allowed:
        yield ValidationError(f"the value is not one of the {len(allowed)} allowed values")
