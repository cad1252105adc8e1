"""The hot path's JSON codec gives the values the standard library gives, and falls back to it
wherever orjson would refuse a document or write it differently."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from schemas import json_codec

SAME_VALUES: list[Any] = [
    {"status": 200, "headers": {"content-type": "application/json"}, "body": {"ok": True}},
    {"id": 1234, "name": "héllo ✓", "nested": [1, 2.5, None, False, {"a": []}]},
    [],
    "text",
    0.1,
    1e16,
    -0.0,
    None,
]


@pytest.mark.parametrize("value", SAME_VALUES)
def test_dumps_then_loads_round_trips_like_the_standard_library(value: Any) -> None:
    text = json_codec.dumps(value)
    assert json.loads(text) == value
    assert json_codec.loads(text) == value
    assert json_codec.loads(json.dumps(value)) == json.loads(json.dumps(value))


def test_dumps_is_compact_and_keeps_non_ascii_text() -> None:
    assert json_codec.dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'


def test_non_string_keys_become_strings_as_with_the_standard_library() -> None:
    assert json_codec.dumps({1: "a", 2.5: "b"}) == '{"1":"a","2.5":"b"}'


def test_integers_beyond_64_bits_are_written_and_read() -> None:
    big = {"n": 2**70}
    assert json_codec.dumps(big) == '{"n":1180591620717411303424}'
    assert json_codec.loads('{"n":1180591620717411303424}') == big


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_is_written_as_the_standard_library_writes_it(bad: float) -> None:
    # orjson would write null; the standard library writes NaN / Infinity (refused by
    # PostgreSQL, as before): the value must not turn into null silently.
    assert json_codec.dumps({"x": [1, {"y": bad}]}) == json.dumps(
        {"x": [1, {"y": bad}]}, separators=(",", ":")
    )


def test_null_without_a_non_finite_float_stays_on_the_fast_path() -> None:
    assert json_codec.dumps({"a": None, "b": 1.5}) == '{"a":null,"b":1.5}'


def test_non_finite_constants_are_read_as_the_standard_library_reads_them() -> None:
    value = json_codec.loads('{"x": NaN, "y": Infinity}')
    assert math.isnan(value["x"]) and value["y"] == math.inf


def test_invalid_json_raises_the_standard_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        json_codec.loads("{not json")


def test_unknown_types_raise_type_error_like_the_standard_library() -> None:
    with pytest.raises(TypeError):
        json_codec.dumps({"a": object()})


@pytest.mark.parametrize(
    "value", [*SAME_VALUES, {1: "a"}, {"n": 2**70}, {"x": math.nan}, {"s": "\ud800"}]
)
def test_dumps_sized_gives_the_text_of_dumps_and_its_size_in_utf8(value: Any) -> None:
    """A fan-out sizes each child's input with it (on fast and fallback paths alike)."""
    text, size = json_codec.dumps_sized(value)
    assert text == json_codec.dumps(value)
    assert size == len(text.encode("utf-8", "surrogatepass"))
