"""Database URLs: the forms users have at hand (libpq's, Heroku's) run on the async drivers,
every part of the URL survives, other drivers are refused in one line, no password shows."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from engine.operations.startup import (
    StartupRefused,
    check_database_url,
    check_redis_url,
    explain,
    mask_url,
)
from engine.settings import DEFAULT_DATABASE_URL, Settings
from engine.store.db import (
    DatabaseURLError,
    connect_options,
    create_engines,
    normalise_url,
    sqlite_file,
)
from schemas.errors import Refusal


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
        "postgresql+asyncpg:// work too (SCHEMABRIDGE_DATABASE_URL)"
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


# libpq's query parameters: asyncpg's SQLAlchemy dialect hands every one to asyncpg.connect
# under its own name, so each is translated, passed as asyncpg names it, or refused here.


def reaching_asyncpg(url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The keyword arguments an engine built for `url` calls asyncpg.connect with."""
    seen: dict[str, Any] = {}

    async def connect(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise ConnectionRefusedError("not connecting in a unit test")

    monkeypatch.setattr(asyncpg, "connect", connect)

    async def attempt() -> None:
        engines = create_engines(url)
        try:
            with pytest.raises(ConnectionRefusedError):
                async with engines.write.connect():
                    pass
        finally:
            await engines.dispose()

    asyncio.run(attempt())
    return seen


def test_libpq_parameters_reach_asyncpg_under_its_names(monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs = reaching_asyncpg(
        "postgres://u:pw@h:5433/db?connect_timeout=10&application_name=sb-worker"
        "&options=-c%20statement_timeout%3D5s%20--search-path%3Dapp&sslmode=disable"
        "&target_session_attrs=read-write&command_timeout=30",
        monkeypatch,
    )
    assert kwargs["timeout"] == 10.0
    assert kwargs["server_settings"] == {
        "application_name": "sb-worker",
        "statement_timeout": "5s",
        "search_path": "app",
    }
    assert kwargs["ssl"] == "disable" and kwargs["target_session_attrs"] == "read-write"
    assert kwargs["command_timeout"] == "30"  # asyncpg takes it as float(…)
    for libpq_only in ("connect_timeout", "application_name", "options", "sslmode"):
        assert libpq_only not in kwargs


def test_libpqs_host_and_port_parameters_are_sqlalchemys() -> None:
    # A socket directory as libpq's `host=` names one: SQLAlchemy's dialect takes it.
    url, kwargs = connect_options("postgresql://u@/db?host=/var/run/postgresql&port=5433")
    assert kwargs == {}
    args = url.get_dialect()().create_connect_args(url)[1]
    assert (args["host"], args["port"]) == ("/var/run/postgresql", 5433)


def test_a_url_without_a_query_passes_asyncpg_no_extra_arguments() -> None:
    url, kwargs = connect_options("postgresql://u@h/db")
    assert kwargs == {} and dict(url.query) == {}
    assert connect_options("sqlite:///x.db?connect_timeout=3") == (
        make_url("sqlite+aiosqlite:///x.db?connect_timeout=3"),
        {},
    )


@pytest.mark.parametrize(
    ("query", "fragments"),
    [
        ("connect_timeout=10&foo=1", ("'foo'", "connect_timeout, host, options")),
        ("statement_timeout=5", ("'statement_timeout'", "application_name")),
        ("sslrootcert=%2Fetc%2Fca.pem", ("sslrootcert", "PGSSLROOTCERT")),
        ("sslcert=c.pem&sslmode=verify-full", ("sslcert", "PGSSLCERT")),
        ("connect_timeout=soon", ("connect_timeout='soon'", "seconds")),
        ("connect_timeout=0", ("connect_timeout='0'", "seconds")),
        ("connect_timeout=-5", ("connect_timeout='-5'", "seconds")),
        ("options=-x", ("options='-x'", "-c name=value")),
        ("application_name=a&application_name=b", ("more than once",)),
    ],
)
def test_a_parameter_asyncpg_cannot_take_is_refused_in_one_line(
    query: str, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(StartupRefused) as refused:
        check_database_url(f"postgres://u:secret@h/db?{query}")
    message = str(refused.value)
    assert refused.value.code == "invalid_database_url"
    assert message.startswith("cannot use ") and "postgres://u:***@h/db?" in message
    assert "secret" not in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message


def caused_by(cause: BaseException) -> OSError:
    """An error as SQLAlchemy's adapted one reaches `explain`: asyncpg's as its cause."""
    error = OSError(str(cause))
    error.__cause__ = cause
    return error


def test_explain_says_create_it_only_for_a_missing_database() -> None:
    settings = Settings(database_url="postgresql://u:secret@h/sb")
    missing = asyncpg.exceptions.InvalidCatalogNameError('database "sb" does not exist')
    refused = explain(caused_by(missing), settings)
    assert refused is not None and refused.code == "database_missing"
    assert "createdb" in str(refused) and "secret" not in str(refused)
    role = asyncpg.exceptions.InvalidAuthorizationSpecificationError('role "u" does not exist')
    refused = explain(caused_by(role), settings)
    # A login the server refused: a setting to fix (exit 2), not a server to wait for.
    assert refused is not None and refused.code == "database_login_refused"
    assert refused.refusal is Refusal.INVALID
    assert "createdb" not in str(refused) and "refused the login" in str(refused)


def test_explain_names_the_certificate_file_verify_full_wants() -> None:
    settings = Settings(database_url="postgresql://u:secret@h/sb?sslmode=verify-full")
    cause = asyncpg.exceptions.ClientConfigurationError(
        'root certificate file "/home/u/.postgresql/root.crt" does not exist or cannot be accessed'
    )
    refused = explain(caused_by(cause), settings)
    assert refused is not None and refused.code == "database_certificate_missing"
    message = str(refused)
    assert "/home/u/.postgresql/root.crt" in message and "createdb" not in message
    assert "sslmode=require" in message and "verify-full" in message
    assert "secret" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:////srv/sb/x.db", "/srv/sb/x.db"),
        ("sqlite+aiosqlite:///./x.db", "{cwd}/x.db"),
        ("sqlite:///data/../x.db", "{cwd}/x.db"),
        ("sqlite:///~/x.db", "{cwd}/~/x.db"),  # SQLite does not expand ~: neither does the check
        ("sqlite:///file:x.db?mode=ro&uri=true", "{cwd}/x.db"),
        ("sqlite:///file:/srv/a%2520b.db?uri=true", "/srv/a b.db"),
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite+aiosqlite:///file::memory:?cache=shared&uri=true", None),
        ("sqlite:///file:shared?mode=memory&cache=shared&uri=true", None),
        ("postgresql://u@h/x.db", None),
    ],
)
def test_sqlite_file_is_where_sqlite_opens_it(url: str, expected: str | None) -> None:
    found = sqlite_file(normalise_url(url))
    assert found == (None if expected is None else Path(expected.format(cwd=Path.cwd())))


def test_a_missing_sqlite_file_is_refused_only_where_none_may_be_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    check_database_url(f"sqlite:///{missing}")  # a command that creates it: fine
    with pytest.raises(StartupRefused) as refused:
        check_database_url(f"sqlite:///{missing}", create=False)
    message = str(refused.value)
    assert (refused.value.code, refused.value.refusal) == ("database_missing", Refusal.INVALID)
    assert message.startswith(f"cannot open the SQLite database {missing}: there is no such file")
    assert "`schemabridge db upgrade`" in message and "default" not in message
    # A missing directory is a missing database too: its fix is the URL, not a writable path.
    with pytest.raises(StartupRefused, match="there is no such file"):
        check_database_url(f"sqlite:///{tmp_path}/nowhere/sb.db", create=False)
    assert not missing.exists()
    missing.touch()
    check_database_url(f"sqlite:///{missing}", create=False)
    check_database_url("sqlite:///file:m?mode=memory&cache=shared&uri=true", create=False)
    check_database_url("postgresql://u@h/db", create=False)  # the server says (`explain`)


def test_a_missing_default_sqlite_file_is_named_as_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StartupRefused) as refused:
        check_database_url(DEFAULT_DATABASE_URL, create=False)
    expected = f"{tmp_path / 'schemabridge.db'} (SCHEMABRIDGE_DATABASE_URL's default): "
    assert expected in str(refused.value)


