"""The web monitor's one-line error (ui/static/js/format.js, `oneLine`), run in Node: cut as the
CLI cuts a message (schemas/message_excerpt.py), never leaving a bracket it opened unclosed."""

from __future__ import annotations

import json

import pytest

from tests.unit.ui_modules import NODE, module_value

pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js")


def one_line(text: str, limit: int) -> str:
    shown: str = module_value("format.js", f"m.oneLine({json.dumps(text)}, {limit})")
    return shown


def test_a_cut_error_closes_the_brackets_it_leaves_open() -> None:
    """A fan-out's failure in the runs list read "(3 http_error, e.g. POST…": the
    parenthesis the cut fell in was never closed."""
    message = (
        "child_failures · at join · 3 of 3 children failed (3 http_error, e.g. POST "
        "http://crm:8080/tickets answered 500: " + "boom " * 30 + "); see `schemabridge …`"
    )
    shown = one_line(message, 140)
    assert len(shown) <= 140, shown
    assert shown.startswith("child_failures · at join · 3 of 3 children failed (3 http_error")
    assert shown.endswith("…)"), shown
    assert one_line("a (b [c d e f g h i j k", 12) == "a (b [c d…])"
    assert one_line("short (and whole)", 140) == "short (and whole)"
