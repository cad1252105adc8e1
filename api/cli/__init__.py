"""The `schemabridge` command line (console script `schemabridge = api.cli:main`).

Each command (or group of commands) lives in a module of this package, `api/cli/<name>.py`,
and is registered at the bottom of this file.

Exit codes shared by all commands: 0 success, 1 the input was understood but is invalid (or the
work failed), 2 usage error or unreadable input. The commands that talk to the REST API
(`runs`, `workflows`, `destinations`, `tenants`) add 3 (still running at `--timeout`) and 4 (the
API not reachable or not authorised); see `api/cli/remote.py`.
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer

from api.cli import admin as cli_admin
from api.cli import keys as cli_keys
from api.cli import run as cli_run
from api.cli import runs as cli_runs
from api.cli import secrets as cli_secrets
from api.cli import services as cli_services
from api.cli import validate as cli_validate
from api.cli import workflows as cli_workflows

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


def main() -> None:
    """Entry point of the `schemabridge` console script."""
    app()


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
app.add_typer(cli_runs.runs_app, name="runs")
app.add_typer(cli_workflows.workflows_app, name="workflows")
app.add_typer(cli_secrets.secrets_app, name="secrets")
