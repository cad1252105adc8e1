"""`--database` on the commands that open the store themselves (`serve`, `api`, `worker`, as on
`run`): it wins over SCHEMABRIDGE_DATABASE_URL, and a refusal names the option. In-process: a
database that cannot be opened stops each service before it serves anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from api.cli import app


@pytest.mark.parametrize(
    "command",
    [["serve", "--port", "0"], ["api", "--port", "0"], ["worker"]],
    ids=["serve", "api", "worker"],
)
def test_database_option_wins_and_is_named_in_the_refusal(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both unusable (their directories do not exist), so no service ever starts: the one the
    # refusal names is the one that was used.
    from_setting = tmp_path / "setting-dir" / "x.db"
    from_option = tmp_path / "option-dir" / "x.db"
    monkeypatch.setenv("SCHEMABRIDGE_DATABASE_URL", f"sqlite:///{from_setting}")
    monkeypatch.delenv("SCHEMABRIDGE_REDIS_URL", raising=False)
    result = CliRunner().invoke(app, [*command, "--database", f"sqlite:///{from_option}"])
    assert result.exit_code == 2, result.output  # a setting that cannot work
    text = " ".join(result.output.split())
    assert f"cannot open the SQLite database {from_option}" in text
    assert str(from_setting) not in text
    assert "--database" in text and "SCHEMABRIDGE_DATABASE_URL" not in text


def test_the_option_has_the_same_help_everywhere() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    helps = {
        name: next(p.help for p in commands[name].params if p.name == "database")
        for name in ("run", "serve", "api", "worker")
    }
    assert len(set(helps.values())) == 1, helps


def test_the_option_says_the_database_used_when_nothing_names_one() -> None:
    """`serve --help` said "(default SCHEMABRIDGE_DATABASE_URL)" only: a newcomer with neither
    set could not tell where their runs went. It names the settings' own default file."""
    from typing import get_args

    from api.cli.database_option import DatabaseOption
    from engine.settings import DEFAULT_DATABASE_URL

    option = get_args(DatabaseOption)[1]
    path = DEFAULT_DATABASE_URL.split(":///", 1)[1]
    assert f"else {path} in the current directory" in option.help
