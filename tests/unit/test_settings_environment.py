"""Settings as an operator writes them in the environment: a list as the README spells it
(`5, 10, 20`), and a value that cannot be read said in one line with exit code 2, never a
pydantic-settings traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings, SettingsError

import api.cli
from api.cli import environment
from engine.settings import Settings

EXAMPLE = next((Path(__file__).resolve().parents[2] / "examples").glob("*.json"))


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No SCHEMABRIDGE_ setting, nor bare alias, from the environment the tests run in,
    except the test suite's own (SCHEMABRIDGE_TEST_*)."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("SCHEMABRIDGE_") and not upper.startswith("SCHEMABRIDGE_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("REDISPATCH_DELAYS_S", raising=False)
    return monkeypatch


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`schemabridge ARGS…` in this process, through `main` as the console script runs it;
    the exit code."""
    monkeypatch.setattr(sys, "argv", ["schemabridge", *args])
    with pytest.raises(SystemExit) as exited:
        api.cli.main()
    code = exited.value.code
    return code if isinstance(code, int) else 1


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SCHEMABRIDGE_REDISPATCH_DELAYS_S", "5, 10, 20"),
        ("SCHEMABRIDGE_REDISPATCH_DELAYS_S", "5,10,20"),
        ("SCHEMABRIDGE_REDISPATCH_DELAYS_S", "[5, 10, 20]"),
        ("REDISPATCH_DELAYS_S", "5,10,20"),
    ],
)
def test_a_list_setting_takes_commas_as_the_readme_writes_it_or_json(
    clean: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    clean.setenv(variable, value)
    assert Settings().redispatch_delays_s == (5.0, 10.0, 20.0)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("[5, 10", "not a JSON list"),
        ("5,ten", "entry 2: should be a number of seconds, not 'ten'"),
    ],
)
def test_a_list_setting_that_cannot_be_read_is_one_line_and_exit_2(
    clean: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, said: str
) -> None:
    clean.setenv("SCHEMABRIDGE_REDISPATCH_DELAYS_S", value)
    assert run_main(clean, "validate", str(EXAMPLE)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: invalid setting SCHEMABRIDGE_REDISPATCH_DELAYS_S: ")
    assert said in line, line


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        # A second new user's tour read pydantic's "Input should be a valid number, unable to
        # parse string as a number", without the value or the unit.
        ("SCHEMABRIDGE_PAYLOAD_RETENTION_S", "7d", "should be a number of seconds, not '7d'"),
        ("SCHEMABRIDGE_MAX_BODY_BYTES", "1MB", "should be a whole number of bytes, not '1MB'"),
        ("SCHEMABRIDGE_MAX_BODY_BYTES", "0", "should be at least 1, not '0'"),
        (
            "SCHEMABRIDGE_MAX_BODY_BYTES",
            "9" * 5000,
            "should be a whole number of fewer digits, not '" + "9" * 39 + "…'",
        ),
        # A TTL under the interval started every service, which then failed its first beat
        # with a traceback.
        (
            "SCHEMABRIDGE_HEARTBEAT_TTL_S",
            "3",
            "should be more than SCHEMABRIDGE_HEARTBEAT_INTERVAL_S (10 s), not 3: a service's "
            "heartbeat would expire between its beats",
        ),
        ("SCHEMABRIDGE_HEARTBEAT_INTERVAL_S", "0", "should be more than 0 s, not '0'"),
        # Run retention, when on, outlasts payload retention (7 days by default).
        (
            "SCHEMABRIDGE_RUN_RETENTION_S",
            "86400",
            "should be 0 (keep runs for ever) or at least SCHEMABRIDGE_PAYLOAD_RETENTION_S "
            "(604800 s), not 86400: a run's payloads go before the run",
        ),
        ("SCHEMABRIDGE_RUN_RETENTION_S", "30d", "should be a number of seconds, not '30d'"),
        ("SCHEMABRIDGE_RUN_RETENTION_S", "-1", "should be at least 0 s, not '-1'"),
    ],
)
def test_a_number_setting_says_what_it_takes_and_what_it_got(
    clean: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    said: str,
) -> None:
    clean.setenv(variable, value)
    assert run_main(clean, "validate", str(EXAMPLE)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: invalid setting {variable}: {said}", line


@pytest.mark.parametrize(
    ("set_", "named"),
    [
        # A platform engineer's tour set the bare BACKPRESSURE_MAX_DEPTH (the README's
        # spelling) and was told to fix SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH, which is not set.
        (("BACKPRESSURE_MAX_DEPTH",), "BACKPRESSURE_MAX_DEPTH"),
        (("SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH",), "SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH"),
        # Both set: the prefixed one is read (it wins), so it is the one named.
        (
            ("BACKPRESSURE_MAX_DEPTH", "SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH"),
            "SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH",
        ),
    ],
)
def test_a_bad_value_is_said_under_the_variable_that_was_set(
    clean: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    set_: tuple[str, ...],
    named: str,
) -> None:
    clean.delenv("BACKPRESSURE_MAX_DEPTH", raising=False)
    for variable in set_:
        clean.setenv(variable, "abc")
    assert run_main(clean, "validate", str(EXAMPLE)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: invalid setting {named}: should be a whole number, not 'abc'"


def test_a_value_pydantic_settings_cannot_read_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Listed(BaseSettings):
        ports: list[int] = []

    monkeypatch.setenv("PORTS", "[80,")
    with pytest.raises(SettingsError) as unreadable:
        Listed()
    line = api.cli.unreadable_setting(unreadable.value)
    assert line is not None
    # Only the bare PORTS is set, so the line names it (not SCHEMABRIDGE_PORTS).
    assert line.startswith("invalid setting PORTS: Expecting "), line
    assert "\n" not in line
    assert api.cli.unreadable_setting(ValueError("not a setting")) is None


def test_a_misspelt_setting_is_refused_naming_the_one_meant(
    clean: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ignored, it left the default SQLite file in use beside a shared Redis, in silence.
    clean.setenv("SCHEMABRIDGE_DATABSE_URL", "postgresql://sb@db.internal/sb")
    assert run_main(clean, "validate", str(EXAMPLE)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "error: unknown setting SCHEMABRIDGE_DATABSE_URL: did you mean SCHEMABRIDGE_DATABASE_URL?"
    )


def test_a_name_like_no_setting_is_warned_about_once_and_the_command_runs(
    clean: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean.setattr(environment, "_warned", set())
    clean.setenv("SCHEMABRIDGE_NIGHTLY_BUILD", "1")
    assert run_main(clean, "validate", str(EXAMPLE)) == 0
    environment.load_settings()  # read again by the same process: no second warning
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: SCHEMABRIDGE_NIGHTLY_BUILD is not a setting; ignored"), line


@pytest.mark.parametrize(
    "name",
    [
        "SCHEMABRIDGE_TEST_REDIS",  # the test suite's own (tests/conftest.py)
        "SCHEMABRIDGE_TEST_ANYTHING",
        "SCHEMABRIDGE_LOG_FORMAT",  # read by the command line itself
        "SCHEMABRIDGE_API_KEY",
        "schemabridge_database_url",  # a setting in another case, as pydantic reads it
        "DATABSE_URL",  # bare names belong to anyone
        # What Kubernetes gives every pod for a Service named schemabridge.
        "SCHEMABRIDGE_SERVICE_HOST",
        "SCHEMABRIDGE_SERVICE_PORT",
        "SCHEMABRIDGE_SERVICE_PORT_HTTP",
        "SCHEMABRIDGE_PORT",
        "SCHEMABRIDGE_PORT_8000_TCP",
        "SCHEMABRIDGE_PORT_8000_TCP_ADDR",
    ],
)
def test_the_tests_names_the_clis_own_and_bare_names_pass(
    clean: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    clean.setattr(environment, "_warned", set())
    value = "text" if name.endswith("FORMAT") else "sqlite:///sb.db" if "url" in name else "x"
    clean.setenv(name, value)
    environment.load_settings()
    assert capsys.readouterr().err == ""
