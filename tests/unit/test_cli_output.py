"""The CLI's pure output rules: one warning per outage, wait reasons as people read them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Literal

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from api.cli import log_setup, run_live_display


def record(
    message: str, error: BaseException | None, level: int = logging.WARNING
) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord("engine", level, __file__, 1, message, None, exc_info)


def test_an_outage_is_one_warning_line_and_the_next_outage_another() -> None:
    now = [0.0]
    outages = log_setup.OutageFilter(clock=lambda: now[0])
    down = RedisConnectionError("Connection refused")
    first = record("could not settle a slot", down)
    assert outages.filter(first)
    assert first.exc_info is None and first.levelname == "WARNING"
    assert first.getMessage().startswith("redis unreachable (ConnectionError: Connection refused)")
    assert "nothing is lost" in first.getMessage()
    for _ in range(100):  # the same outage: counted, not shown
        now[0] += 0.1
        assert not outages.filter(record("could not settle a slot", down))
    assert outages.filter(record("a bug", ValueError("boom"), logging.ERROR))  # not a fault
    now[0] += log_setup.OUTAGE_QUIET_S + 1
    again = record("wake-up died", down)
    assert outages.filter(again)
    assert "(the last outage had 100 more)" in again.getMessage()


def test_json_lines_carry_stable_keys_and_the_record_fields() -> None:
    line = record("run r1 failed", None)
    line.__dict__.update(event="run.failed", run_id="r1", vertex="call")
    body = json.loads(log_setup.JsonFormatter("worker-1").format(line))
    assert body["service"] == "worker-1" and body["event"] == "run.failed"
    assert (body["run_id"], body["vertex"], body["level"]) == ("r1", "call", "warning")
    assert {"ts", "message", "logger"} <= set(body)


def test_wait_reasons_read_as_sentences_with_a_countdown() -> None:
    said = run_live_display.describe_wait(
        "redispatch", "redispatch 2/3 after HTTP 503", 109.4, 100.0
    )
    assert said == "redispatch 2/3 in 9 s after HTTP 503"
    limited = run_live_display.describe_wait("tenant_rate_limit", "tenant t at its limit", 103, 100)
    assert limited == "tenant t at its limit; or rerun with --tenant-rate N (next try in 3 s)"
    assert run_live_display.describe_wait("admission_wait", "waiting for a slot", None, 0) == (
        "waiting for a slot"
    )
    # A group of children that share no words (some refused while the breaker was open, some
    # half-open) is named by its reason, not by a line ending in ": ".
    assert run_live_display.describe_wait("breaker_open", "", 104, 100) == "breaker open"
    assert run_live_display.describe_wait("tenant_rate_limit", "", None, 0) == (
        "tenant rate limit; or rerun with --tenant-rate N"
    )
    assert run_live_display.plural(1, "attempt") == "1 attempt"
    assert run_live_display.plural(2, "attempt") == "2 attempts"
    assert run_live_display.plural(2, "child", "children") == "2 children"


def test_a_connection_broken_mid_query_as_postgresql_stops_is_the_outage() -> None:
    """asyncpg's protocol error on a pooled connection that PostgreSQL dropped mid-query, as
    SQLAlchemy raises it from a worker's claim: the one warning of the outage, no traceback."""
    from asyncpg.exceptions import InternalClientError
    from sqlalchemy.exc import InternalError

    broken = InternalClientError("cannot switch to state 15; another operation (2) is in progress")
    raised = InternalError("WITH claimed AS (UPDATE step ...)", {}, broken)
    raised.__cause__ = broken
    assert log_setup.fault_source(raised) == "database"
    claim = record("claim failed; retrying after the idle poll", raised, logging.ERROR)
    assert log_setup.OutageFilter().filter(claim)
    assert claim.levelname == "WARNING" and claim.exc_info is None
    assert claim.getMessage().startswith("database unreachable (InternalError: ")
    assert "claim failed" in claim.getMessage()
    # Another client error of asyncpg is a bug, not an outage: it keeps its traceback.
    assert log_setup.fault_source(InternalClientError("unexpected message")) is None


