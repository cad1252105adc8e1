"""A bound on the work of checking one value against a JSON Schema (docs/security.md, 'Input
limits').

A run's input is bounded (`MAX_INPUT_BYTES`) and so is its workflow's inputSchema
(publication), but what checking one against the other costs is not their sum: some schemas
make jsonschema evaluate the same part of the input again and again. A recursive schema closed
with `unevaluatedProperties: false` re-evaluates every subtree once per level above it, so its
cost doubles with each level of nesting: an input nested 12 deep took 1 s, 20 deep 40 s, and 64
(the nesting limit) longer than anyone waits. An `anyOf` whose branches each walk a large array
costs the branches times the array; `patternProperties` costs the patterns times the names.
Such a schema is valid, and the input is chosen by whoever submits the run.

So a check made inside `at_most` counts its work: every sub-schema a `pinned` validator enters
(`evolve`, which jsonschema calls for each one, its `unevaluated*` bookkeeping included), every
keyword a `counted` keyword set evaluates, and what a keyword loops over (`spend`). Past the
bound the check stops with `TooMuchWork`, and the caller refuses the input with one problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

MAX_CHECK_WORK = 300_000
"""Work units one input check may spend: a second or two of CPU. A unit is a sub-schema
entered, a keyword evaluated, or one entry of what a keyword loops over (its list or object,
the names it matches against patterns). A 256 KiB input of 40,000 integers under
`{"items": {"type": "integer"}}` spends 80,000; of 4,000 objects of five required string
properties (`type`, `required` and `properties` on each), 96,000."""

_LEFT: ContextVar[list[int] | None] = ContextVar("schema_work_left", default=None)
"""The units the running check has left (a list: counted down in place); None outside
`at_most`: a validator used on its own is not bounded."""


class TooMuchWork(Exception):
    """The check would spend more than its bound."""


@contextmanager
def at_most(units: int = MAX_CHECK_WORK) -> Iterator[None]:
    """Bound the work of the checks made inside (`TooMuchWork` past it). A context variable:
    a check run in a worker thread (`anyio.to_thread`) keeps the bound it was started under."""
    token = _LEFT.set([units])
    try:
        yield
    finally:
        _LEFT.reset(token)


def spend(units: int = 1) -> None:
    """Count `units` of work against the running `at_most`, if any."""
    left = _LEFT.get()
    if left is not None:
        left[0] -= units
        if left[0] < 0:
            raise TooMuchWork


Keyword = Callable[[Any, Any, Any, Any], Any]


def counted(keywords: Mapping[str, Keyword]) -> dict[str, Keyword]:
    """`keywords` (a validator class's keyword functions), each spending a unit before it
    evaluates, and one more for each entry of its value when that is a list or an object."""
    return {name: _counting(name, function) for name, function in keywords.items()}


MESSAGE_CHARS_PER_UNIT = 100
"""The characters of an error's message that cost one unit. jsonschema writes most messages
with the whole instance in them (`f"{instance!r} is not of type …"`): against a 260 KB array,
each such error costs about 3 ms, and an `allOf` or `anyOf` of 900 `{"type": "string"}`
made 900 of them, 2.6-2.9 s, beyond the bound, since a keyword evaluated counted one unit
however large its error. A unit is about 3 µs (300,000 in about a second); those 900 messages
of 269,000 characters cost about 1 µs per 100 characters (2.6 s / 900 / 2,690), so the charge
is about three times what the formatting costs: it errs towards stopping early, and still
lets one such error through (2,690 units) with room for 110 more."""


def _counting(name: str, function: Keyword) -> Keyword:
    # A keyword whose value is a list or an object (`properties`, `required`, `anyOf`, …)
    # loops over it for each instance; `enum` is one set lookup (`schemas.linear_keywords`).
    looped = name != "enum"

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        spend(1 + len(value) if looped and isinstance(value, (list, dict)) else 1)
        errors = function(validator, value, instance, schema)
        return None if errors is None else _charged(errors)

    return keyword


def _charged(errors: Iterable[Any]) -> Iterator[Any]:
    """`errors`, each charged for its message (`MESSAGE_CHARS_PER_UNIT`) as it is made: the
    check stops at the bound after one error too many, not after all of them."""
    for error in errors:
        spend(len(error.message) // MESSAGE_CHARS_PER_UNIT)
        yield error
