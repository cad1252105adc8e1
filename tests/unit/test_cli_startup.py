"""The command line starts fast: a command that only talks to the REST API loads the CLI,
typer, rich, pydantic and httpx, never the server, the engine or the database stack, which the
commands that run them (`serve`, `api`, `worker`, `db upgrade`, `run`, `keys`, `secrets`,
`validate`) import inside their functions; `--help` does not even load the HTTP client
(`api.cli.remote.call` imports it). Each check runs in a fresh interpreter, as the console
script does. bench/cli_startup.py measures what it is worth (bench/results-cli.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import typer.main
from typer.testing import CliRunner

from api.cli import app

# What importing them costs a command that only sends HTTP requests: the web server, the
# database and its migrations, Redis, the engine and what it validates with.
HEAVY = frozenset(
    {
        "admission",
        "aiohttp",
        "aiosqlite",
        "alembic",
        "asyncpg",
        "demo",
        "engine",
        "fastapi",
        "jsonschema",
        "networkx",
        "pydantic_settings",
        "redis",
        "sqlalchemy",
        "starlette",
        "uvicorn",
        "uvloop",
        "vertices",
    }
)

# What `--help` does without: the HTTP client and the API answers' models.
CLIENT = frozenset({"httpx", "httpx_sse", "api.cli.client", "api.cli.session", "api.cli.wire"})

# Runs `schemabridge ARGS...` in this interpreter and prints the modules it loaded.
SCRIPT = textwrap.dedent(
    """
    import json, sys

    from api.cli import main

    sys.argv = ["schemabridge", *sys.argv[1:]]
    try:
        main()
    except SystemExit:
        pass
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
    """
)


def loaded_modules(*args: str) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return set(json.loads(completed.stderr.strip().splitlines()[-1]))


def loaded_packages(*args: str) -> set[str]:
    return {name.split(".")[0] for name in loaded_modules(*args)}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["runs", "--help"],
        ["runs", "list", "--help"],
        # Port 1 refuses the connection at once: the command runs up to its HTTP request.
        ["runs", "list", "--api-url", "http://127.0.0.1:1"],
        ["runs", "show", "0123abcd", "--api-url", "http://127.0.0.1:1"],
        ["runs", "retry", "0123abcd", "--api-url", "http://127.0.0.1:1"],
        ["workflows", "list", "--api-url", "http://127.0.0.1:1"],
    ],
    ids=" ".join,
)
def test_http_commands_do_not_load_the_server_stack(args: list[str]) -> None:
    assert loaded_packages(*args) & HEAVY == set()


@pytest.mark.parametrize(
    "args", [["--help"], ["runs", "--help"], ["runs", "list", "--help"]], ids=" ".join
)
def test_help_does_not_load_the_http_client(args: list[str]) -> None:
    assert loaded_modules(*args) & CLIENT == set()


def test_importing_the_cli_loads_neither_the_stack_nor_the_client_models() -> None:
    # The REST client's models are built on first use (`defer_build`), the workflow models
    # (schemas.definitions) only by the commands that read workflow files, the installed
    # distributions' metadata only by --version.
    code = (
        "import json, sys; import api.cli; loaded = set(sys.modules); "
        "from api.cli import wire; "
        "print(json.dumps([sorted(loaded), wire.RunSummary.__pydantic_complete__]))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules, models_built = json.loads(completed.stdout)
    assert {name.split(".")[0] for name in modules} & HEAVY == set()
    assert models_built is False
    assert {"schemas.definitions", "importlib.metadata"} & set(modules) == set()


def command_paths() -> list[list[str]]:
    paths: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        paths.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def test_every_command_has_help() -> None:
    paths = command_paths()
    assert len(paths) > 40 and ["runs", "list"] in paths and ["db", "upgrade"] in paths
    for path in paths:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert result.output.startswith("Usage: "), path