def test_a_slow_redis_read_is_a_redis_outage_not_the_databases() -> None:
    """The row change tokens' read times out under `asyncio.timeout`, a bare TimeoutError: a
    benchmark's api logged it as "database unreachable (TimeoutError)"."""
    slow = TimeoutError()
    said = logging.LogRecord(
        "engine.coordination.invalidations",
        logging.WARNING,
        __file__,
        1,
        "row change tokens: Redis did not answer (%s: %s); copies of rows are not used until "
        "it does",
        ("TimeoutError", slow),
        None,
    )
    assert log_setup.OutageFilter(consequences=log_setup._API_CONSEQUENCES).filter(said)
    assert said.getMessage().startswith("redis unreachable (TimeoutError); row change tokens:")
    # The same error from the store's side is the database's.
    assert log_setup.fault_source(slow, "engine.store.db") == "database"


def test_an_apis_database_outage_says_what_an_api_does_without_sql() -> None:
    """An api keeps no results: its warning says requests are answered 503; and neither
    process shows SQLAlchemy's statement, parameters, link or class names."""
    from asyncpg.exceptions import ConnectionDoesNotExistError
    from sqlalchemy.exc import InterfaceError

    closed = ConnectionDoesNotExistError("connection was closed in the middle of operation")
    raised = InterfaceError("SELECT destination_cap.destination FROM destination_cap", {}, closed)
    assert "[SQL: SELECT destination_cap" in str(raised)  # what SQLAlchemy adds
    for consequences, says in ((log_setup._API_CONSEQUENCES, "answered 503"), (None, "leases")):
        caps = logging.LogRecord(
            "engine", logging.WARNING, __file__, 1, "reading caps failed: %s", (raised,), None
        )
        assert log_setup.OutageFilter(consequences=consequences).filter(caps)
        message = caps.getMessage()
        assert message.startswith(
            "database unreachable (InterfaceError: connection was closed in the middle of "
            "operation); reading caps failed: connection was closed"
        ), message
        assert says in message, message
        assert "[SQL:" not in message and "sqlalche.me" not in message, message
        assert "(sqlalchemy." not in message and "<class" not in message, message


def test_an_outage_warning_never_shows_a_statement_with_brackets_nor_its_claim_tokens() -> None:
    """A lease renewal's statement holds brackets of its own (`ANY ($2::VARCHAR[])`), which
    ended SQLAlchemy's `[SQL: …]` early: the warning showed the rest of the statement and the
    parameters, claim tokens among them, cut mid-statement. Only the driver's line is told,
    whether the record quotes the error (`%s`) or carries it (`exc_info`)."""
    from asyncpg.exceptions import InterfaceError as DriverInterfaceError
    from sqlalchemy.exc import InterfaceError

    statement = (
        "UPDATE step SET lease_until=$1::TIMESTAMP WITH TIME ZONE "
        "WHERE step.id = ANY ($3::VARCHAR[])\n AND step.claim_token = ANY ($2::VARCHAR[])"
    )
    params = ("2026-12-05T19:00:00", ["5c70e1f2:18651", "5c70e1f3:18652"], ["s1", "s2"])
    raised = InterfaceError(statement, params, DriverInterfaceError("connection is closed"))
    assert "[parameters: " in str(raised) and "sqlalche.me" in str(raised)  # what it adds
    quoted = logging.LogRecord(
        "engine", logging.WARNING, __file__, 1, "could not renew leases: %s", (raised,), None
    )
    carried = record("could not renew leases", raised, logging.ERROR)
    for said in (quoted, carried):
        assert log_setup.OutageFilter().filter(said)
        message = said.getMessage()
        assert message.startswith(
            "database unreachable (InterfaceError: connection is closed); could not renew leases"
        ), message
        for leaked in ("claim_token", "VARCHAR", "5c70e1f2", "[SQL", "[parameters", "sqlalche"):
            assert leaked not in message, message
        assert "\n" not in message, message


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The process's logging as it was, after a test that ran `log_setup.configure`."""
    root, access = logging.getLogger(), logging.getLogger(log_setup.ACCESS_LOGGER)
    quiet = {name: logging.getLogger(name).level for name in log_setup.QUIET_LOGGERS}
    saved = (root.handlers[:], root.level, access.handlers[:], access.level, access.propagate)
    yield
    root.handlers[:], root.level, access.handlers[:], access.level, access.propagate = saved
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    ("role", "said", "not_said"),
    [("api", "answered 503", "not yet recorded"), ("worker", "not yet recorded", "503")],
)
def test_a_process_says_what_its_role_does_during_a_database_outage(
    role: Literal["api", "worker"],
    said: str,
    not_said: str,
    capsys: pytest.CaptureFixture[str],
    restored_logging: None,
) -> None:
    """`configure(role=...)` installs the outage warning of that role: an api, which keeps no
    results, never promises to keep unrecorded ones; a worker says what it keeps."""
    from asyncpg.exceptions import ConnectionDoesNotExistError
    from sqlalchemy.exc import InterfaceError

    closed = ConnectionDoesNotExistError("connection was closed in the middle of operation")
    raised = InterfaceError("SELECT 1", {}, closed)
    log_setup.configure(f"{role}-1", role=role)
    logging.getLogger("engine").warning("reading caps failed", exc_info=raised)
    (line,) = capsys.readouterr().err.splitlines()
    assert "database unreachable (InterfaceError: " in line, line
    assert said in line and not_said not in line, line


