"""The `schemabridge` command line (console script `schemabridge = api.cli:main`).

Each command (or group of commands) lives in a module of this package, `api/cli/<name>.py`,
and is registered at the bottom of this file.

Exit codes shared by all commands (`api.cli.usage`): 0 success, 1 the run or action failed (or
the input was understood but is invalid), 2 usage error, invalid input or settings, 3 still
running at `--timeout`, 4 the database, Redis or API does not answer. Errors are one line with
the fix; `--debug` adds the traceback.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from api.cli import admin as cli_admin
from api.cli import audit as cli_audit
from api.cli import deployments as cli_deployments
from api.cli import keys as cli_keys
from api.cli import run as cli_run
from api.cli import runs as cli_runs
from api.cli import secrets as cli_secrets
from api.cli import services as cli_services
from api.cli import usage
from api.cli import validate as cli_validate
from api.cli import workflows as cli_workflows
from api.cli.exit_codes import ExitCode
from api.cli.remote import EXIT_CODES_HELP
from schemas.value_problems import problem_in_words

app = typer.Typer(
    name="schemabridge",
    help="SchemaBridge: author, validate and run durable workflow graphs of HTTP calls.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help (no boxes): it reads the same in a terminal, a pipe and a log.
    rich_markup_mode=None,
    # Errors nobody handled reach `main`, which says them in one line (`usage.report`).
    pretty_exceptions_enable=False,
)
usage.install_help_types()
usage.install_one_line_usage_errors(app)


def _version(value: bool) -> None:
    if value:
        from importlib import metadata  # zipfile, email and more: only --version reads it

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
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and every log line (for bug reports).")
    ] = False,
) -> None:
    """SchemaBridge: author, validate and run durable workflow graphs of HTTP calls."""
    usage.OPTIONS.debug = debug


def main() -> None:
    """Entry point of the `schemabridge` console script. Nothing reaches the user as a
    traceback (`usage.report`); a setting the environment gets wrong (`engine.settings.Settings`
    refuses it) is one `error:` line per setting and exit code 2, whichever command read it."""
    try:
        app()
    except KeyboardInterrupt:
        usage.stderr().print("interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except ValidationError as error:
        if error.title != "Settings":
            usage.report(error)
        usage.show_traceback(error)
        for line in invalid_settings(error):
            _say_error(line)
        sys.exit(ExitCode.USAGE)
    except Exception as error:
        unreadable = unreadable_setting(error)
        if unreadable is None:
            usage.report(error)
        usage.show_traceback(error)
        _say_error(unreadable)
        sys.exit(ExitCode.USAGE)


def _say_error(line: str) -> None:
    """`error: LINE` on stderr, as every other failure is said (`usage.report`)."""
    from rich.markup import escape

    usage.stderr().print(f"[red]error:[/red] {escape(line)}")


def invalid_settings(error: ValidationError) -> list[str]:
    """One `invalid setting NAME: …` line per setting `Settings` refused; an entry of a list
    setting is named by its place (`entry 2: …`) in its setting's line."""
    problems: dict[str, list[str]] = {}
    for problem in error.errors():
        name, *place = (str(part) for part in problem["loc"])
        message = _in_words(problem, name) or str(problem["msg"]).removeprefix("Value error, ")
        if place and place[0].isdigit():
            message = f"entry {int(place[0]) + 1}: {message}"
        problems.setdefault(_variable_set(name), []).append(message)
    return [f"invalid setting {name}: {'; '.join(said)}" for name, said in problems.items()]


def _variable_set(name: str) -> str:
    """The environment variable the operator set for the setting `name` (as pydantic names
    it: `SCHEMABRIDGE_<NAME>`, its first spelling): the bare `<NAME>` when only that one is
    set, so the line names the variable to fix, not one that is not in the environment. The
    prefixed one wins when both are set (engine/settings.py), and is named then."""
    upper = name.upper()
    bare = upper.removeprefix("SCHEMABRIDGE_")
    if bare == upper:
        return upper
    environ = {variable.upper() for variable in os.environ}
    return bare if upper not in environ and bare in environ else upper


_UNITS = {
    "_ms": (" of milliseconds", " ms"),
    "_s": (" of seconds", " s"),
    "_bytes": (" of bytes", ""),
}
"""A setting's unit by the end of its name: in a type's words, and after a bound."""


def _in_words(problem: Any, name: str) -> str | None:
    """A number setting's refusal in words with the unit its name ends with ("should be a
    number of seconds, not '7d'"); None for a refusal that is not a number's."""
    unit, short = next((u for end, u in _UNITS.items() if name.lower().endswith(end)), ("", ""))
    return problem_in_words(problem, unit, short)


def unreadable_setting(error: BaseException) -> str | None:
    """`invalid setting NAME: …` when `error` is pydantic-settings failing to read a value
    before validation (its message names the field, the cause says why), else None. Looked up
    among the loaded modules: a command that reads no settings never imports the package
    (tests/unit/test_cli_startup.py), and then no error of it can have been raised."""
    settings_package = sys.modules.get("pydantic_settings")
    if settings_package is None or not isinstance(error, settings_package.SettingsError):
        return None
    found = re.search(r'field "(\w+)"', str(error))
    name = _variable_set(f"SCHEMABRIDGE_{found.group(1)}") if found else "(unknown)"
    cause = error.__cause__
    return f"invalid setting {name}: {cause or error}"


# ── command registration ────────────────────────────────────────────────────────────────────
# One line per command or group of commands, implemented in api/cli/<name>.py.

app.command(name="validate")(cli_validate.validate)
app.command(name="run")(cli_run.run)
app.command(name="serve", epilog=cli_services.SERVICE_EXIT_CODES_HELP)(cli_services.serve)
app.command(name="api", epilog=cli_services.SERVICE_EXIT_CODES_HELP)(cli_services.api)
app.command(name="worker", epilog=cli_services.SERVICE_EXIT_CODES_HELP)(cli_services.worker)
app.command(name="demo-downstream")(cli_services.demo_downstream)
app.command(name="services", epilog=EXIT_CODES_HELP)(cli_admin.services)
app.command(name="whoami", epilog=EXIT_CODES_HELP)(cli_admin.whoami)
app.add_typer(cli_services.db_app, name="db")
app.add_typer(cli_admin.destinations_app, name="destinations")
app.add_typer(cli_admin.tenants_app, name="tenants")
app.add_typer(cli_keys.keys_app, name="keys")
app.add_typer(cli_runs.runs_app, name="runs")
app.add_typer(cli_workflows.workflows_app, name="workflows")
app.add_typer(cli_deployments.deployments_app, name="deployments")
app.add_typer(cli_secrets.secrets_app, name="secrets")
app.add_typer(cli_audit.audit_app, name="audit")
