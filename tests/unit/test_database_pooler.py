"""SCHEMABRIDGE_DATABASE_POOLER: what the store changes behind a transaction pooler (only
then), how it is refused when misspelt, and how a pooler the setting does not name is told
(engine/store/pooler.py; the real PgBouncer runs in tests/e2e/test_pgbouncer.py)."""

from __future__ import annotations

import logging

import pytest
from asyncpg.exceptions import (
    DuplicatePreparedStatementError,
    InvalidSQLStatementNameError,
    ProtocolViolationError,
)
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from api.cli import log_setup
from engine.settings import Settings
from engine.store.db import DatabaseURLError, connect_options
from engine.store.pooler import POOLER_HINT, PoolerWatch, pooler_mismatch
from engine.store.unreachable import store_unreachable

URL = "postgresql://postgres@127.0.0.1:6432/sb"


def _wrapped(error: Exception) -> DBAPIError:
    """`error` as SQLAlchemy's asyncpg dialect raises it."""
    raised = DBAPIError("SELECT 1", {}, error)
    raised.__cause__ = error
    return raised


def test_without_a_pooler_the_connection_is_made_as_before() -> None:
    """No pooler: asyncpg keeps its statement cache (named, prepared once per connection)."""
    assert connect_options(URL) == connect_options(URL, "none")
    assert "statement_cache_size" not in connect_options(URL)[1]
    assert connect_options(URL + "?application_name=sb")[1] == {
        "server_settings": {"application_name": "sb"}
    }


def test_a_transaction_pooler_turns_asyncpgs_statement_cache_off() -> None:
    url, kwargs = connect_options(URL + "?application_name=sb", "transaction")
    assert kwargs == {"statement_cache_size": 0, "server_settings": {"application_name": "sb"}}
    # Only asyncpg's own cache: no statement name of SQLAlchemy's, which would name them.
    assert "prepared_statement_name_func" not in kwargs
    assert url.drivername == "postgresql+asyncpg"


def test_options_are_refused_behind_a_transaction_pooler_only() -> None:
    options = URL + "?options=-c%20statement_timeout%3D5s"
    assert connect_options(options)[1] == {"server_settings": {"statement_timeout": "5s"}}
    with pytest.raises(DatabaseURLError, match="ALTER ROLE") as refused:
        connect_options(options, "transaction")
    assert "SCHEMABRIDGE_DATABASE_POOLER=transaction" in str(refused.value)


def test_asyncpgs_cache_size_in_the_url_points_to_the_setting() -> None:
    with pytest.raises(DatabaseURLError) as refused:
        connect_options(URL + "?statement_cache_size=0")
    assert "set SCHEMABRIDGE_DATABASE_POOLER=transaction instead" in str(refused.value)


def test_the_setting_takes_none_or_transaction_in_any_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().database_pooler == "none"
    monkeypatch.setenv("SCHEMABRIDGE_DATABASE_POOLER", " Transaction ")
    assert Settings().database_pooler == "transaction"
    monkeypatch.setenv("SCHEMABRIDGE_DATABASE_POOLER", "session")
    with pytest.raises(ValidationError, match=r"give none .* or transaction .*not 'session'"):
        Settings()


@pytest.mark.parametrize(
    "error",
    [
        InvalidSQLStatementNameError('prepared statement "__asyncpg_stmt_d__" does not exist'),
        DuplicatePreparedStatementError('prepared statement "__asyncpg_stmt_1__" already exists'),
        ProtocolViolationError(
            'bind message supplies 1 parameters, but prepared statement "__asyncpg_stmt_5__" '
            "requires 2"
        ),
    ],
)
def test_another_clients_statements_say_a_pooler_stands_between(error: Exception) -> None:
    raised = _wrapped(error)
    assert pooler_mismatch(raised)
    # An outage to the worker (it keeps its results) and the api (503), not a refusal.
    assert store_unreachable(raised)
    watch = PoolerWatch()
    watch.note(raised)
    assert watch.recent() is raised
    assert watch.recent(window_s=-1.0) is None


def test_other_statement_errors_are_not_a_pooler() -> None:
    mine = InvalidSQLStatementNameError('prepared statement "report" does not exist')
    assert not pooler_mismatch(_wrapped(mine))
    assert not pooler_mismatch(ValueError('prepared statement "__asyncpg_stmt_1__"'))
    watch = PoolerWatch()
    watch.note(_wrapped(mine))
    assert watch.recent() is None


def test_the_log_line_is_the_fix_not_an_outage() -> None:
    missing = InvalidSQLStatementNameError('prepared statement "__asyncpg_stmt_d__" does not exist')
    raised = _wrapped(missing)
    assert log_setup.fault_source(raised) == "pooler"
    line = logging.LogRecord(
        "engine", logging.ERROR, __file__, 1, "recording 31 results failed (try 1)", None,
        (type(raised), raised, None),
    )  # fmt: skip
    assert log_setup.OutageFilter().filter(line)
    message = line.getMessage()
    assert message.startswith(f"{POOLER_HINT} (DBAPIError: prepared statement "), message
    assert "unreachable" not in message and line.exc_info is None
    assert "recording 31 results failed" in message
    assert line.__dict__["event"] == "database.pooler"