def test_an_outage_ended_by_a_probe_is_said_once_and_the_next_one_told_again() -> None:
    now = [0.0]
    outages = log_setup.OutageFilter(clock=lambda: now[0])
    down = RedisConnectionError("Connection refused")
    assert outages.since("redis") is None
    assert outages.filter(record("beat failed", down))
    now[0] += 5.0
    assert not outages.filter(record("beat failed", down))
    assert outages.since("redis") == 0.0
    assert outages.end("redis") == 5.0
    assert outages.end("redis") is None, "said once"
    assert outages.filter(record("beat failed", down)), "the next outage is told again"


async def test_an_access_line_has_the_fields_of_every_json_line(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    """A log shipper reads an access line as it reads any other JSON line of the process: with
    `ts`, `level`, `service` (which api answered: two on one host are told apart), `event`,
    `message` and `logger`, besides the request's own fields."""
    from starlette.types import Message, Receive, Scope, Send

    from api.rest.middleware import RequestObserver

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    log_setup.configure("api", fmt="json", access_log=log_setup.AccessLog.ALL, role="api")
    log_setup.name_service("api-host-8001")  # as `api` does once its port is bound
    scope: Scope = {"type": "http", "method": "GET", "path": "/runs/r-1", "headers": []}
    await RequestObserver(app)(scope, receive, send)
    (line,) = capsys.readouterr().err.splitlines()
    logged = json.loads(line)
    assert list(logged)[:6] == ["ts", "level", "service", "event", "message", "logger"], logged
    assert logged["level"] == "info" and logged["logger"] == log_setup.ACCESS_LOGGER, logged
    assert logged["service"] == "api-host-8001", logged
    assert logged["event"] == "http.request" and logged["message"] == "GET /runs/r-1 404"
    assert (logged["method"], logged["path"], logged["status"]) == ("GET", "/runs/r-1", 404)
    assert isinstance(logged["duration_ms"], float), logged


def test_a_python_warning_is_a_log_line_of_the_chosen_format(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    """A library's warning (SQLAlchemy's `SAWarning`, a `RuntimeWarning`) is written by Python
    as two raw lines on stderr, which a shipper of `--log-format json` cannot parse: it goes
    through the log, as one JSON line, instead."""
    import warnings

    log_setup.configure("worker-1", fmt="json")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("pool overflow is deprecated", UserWarning, stacklevel=1)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    logged = json.loads(lines[0])
    assert logged["level"] == "warning" and logged["service"] == "worker-1", logged
    assert "UserWarning: pool overflow is deprecated" in logged["message"], logged
