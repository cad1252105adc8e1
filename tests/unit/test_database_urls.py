"""Database URLs: the forms users have at hand (libpq's, Heroku's) run on the async drivers,
every part of the URL survives, other drivers are refused in one line, no password shows."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from engine.operations.startup import StartupRefused, check_database_url, mask_url
from engine.store.db import DatabaseURLError, normalise_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "postgresql://postgres@127.0.0.1:5432/db",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/db",
        ),
        (
            "postgres://postgres@127.0.0.1:5432/db",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/db",
        ),
        (
            "postgresql+asyncpg://postgres@127.0.0.1:5432/db",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/db",
        ),
        ("postgresql://u@[::1]:5433/db", "postgresql+asyncpg://u@[::1]:5433/db"),
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db"),
        ("sqlite:///file:x.db?mode=ro&uri=true", "sqlite+aiosqlite:///file:x.db?mode=ro&uri=true"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_each_accepted_scheme_runs_on_the_async_driver(given: str, expected: str) -> None:
    assert normalise_url(given) == make_url(expected)
    check_database_url(given)  # and startup takes it (each directory exists)


def test_a_password_with_at_and_percent_survives() -> None:
    url = normalise_url("postgresql://us%3Aer:p%40ss%25w%2Fd@db.example:6543/app")
    assert (url.drivername, url.username, url.password) == (
        "postgresql+asyncpg",
        "us:er",
        "p@ss%w/d",
    )
    assert (url.host, url.port, url.database) == ("db.example", 6543, "app")


def test_a_query_string_survives_and_sslmode_becomes_asyncpgs_ssl() -> None:
    url = normalise_url("postgres://u@h/db?sslmode=require&prepared_statement_cache_size=0")
    assert dict(url.query) == {"ssl": "require", "prepared_statement_cache_size": "0"}
    # What SQLAlchemy hands asyncpg.connect: `ssl`, which it accepts; `sslmode` it does not.
    _, kwargs = url.get_dialect()().create_connect_args(url)
    assert kwargs["ssl"] == "require" and "sslmode" not in kwargs
    assert dict(normalise_url("postgresql://u@h/db?ssl=disable").query) == {"ssl": "disable"}


@pytest.mark.parametrize("query", ["sslmode=sure", "sslmode=require&ssl=disable"])
def test_an_sslmode_asyncpg_cannot_take_is_refused(query: str) -> None:
    with pytest.raises(StartupRefused) as refused:
        check_database_url(f"postgresql://u:secret@h/db?{query}")
    message = str(refused.value)
    assert refused.value.code == "invalid_database_url"
    assert "sslmode=" in message and "verify-full" in message and "secret" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://u:secret@h/db",
        "mysql://u:secret@h/db",
        "mysql+aiomysql://u:secret@h/db",
        "sqlite+pysqlite:///x.db",
    ],
)
def test_another_driver_is_refused_naming_the_accepted_forms(url: str) -> None:
    with pytest.raises(StartupRefused) as refused:
        check_database_url(url)
    scheme = make_url(url).drivername
    shown = make_url(url).render_as_string(hide_password=True)
    assert refused.value.code == "unsupported_database"
    assert str(refused.value) == (
        f"unsupported database scheme {scheme!r} in {shown}: give sqlite:///path.db or "
        "postgresql://user@host:5432/db; postgres://, sqlite+aiosqlite:// and "
        "postgresql+asyncpg:// work too (SCHEMABRIDGE_DATABASE_URL or --database)"
    )
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["nonsense", "postgresql://u:secret@h:notaport/db", "postgresql://u:sec@ret@h/db"]
)
def test_a_malformed_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(StartupRefused) as refused:
        check_database_url(url)
    assert refused.value.code == "invalid_database_url"
    assert "secret" not in str(refused.value) and "ret@" not in str(refused.value)
    with pytest.raises(DatabaseURLError):
        normalise_url(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p%40ss%25w@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u:pw@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        ("postgresql://u:sec@ret@h/db", "postgresql://u:***@h/db"),
    ],
)
def test_mask_url_never_shows_a_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown
