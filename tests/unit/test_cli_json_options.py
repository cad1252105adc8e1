"""JSON given on the command line (`--input`, `--output`) that the parser cannot read ends the
command with one line and exit 2, never a traceback: thousands of levels (RecursionError)
and integers of more digits than Python converts (ValueError) included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import typer

from api.cli.remote import read_json_value

READERS: list[tuple[str, Callable[[str], Any]]] = [
    ("--input", lambda value: read_json_value(value, "--input")),
    ("--output", lambda value: read_json_value(value, "--output")),
]


def _refused(read: Callable[[str], Any], text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What the option reader printed refusing `text`, once it exited with the usage code."""
    with pytest.raises(typer.Exit) as ended:
        read(text)
    assert ended.value.exit_code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("option", "read"), READERS)
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * 5_000 + "]" * 5_000, "nests arrays and objects too deeply to read"),
        ("[" * 5_000, "nests arrays and objects too deeply to read"),
        ("1" * 5_000, "is not valid JSON: the number 111111111111\u2026 has 5,000 digits"),
        ("{nope", "is not valid JSON: Expecting property name"),
    ],
)
def test_unreadable_json_is_one_line(
    option: str,
    read: Callable[[str], Any],
    text: str,
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _refused(read, text, capsys)
    assert err.startswith(f"error: {option} {said}")
    assert "Traceback" not in err


@pytest.mark.parametrize(("option", "read"), READERS)
@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '{"count": 2',
            "Expecting ',' delimiter (line 1, column 12). The document ends too early: was it "
            "cut short?",
        ),
        (
            '{"count": 2,}',
            "Expecting property name enclosed in double quotes (line 1, column 13). The `}` "
            "there follows a comma: JSON allows none after the last item, so remove that comma.",
        ),
        (
            "{'count': 2}",
            "Expecting property name enclosed in double quotes (line 1, column 2). JSON writes "
            'strings and names in double quotes ("), not single ones.',
        ),
        # Not "Expecting value (line 1, column 1). The document ends too early".
        (" \n", "it is empty (only blanks, no JSON value)."),
    ],
)
def test_a_syntax_error_is_said_as_validate_says_it(
    option: str,
    read: Callable[[str], Any],
    text: str,
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Line and column, and the likely cause: not the parser's "(char 11)" alone.
    err = _refused(read, text, capsys)
    assert err == f"error: {option} is not valid JSON: {said} (a file is given as @path)\n"
