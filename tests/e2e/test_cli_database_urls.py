"""`schemabridge db upgrade` on the URL forms users copy from libpq, psql and Heroku, against
the real services: the plain `postgresql://` and `sqlite:///` need no `+driver`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from engine.store.db import head_revision
from tests.e2e.test_cli_run import run_cli


def upgrade(database: str) -> str:
    result = run_cli(("db", "upgrade"), {"SCHEMABRIDGE_DATABASE_URL": database})
    assert result.returncode == 0, result.stderr
    return result.stderr  # where the CLI says what it did


@pytest.mark.parametrize(
    ("scheme", "query"), [("postgresql", {}), ("postgres", {"sslmode": "disable"})]
)
def test_db_upgrade_on_a_plain_postgresql_url(
    pg_database_url: str, scheme: str, query: dict[str, str]
) -> None:
    # The local server trusts 127.0.0.1, so the password is ignored: here only to be hidden.
    fresh = make_url(pg_database_url).set(drivername=scheme, password="p@ss%word", query=query)
    plain = fresh.render_as_string(hide_password=False)
    assert plain.startswith(f"{scheme}://postgres:p%40ss%25word@127.0.0.1:5432/")
    out = upgrade(plain)
    assert f"database {scheme}://postgres:***@127.0.0.1:5432/{fresh.database}" in out
    assert "upgraded to head" in out and "p@ss" not in out and "p%40ss" not in out
    # Idempotent: the schema is there, and it says so rather than "upgraded".
    assert f"is at {head_revision()} already: nothing to do" in upgrade(plain)
    # `db current` reads where it is, and exits 0 at this release's head.
    current = run_cli(("db", "current"), {"SCHEMABRIDGE_DATABASE_URL": plain})
    assert current.returncode == 0, current.stderr
    assert f"is at {head_revision()}, this release's: up to date" in current.stdout
    assert "p@ss" not in current.stdout and "p%40ss" not in current.stdout


def test_db_current_says_what_a_database_lacks_and_exits_1(tmp_path: Path) -> None:
    """An operator's (and a deploy script's) question before starting `api` processes,
    which refuse a database that is behind: answered without changing anything."""
    path = tmp_path / "x.db"
    url = f"sqlite:///{path}"

    def current() -> tuple[int, str]:
        """Exit code and the answer (stdout), which a refusal leaves empty."""
        done = run_cli(("db", "current"), {"SCHEMABRIDGE_DATABASE_URL": url})
        assert "Traceback" not in done.stderr
        assert done.stderr == "" or done.stdout == "", done
        return done.returncode, " ".join(done.stdout.split())

    # No file: not made (a typo in the URL would leave one), and said on stderr.
    refused = run_cli(("db", "current"), {"SCHEMABRIDGE_DATABASE_URL": url})
    assert (refused.returncode, refused.stdout, path.exists()) == (2, "", False), refused
    assert "there is no such file" in " ".join(refused.stderr.split()), refused.stderr
    upgrade(url)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0017'")
    code, said = current()
    assert code == 1, said
    assert said.endswith(
        f"is at revision 0017 but this SchemaBridge needs {head_revision()}; run "
        "'schemabridge db upgrade' first"
    ), said
    with sqlite3.connect(path) as conn:  # its migrations ran: only the mark was moved back
        conn.execute("UPDATE alembic_version SET version_num = ?", (head_revision(),))
    assert current()[0] == 0


def test_db_upgrade_on_a_plain_sqlite_url(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    out = upgrade(f"sqlite:///{path}")
    assert f"database sqlite:///{path} upgraded to head" in out
    assert path.stat().st_size > 0


def test_db_upgrade_with_libpq_connect_parameters(pg_database_url: str) -> None:
    # What users paste from libpq; asyncpg takes neither under these names.
    query = {"connect_timeout": "10", "application_name": "schemabridge-e2e"}
    url = make_url(pg_database_url).set(drivername="postgresql", query=query)
    out = upgrade(url.render_as_string(hide_password=False))
    assert "upgraded to head" in out and "connect_timeout=10" in out