def test_a_redis_error_is_one_sentence_before_what_to_do() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    from engine.operations.startup import redis_refusal

    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    error = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    message = redis_refusal(settings, error).message
    assert "Connection refused; start it" in message
    assert ".;" not in message


def test_a_redis_error_offers_the_embedded_redis_only_where_the_process_may_use_it() -> None:
    """A separate worker or api on PostgreSQL refuses the embedded Redis (exit 2): telling
    it to unset SCHEMABRIDGE_REDIS_URL sent the operator from one refusal to another."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from engine.operations.startup import redis_refusal

    error = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    redis_url = "redis://127.0.0.1:1/0"
    on_postgresql = Settings(database_url="postgresql://sb@db/sb", redis_url=redis_url)
    refused = redis_refusal(on_postgresql, error)
    assert refused.refusal is Refusal.UNAVAILABLE
    assert "embedded" not in refused.message and "unset" not in refused.message
    assert refused.message.endswith(
        "start it or fix SCHEMABRIDGE_REDIS_URL (the Redis every process of this database shares)"
    ), refused.message
    on_sqlite = Settings(database_url="sqlite:///sb.db", redis_url=redis_url)
    assert "or unset SCHEMABRIDGE_REDIS_URL to use the embedded Redis" in (
        redis_refusal(on_sqlite, error).message
    )
    with pytest.raises(StartupRefused) as malformed:
        check_redis_url("http://127.0.0.1:6379/0", "postgresql://sb@db/sb")
    assert "embedded" not in str(malformed.value), malformed.value


def test_a_redis_database_the_server_does_not_have_is_a_setting_to_fix() -> None:
    from redis.exceptions import ResponseError

    from engine.operations.startup import redis_refusal

    settings = Settings(redis_url="redis://127.0.0.1:6379/99")
    refused = redis_refusal(settings, ResponseError("DB index is out of range"))
    assert refused.refusal is Refusal.INVALID  # exit 2, not 4: waiting never helps
    assert refused.message == (
        "cannot use Redis at redis://127.0.0.1:6379/99: DB index is out of range, the server "
        "has no database 99; give one it has in SCHEMABRIDGE_REDIS_URL (0 to 15 unless its "
        "`databases` setting allows more)"
    )
