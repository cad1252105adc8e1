"""The two depth measures of JSON values the limits use: `nesting_exceeds` on text (regular
expressions running in C) and `deep_pointer` on parsed values (where the limit is passed),
checked against a plain recursive definition on random JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.validation import deep_pointer, nesting_exceeds
from engine.validation.common import pointer

_SCALARS = st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{}"\\,: ')
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _at(value: Any, where: str) -> Any:
    for part in where.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


@given(_JSON, st.integers(1, 6))
def test_both_measures_agree_with_the_definition(value: Any, limit: int) -> None:
    too_deep = _depth(value) > limit
    assert nesting_exceeds(json.dumps(value), limit) is too_deep
    found = deep_pointer(value, limit)
    assert (found is not None) is too_deep
    if found is not None:
        # It points at a container at level limit + 1 (the outermost is level 1).
        assert found.count("/") == limit
        assert isinstance(_at(value, found), dict | list)


def test_brackets_in_strings_and_keys_do_not_count() -> None:
    value = {"[[[[": "{{{{]]]]", "k": ['\\"[[[[']}
    assert not nesting_exceeds(json.dumps(value), 2)
    assert deep_pointer(value, 2) is None


def test_not_json_is_left_to_the_parser() -> None:
    assert not nesting_exceeds("[[[[[[}", 2)
    assert not nesting_exceeds("[[[[[[", 2)


def test_the_pointer_escapes_keys() -> None:
    assert deep_pointer({"a/b": {"~": [[]]}}, 3) == pointer("a/b", "~", 0)


def test_any_depth_is_safe_to_ask_about() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    assert deep_pointer(value, 64) == "/0" * 64
