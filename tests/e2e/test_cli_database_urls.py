"""`schemabridge db upgrade` on the URL forms users copy from libpq, psql and Heroku, against
the real services: the plain `postgresql://` and `sqlite:///` need no `+driver`."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

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
    assert "upgraded to head" in upgrade(plain)  # idempotent: the schema is there


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
