"""Usage refusals the CLI makes before it sends anything: each says what is wrong with what
was given (in-process, no API needed)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from api.cli import app


@pytest.mark.parametrize(
    ("arguments", "said", "not_said"),
    [
        (["default"], "give the rate: GATEWAY steps a minute", "not both"),
        (
            ["default", "5", "--reset"],
            "give a rate (GATEWAY steps a minute), or --reset, not both",
            "e.g.",
        ),
    ],
)
def test_set_rate_says_what_is_missing_or_too_much(
    arguments: list[str], said: str, not_said: str
) -> None:
    result = CliRunner().invoke(app, ["tenants", "set-rate", *arguments])
    assert result.exit_code == 2
    text = " ".join(result.output.split())  # rich wraps the usage panel
    assert said in text and not_said not in text


def test_a_reason_too_long_names_the_option_before_anything_is_sent() -> None:
    """The API's own refusal would name its body's `/reason`; the option is what was typed.
    The limit is the API's, counted on the reason as it is recorded, on one line."""
    from api.cli.deployments import MAX_REASON_CHARS, checked_reason
    from engine.operations import deployments

    assert MAX_REASON_CHARS == deployments.MAX_REASON_CHARS
    too_long = ["deployments", "abort", "12345678", "--reason", "x" * 501]
    result = CliRunner().invoke(app, [*too_long, "--api-url", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "Invalid value for '--reason': 501 characters; give at most 500" in text, text
    assert checked_reason(" canary\n  slow ") == "canary slow"
    assert checked_reason("   ") is None
    assert checked_reason(" ".join(["x"] * 250)) == " ".join(["x"] * 250)  # 499 on one line


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        (["deployments", "abort", "12345678", "--reason"], "schemabridge deployments abort"),
        (["--debug", "audit", "list", "--actor"], "schemabridge audit list"),
        (["runs", "list", "--limit"], "schemabridge runs list"),
    ],
)
def test_an_option_given_no_value_points_at_its_commands_help(
    arguments: list[str], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Click raises "requires an argument" without the command's context: the help named is
    still the command's, read from the command line, not the program's."""
    monkeypatch.setattr("sys.argv", ["schemabridge", *arguments])
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"requires an argument. (see `{where} --help`)" in text, text


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (
            ["runs", "submit", "w", "--version", "0"],
            "--version '0': give a whole number, 1 or more",
        ),
        (["runs", "list", "--limit", "0"], "--limit '0': give a whole number from 1 to 10000"),
        (["serve", "--port", "70000"], "--port '70000': give a whole number from 0 to 65535"),
        (
            ["destinations", "set-cap", "erp", "--rate", "0"],
            "--rate '0': give a number, 0.001 or more",
        ),
        (
            ["destinations", "set-cap", "erp", "--rate-per-second", "0"],
            "--rate-per-second '0': give a number, 0.001 or more",
        ),
        (  # given twice: the value click took, the last
            ["destinations", "set-cap", "erp", "--rate", "5", "--rate-per-second", "0"],
            "--rate-per-second '0': give a number, 0.001 or more",
        ),
    ],
)
def test_a_number_out_of_bounds_says_what_the_option_takes(
    arguments: list[str], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not pydantic's "Input should be greater than or equal to 1", which names one bound:
    the option, the value given and every bound it has, on one line."""
    monkeypatch.setattr("sys.argv", ["schemabridge", *arguments])  # where the value is read
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert text.startswith(f"error: {said} (see `schemabridge "), text
    assert "Input should be" not in text, text


def test_a_misspelt_option_is_offered_the_closest_option_first() -> None:
    """click lists its guesses alphabetically: `--timout` read "Did you mean '--input' or
    '--output' or '--timeout'?", the one meant last."""
    result = CliRunner().invoke(app, ["run", "w.json", "--timout", "3"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "No such option: --timout. Did you mean '--timeout' or " in text, text
