"""A value pydantic refused, said as what it takes and what it was given ("should be a number
of seconds, not '7d'", "should be at least 1, not '-1'") rather than pydantic's "Input should
be a valid number, unable to parse string as a number". The CLI says so of settings, the REST
API of query parameters: both read one wording from here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TAKES = {
    "bool_parsing": "true or false",
    "int_parsing": "a whole number",
    "int_parsing_size": "a whole number of fewer digits",
    "float_parsing": "a number",
}
"""What a value that did not parse takes, by pydantic's error type."""

BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}
"""A bound as words, and the key of pydantic's error context that holds it."""

LENGTHS = {
    "string_too_short": ("at least", "min_length"),
    "string_too_long": ("at most", "max_length"),
}
"""A text's length bound as words, and the key of pydantic's error context that holds it."""

_SHOWN_CHARS = 40


def given_words(value: object) -> str:
    """ ", not 'maybe'": the text a value was given as, cut when long; "" for anything else
    (a JSON body's value is said by its pointer, not quoted)."""
    if not isinstance(value, str):
        return ""
    return f", not {_cut(value)!r}"


def given_number_words(value: object) -> str:
    """ ", not 150": a JSON number a body gave, cut when long (an integer of 4,000 digits
    parses); "" for anything else."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    return f", not {_cut(str(value))}"


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def problem_in_words(
    problem: Mapping[str, Any], unit: str = "", short_unit: str = ""
) -> str | None:
    """`problem` (one entry of pydantic's `errors()`) in words, or None when its type is
    neither a parse nor a bound. `unit` follows a number's kind (" of seconds"), `short_unit`
    a bound ("3600 s"); a yes/no or a number too long to read takes neither."""
    kind, given = problem.get("type"), given_words(problem.get("input"))
    if kind in ("int_parsing", "float_parsing"):
        return f"should be {TAKES[kind]}{unit}{given}"
    if kind in TAKES:
        return f"should be {TAKES[kind]}{given}"
    if kind in BOUNDS:
        words, key = BOUNDS[kind]
        bound = (problem.get("ctx") or {}).get(key)
        if bound is None:
            return None
        # A float bound with nothing after the point reads as the whole number it is.
        shown = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        return f"should be {words} {shown}{short_unit}{given}"
    return None


def length_in_words(problem: Mapping[str, Any]) -> str | None:
    """A text refused for its length in words ("should be at most 256 characters long, not
    300"), or None when `problem` is not that. The length, not the text: a value of 300
    characters quoted would bury the bound."""
    kind, text = problem.get("type"), problem.get("input")
    if kind not in LENGTHS or not isinstance(text, str):
        return None
    words, key = LENGTHS[kind]
    bound = (problem.get("ctx") or {}).get(key)
    if not isinstance(bound, int):
        return None
    return (
        f"should be {words} {bound:,} character{'' if bound == 1 else 's'} long, not {len(text):,}"
    )
