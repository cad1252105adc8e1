"""The command line starts fast: a command that only talks to the REST API loads the CLI,
typer, rich, pydantic and httpx, never the server, the engine or the database stack, which the
commands that run them (`serve`, `api`, `worker`, `db upgrade`, `run`, `keys`, `secrets`,
`validate`) import inside their functions; `--help` does not even load the HTTP client
(`api.cli.remote.call` imports it). The commands on the database directly (`keys`, `secrets`,
`db upgrade`) load the store, not the worker, the validator or the operations they do not
call (`engine.operations.Operations` builds its groups on first use). Each check runs in a
fresh interpreter, as the console script does. bench/cli_startup.py measures what it is worth
(bench/results-cli.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer.main
from cryptography.fernet import Fernet
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


def loaded_modules(*args: str, env: dict[str, str] | None = None) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
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


# What a command on the database directly (`keys`, `secrets`) does not need: the worker and
# the executor (every vertex), aiohttp (the runtime's HTTP client imports it on its first
# request), the validator and networkx, the operation groups of runs and workflows, and the
# server. It still needs the store and Redis.
NOT_FOR_THE_STORE = frozenset(
    {
        "aiohttp",
        "engine.execution.executor",
        "engine.execution.worker",
        "engine.operations.actions",
        "engine.operations.runs",
        "engine.operations.workflows",
        "engine.validation",
        "fastapi",
        "jsonschema",
        "networkx",
        "starlette",
        "uvicorn",
        "vertices.gateway",
    }
)

# What `db upgrade` does not need besides: the runtime, the store's roles and Redis's
# embedded server (it runs the migrations on the database, nothing else).
NOT_FOR_MIGRATING = NOT_FOR_THE_STORE | {
    "engine.runtime",
    "engine.store.store",
    "fakeredis",
}


def database_env(tmp_path: Path) -> dict[str, str]:
    """This environment without SchemaBridge settings, on an SQLite file in `tmp_path` (not
    made yet: `db upgrade` makes it), with an encryption key for `secrets`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMABRIDGE_")}
    env["SCHEMABRIDGE_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    env["SCHEMABRIDGE_SECRET_KEYS"] = Fernet.generate_key().decode()
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(tmp_path / "health")
    return env


def test_database_commands_load_only_what_they_use(tmp_path: Path) -> None:
    env = database_env(tmp_path)
    migrating = loaded_modules("db", "upgrade", env=env)
    # It did its work (the commands below refuse a database that is not there).
    assert (tmp_path / "sb.db").is_file() and "engine.store.db" in migrating
    assert migrating & NOT_FOR_MIGRATING == set()
    for args in (["keys", "list"], ["secrets", "list"], ["keys", "revoke", "nosuchkey"]):
        loaded = loaded_modules(*args, env=env)
        assert "engine.store.store" in loaded, args  # it reached the database
        assert loaded & NOT_FOR_THE_STORE == set(), args


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
