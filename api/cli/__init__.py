"""The `schemabridge` command line (console script `schemabridge = api.cli:main`).

Each command (or group of commands) lives in a module of this package, `api/cli/<name>.py`,
and is registered at the bottom of this file.

Exit codes shared by all commands: 0 success, 1 the input was understood but is invalid (or the
work failed), 2 usage error or unreadable input.
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer
from pydantic import ValidationError

from api.cli import admin as cli_admin
from api.cli import keys as cli_keys
from api.cli import run as cli_run
from api.cli import services as cli_services
from api.cli import validate as cli_validate

app = typer.Typer(
    name="schemabridge",
    help="SchemaBridge: author, validate and run durable workflow graphs of HTTP calls.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"schemabridge {metadata.version('schemabridge')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """SchemaBridge: author, validate and run durable workflow graphs of HTTP calls."""


EXIT_BAD_SETTING = 2


def main() -> None:
    """Entry point of the `schemabridge` console script.

    A setting the environment gets wrong (`engine.settings.Settings` refuses it) is one line
    per setting and exit code 2, whichever command read it, never a traceback."""
    try:
        app()
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"]).upper()
            message = str(error["msg"]).removeprefix("Value error, ")
            typer.echo(f"schemabridge: invalid setting {name}: {message}", err=True)
        raise SystemExit(EXIT_BAD_SETTING) from None


# ── command registration ────────────────────────────────────────────────────────────────────
# One line per command or group of commands, implemented in api/cli/<name>.py.

app.command(name="validate")(cli_validate.validate)
app.command(name="run")(cli_run.run)
app.command(name="serve")(cli_services.serve)
app.command(name="api")(cli_services.api)
app.command(name="worker")(cli_services.worker)
app.add_typer(cli_services.db_app, name="db")
app.add_typer(cli_admin.destinations_app, name="destinations")
app.add_typer(cli_admin.tenants_app, name="tenants")
app.add_typer(cli_keys.keys_app, name="keys")
