"""Usage refusals the CLI makes before it sends anything: each says what is wrong with what
was given (in-process, no API needed)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from api.cli import app


@pytest.mark.parametrize(
    ("arguments", "said", "not_said"),
    [
        (["default"], "give the rate: GATEWAY steps per minute", "not both"),
        (["default", "5", "--reset"], "give a rate per minute, or --reset, not both", "e.g."),
    ],
)
def test_set_rate_says_what_is_missing_or_too_much(
    arguments: list[str], said: str, not_said: str
) -> None:
    result = CliRunner().invoke(app, ["tenants", "set-rate", *arguments])
    assert result.exit_code == 2
    text = " ".join(result.output.split())  # rich wraps the usage panel
    assert said in text and not_said not in text
