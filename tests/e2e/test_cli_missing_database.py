"""The commands that read or change an existing database (`keys`, `secrets`, `api`) refuse an
SQLite file that does not exist, in one line naming the path and the fix, and create no file:
SQLite would create an empty one, where a misspelt path would read as "no keys" and stay
behind. Nor do they migrate: a database never migrated (a fresh `createdb`, an empty file) or
behind this code's head is refused in one line naming `schemabridge db upgrade`, and left as
it was (`api`: test_rest_processes.py). On an up-to-date database they work as before. The
commands that make a database (`db upgrade`, `serve`, `worker`, `run`) still do. Real
`schemabridge` processes on files in tmp_path, or on a PostgreSQL database of their own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import inspect, text

from engine.store import db
from tests.conftest import Backend
from tests.e2e.rest_harness import schemabridge

# Never migrated: these tests start from databases no migration has touched.
pytestmark = pytest.mark.blank_database

VALUE = "missing-db-canary-7f3a"
SECRET_KEYS = Fernet.generate_key().decode()
FIX = "set SCHEMABRIDGE_DATABASE_URL to the database meant, or create this one with "


def sb(
    tmp_path: Path, database: str | None, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`schemabridge ARGS` in `tmp_path` (the working directory a relative path is under),
    on `database` (None: SCHEMABRIDGE_DATABASE_URL unset), with this module's encryption key
    and no other SchemaBridge setting of the environment (the embedded Redis)."""
    env = {
        name: value for name, value in os.environ.items() if not name.startswith("SCHEMABRIDGE_")
    }
    env["SCHEMABRIDGE_SECRET_KEYS"] = SECRET_KEYS
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(tmp_path / "health")
    if database is not None:
        env["SCHEMABRIDGE_DATABASE_URL"] = database
    return schemabridge(env, *args, stdin=stdin, cwd=tmp_path)


def refused(result: subprocess.CompletedProcess[str], code: int, path: Path) -> str:
    """One `error:` line on stderr naming `path` and the fix, exit `code`, nothing else."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot open the SQLite database {path}"), lines[0]
    assert "there is no such file" in lines[0] and FIX + "`schemabridge db upgrade`" in lines[0]
    return lines[0]


# Exit 2 from `keys`, `secrets` and `api`, as for their other settings refused (a PostgreSQL
# database that does not exist, a directory that cannot be written).
COMMANDS = [
    pytest.param(["keys", "list"], "", 2, id="keys-list"),
    pytest.param(["keys", "create", "--admin"], "", 2, id="keys-create"),
    pytest.param(["keys", "revoke", "0123456789ab"], "", 2, id="keys-revoke"),
    pytest.param(["secrets", "set", "CRM_TOKEN", "--tenant", "acme"], VALUE, 2, id="secrets-set"),
    pytest.param(["secrets", "list"], "", 2, id="secrets-list"),
    pytest.param(
        ["secrets", "delete", "CRM_TOKEN", "--tenant", "acme"], "", 2, id="secrets-delete"
    ),
    pytest.param(["secrets", "rotate"], "", 2, id="secrets-rotate"),
    pytest.param(["api", "--port", "0"], "", 2, id="api"),
]


@pytest.mark.parametrize(("args", "stdin", "code"), COMMANDS)
def test_a_missing_file_is_refused_and_not_created(
    tmp_path: Path, args: list[str], stdin: str, code: int
) -> None:
    database = tmp_path / "typo.db"
    done = sb(tmp_path, f"sqlite+aiosqlite:///{database}", *args, stdin=stdin)
    line = refused(done, code, database)
    assert "default" not in line and VALUE not in line
    assert list(tmp_path.glob("typo.db*")) == []  # nor its -wal, -shm or -journal


def test_the_default_database_is_named_as_such(tmp_path: Path) -> None:
    # The variable unset where the operator thought it set: the path is the working
    # directory's schemabridge.db, and the line says it is the default.
    line = refused(sb(tmp_path, None, "keys", "list"), 2, tmp_path / "schemabridge.db")
    assert "(SCHEMABRIDGE_DATABASE_URL's default)" in line
    assert list(tmp_path.glob("schemabridge.db*")) == []


def test_a_relative_path_is_named_where_it_was_looked_for(tmp_path: Path) -> None:
    refused(sb(tmp_path, "sqlite:///./data/sb.db", "secrets", "list"), 2, tmp_path / "data/sb.db")
    assert not (tmp_path / "data").exists()


def test_an_in_memory_database_is_no_file(tmp_path: Path) -> None:
    # Shared-cache memory is no missing file, but it starts empty in each process: with no
    # schema it is refused like any database never migrated, and nothing is written.
    memory = "sqlite:///file:sb-memory?mode=memory&cache=shared&uri=true"
    done = sb(tmp_path, memory, "keys", "list")
    assert done.returncode == 2, done.stderr
    assert "never migrated" in done.stderr and "schemabridge db upgrade" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "health") == []


def _schema(url: str) -> tuple[str | None, list[str]]:
    """The database's revision and its tables."""

    async def read() -> tuple[str | None, list[str]]:
        engines = db.create_engines(url)
        try:
            async with engines.read.connect() as conn:
                tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
            return await db.current_revision(engines), sorted(tables)
        finally:
            await engines.dispose()

    return asyncio.run(read())


def schema_refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, one `error:` line naming the fix, nothing on stdout, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot use the database "), lines[0]
    assert f"this SchemaBridge needs {db.head_revision()}" in lines[0]
    assert "run 'schemabridge db upgrade' first" in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(("args", "stdin", "code"), COMMANDS[:-1])  # `api`: test_rest_processes
def test_a_database_never_migrated_is_refused_and_left_empty(
    backend: Backend, tmp_path: Path, args: list[str], stdin: str, code: int
) -> None:
    # A fresh `createdb` (or an empty SQLite file): `keys list` used to migrate it and say
    # "no keys yet", creating every table behind the operator's back.
    sqlite_file = db.sqlite_file(db.normalise_url(backend.database_url))
    if sqlite_file is not None:
        sqlite_file.touch()
    line = schema_refused(sb(tmp_path, backend.database_url, *args, stdin=stdin), "never migrated")
    assert VALUE not in line
    assert _schema(backend.database_url) == (None, [])


def test_a_database_behind_head_is_refused_and_not_upgraded(
    backend: Backend, tmp_path: Path
) -> None:
    url = backend.database_url
    upgraded = sb(tmp_path, url, "db", "upgrade", "0008")
    assert upgraded.returncode == 0, upgraded.stderr
    schema_refused(sb(tmp_path, url, "keys", "list"), "at revision 0008")
    schema_refused(sb(tmp_path, url, "secrets", "list"), "at revision 0008")
    create = sb(tmp_path, url, "keys", "create", "--admin")
    schema_refused(create, "at revision 0008")
    assert _schema(url)[0] == "0008"


def test_a_database_a_newer_release_migrated_is_refused_as_such(
    backend: Backend, tmp_path: Path
) -> None:
    # The check reads the shipped revisions from the migrations' file names: one past them
    # (a newer release's) is named as unknown, and its fix is that release, not an upgrade.
    url = backend.database_url
    assert sb(tmp_path, url, "db", "upgrade").returncode == 0
    newer = f"{int(db.head_revision()) + 1:04d}"

    async def stamp() -> None:
        engines = db.create_engines(url)
        try:
            async with engines.write.begin() as conn:
                stamped = text("UPDATE alembic_version SET version_num = :newer")
                await conn.execute(stamped, {"newer": newer})
        finally:
            await engines.dispose()

    asyncio.run(stamp())
    # `db upgrade` too (a rollback of the code after an upgrade): it said "internal error:
    # CommandError: Can't locate revision identified by '0023'" (exit 1), as did `serve`,
    # `run` and a `worker` on SQLite, which migrate as they start.
    for command in (("keys", "list"), ("db", "upgrade")):
        done = sb(tmp_path, url, *command)
        assert done.returncode == 2 and done.stdout == "", (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert (
            f"the database schema is at revision {newer}, which this SchemaBridge does not "
            f"know (it ships up to {db.head_revision()}): a newer release migrated it; run "
            "that release"
        ) in done.stderr, (command, done.stderr)
    assert _schema(url)[0] == newer


def test_an_existing_database_works_as_before(tmp_path: Path) -> None:
    database = tmp_path / "sb.db"
    url = f"sqlite+aiosqlite:///{database}"

    def ok(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        done = sb(tmp_path, url, *args, stdin=stdin)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    assert "upgraded to head" in ok("db", "upgrade").stderr  # the fix the refusal names
    assert database.is_file()
    assert "no keys yet in" in ok("keys", "list").stderr
    secret = ok("keys", "create", "--admin", "--name", "ops").stdout.strip()
    assert secret.startswith("sbk_")
    [key] = json.loads(ok("keys", "list", "--json").stdout)
    assert "revoked key" in ok("keys", "revoke", key["id"]).stderr
    created = ok("secrets", "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE)
    assert "created secret CRM_TOKEN" in created.stderr
    [item] = json.loads(ok("secrets", "list", "--json").stdout)
    assert (item["tenantId"], item["name"]) == ("acme", "CRM_TOKEN")
    assert "re-encrypted 1 secret under" in ok("secrets", "rotate").stderr
    deleted = ok("secrets", "delete", "CRM_TOKEN", "--tenant", "acme")
    assert "deleted secret CRM_TOKEN" in deleted.stderr
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["sb.db"]
