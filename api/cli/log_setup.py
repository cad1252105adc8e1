"""Logging of the `schemabridge` processes, set up in one place.

Every command that runs the engine (`serve`, `api`, `worker`, `run`) calls `configure` once.
What it gives:

- **Two formats** (`--log-format`, `SCHEMABRIDGE_LOG_FORMAT`): `text`, one line a record
  (`time level service: message key=value…`), never wrapped, for a person; `json`, one object
  a line with stable keys — `ts` (ISO 8601, UTC), `level`, `service`, `event`, `message`,
  `logger`, then what the record carries (`run_id`, `vertex`, `destination`, `tenant_id`, …)
  — for a log shipper. The REST access log is JSON in both (it always was); in `json` it
  begins with the same `ts`, `level`, `service`, `event` (`http.request`), `message`
  (`GET /runs 200`) and `logger` (`AccessFormatter`), so a shipper reads every line of a
  process alike and tells two api processes' requests apart.
- **An access log as chosen** (`--access-log`, `SCHEMABRIDGE_ACCESS_LOG`): every request
  (`all`), only the notable ones (`changes`: not a GET or HEAD, an error, a slow GET; the mark
  is the middleware's, `api.rest.middleware.notable`), or none (`off`).
- **Only what matters at `info`**: the engine's chatter (alembic's plugin announcements, the
  per-call admission debug) is held at `warning`; what an operator acts on (a run failed, a
  breaker opened or closed, a destination's limit cut, a lease requeued, a shutdown step) is
  logged by the engine at `info` or above.
- **Every line in the format chosen**: Python's warnings go through the log
  (`logging.captureWarnings`, the `py.warnings` logger), not raw onto stderr.
- **One line per outage, not one per call** (`OutageFilter`): a record caused by the database
  or Redis not answering — a fault the engine expects and rides out — is shown once, as one
  warning without a traceback saying what was lost and what the engine does about it; the
  same outage's later records are counted, not shown, until the dependency has been quiet for
  `OUTAGE_QUIET_S`; the next outage is told again, with the count of the last one. What it
  says the process does meanwhile is the process's (`configure`'s `role`: an `api` has no
  results to keep), and the error is its driver's first line, never SQLAlchemy's SQL text
  or link. A process that probes a dependency after its outage says once it works again
  (`outage_since`, `end_outage`: the `api`, which has no other sign). `--debug` (or
  `--log-level debug`) shows every record with its traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from api.access_names import ACCESS_FIELDS, ACCESS_LOGGER

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")


class Level(StrEnum):
    """`--log-level`."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Format(StrEnum):
    """`--log-format`."""

    TEXT = "text"
    JSON = "json"


class AccessLog(StrEnum):
    """`--access-log`: which requests the REST access log writes."""

    ALL = "all"
    """Every request (`api`'s default: production, where logs are shipped)."""
    CHANGES = "changes"
    """What may change something or went wrong: every request but GET and HEAD, every answer
    of status 400 or more, and a GET slower than `api.rest.middleware.SLOW_READ_S` (`serve`'s
    default: a laptop with the monitor open, which polls every few seconds)."""
    OFF = "off"


OUTAGE_QUIET_S = 30.0
"""A dependency without a failure for this long is back: its next failure is a new outage."""
QUIET_LOGGERS = ("alembic", "aiohttp.access", "uvicorn.access", "uvicorn.error", "asyncio")
"""Libraries whose `info` is noise to an operator: only their warnings show."""
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "service"}

_CONSEQUENCES = {
    "redis": (
        "nothing is lost: work that needs admission waits (steps park and try again) and "
        "workers poll the store instead of waiting for wake-ups until Redis answers"
    ),
    "database": (
        "finished results not yet recorded are kept and retried until shortly before their "
        "steps' leases end; those still unrecorded then are given up, and their steps run "
        "again (their calls are sent again) once the database answers"
    ),
    # The database behind a transaction pooler the settings do not name (`fault_source`).
    "pooler": (
        "until then statements fail at random, each failure taken as an outage: finished "
        "results not yet recorded are kept and retried until shortly before their steps' "
        "leases end; those still unrecorded then are given up, and their steps run again "
        "(their calls are sent again)"
    ),
}

_API_CONSEQUENCES = {
    "redis": _CONSEQUENCES["redis"],
    "database": (
        "requests that need the database are answered 503 (store_unavailable) until it "
        "answers again; nothing already stored is lost"
    ),
    "pooler": (
        "until then statements fail at random: requests they fail are answered 503 "
        "(store_unavailable), and /health is not ok"
    ),
}
"""What an `api` process does meanwhile: it answers requests, and keeps no results."""
_SQL_DETAIL = re.compile(
    r"\s*(\[SQL: |\[parameters: |\(Background on this error at: ).*",
    re.S,
)
"""What SQLAlchemy appends to a driver's error, from its first mark to the end: the
statement, its parameters (claim tokens among them) and its link. Cut there, not matched to
a closing bracket: a statement holds brackets of its own (`ANY ($2::VARCHAR[])`)."""
_CLASS_PREFIX = re.compile(r"\((?:sqlalchemy|asyncpg)\.[\w.]+\) |<class '[\w.]+'>: ")
"""The class names SQLAlchemy puts before the driver's words."""


def log_format(value: str | None) -> LogFormat:
    """`--log-format`, else `SCHEMABRIDGE_LOG_FORMAT`, else `text`."""
    chosen = (value or os.environ.get("SCHEMABRIDGE_LOG_FORMAT") or "text").lower()
    if chosen not in FORMATS:
        raise ValueError(f"log format is text or json, not {chosen!r}")
    return "json" if chosen == "json" else "text"


ACCESS_LOG_CHOICES = "all, changes or off"


def access_log(value: str | None, default: AccessLog) -> AccessLog:
    """`--access-log`, else `SCHEMABRIDGE_ACCESS_LOG`, else the command's `default` (any
    case). A value that is none of them is a `ValueError` whose message names where it came
    from, what it was and the choices: `--access-log 'loud': give all, changes or off`."""
    where, chosen = "--access-log", value
    if chosen is None:
        where = "SCHEMABRIDGE_ACCESS_LOG"
        chosen = os.environ.get(where) or default
    try:
        return AccessLog(chosen.strip().lower())
    except ValueError:
        raise ValueError(f"{where} {chosen!r}: give {ACCESS_LOG_CHOICES}") from None


class NotableOnly(logging.Filter):
    """`--access-log changes`: passes the access records the REST middleware marked `notable`
    (`api.rest.middleware.notable`); a record without the mark passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, "notable", True))


def _causes(error: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


COORDINATION_LOGGER_PREFIX = "engine.coordination"
"""Where a bare timeout or connection error (`asyncio.timeout` around a Redis call raises the
builtin `TimeoutError`) is Redis's, not the database's."""


def fault_source(error: BaseException | None, logger: str = "") -> str | None:
    """`redis` or `database` when `error` (or what caused it) says that dependency did not
    answer, `pooler` when the database is behind a transaction pooler the settings do not
    name (`engine.store.pooler`); None for any other error (a bug keeps its traceback). A
    bare timeout or connection error is the database's unless `logger` (the record's) is
    under `engine.coordination`: the row change tokens' slow Redis read was logged as
    "database unreachable (TimeoutError)"."""
    if error is not None and _pooler_hint(error) is not None:
        return "pooler"
    for cause in _causes(error):
        module = type(cause).__module__
        if module.startswith("redis"):
            return "redis"
        if module.startswith(("sqlalchemy", "asyncpg", "sqlite3", "aiosqlite")):
            name = type(cause).__name__
            if name in {"OperationalError", "InterfaceError", "TimeoutError", "DBAPIError"}:
                return "database"
            if "Connection" in name or "CannotConnect" in name:
                return "database"
            if name == "InternalClientError" and "another operation" in str(cause):
                # asyncpg's protocol state machine after the server dropped the connection
                # mid-query (a pooled connection reused as PostgreSQL stops): an outage too.
                return "database"
    for cause in _causes(error):
        if isinstance(cause, ConnectionError | TimeoutError):
            coordination = logger == COORDINATION_LOGGER_PREFIX or logger.startswith(
                COORDINATION_LOGGER_PREFIX + "."
            )
            return "redis" if coordination else "database"
    return None


def _pooler_hint(error: BaseException) -> str | None:
    # Imported here: the rule is the store's, and a command that never logs an error must
    # not pay for importing it.
    from engine.operations.startup import pooler_hint

    return pooler_hint(error)


def _record_error(record: logging.LogRecord) -> BaseException | None:
    if record.exc_info and record.exc_info[1] is not None:
        return record.exc_info[1]
    args = record.args if isinstance(record.args, tuple) else ()
    return next((a for a in args if isinstance(a, BaseException)), None)


class OutageFilter(logging.Filter):
    """Collapses the records of one database or Redis outage into one warning line.

    `consequences`: what the process does meanwhile, by source (default: a worker's)."""

    def __init__(
        self, *, clock: Any = time.monotonic, consequences: dict[str, str] | None = None
    ) -> None:
        super().__init__()
        self._clock = clock
        self._consequences = consequences or _CONSEQUENCES
        self._last_seen: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._since: dict[str, float] = {}
        """When each outage told and not yet ended (`end`) began, by source."""

    def since(self, source: str) -> float | None:
        """When the outage of `source` (`database`, `redis`) began by the filter's clock, if
        one was told and has not ended (`end`, or quiet for `OUTAGE_QUIET_S`)."""
        began = self._since.get(source)
        last = self._last_seen.get(source)
        if began is None or last is None or self._clock() - last >= OUTAGE_QUIET_S:
            return None
        return began

    def end(self, source: str) -> float | None:
        """`source` answers again: its next failure is a new outage, told again. Returns how
        long the outage lasted (None: there was none to end)."""
        began = self.since(source)
        self._since.pop(source, None)
        self._last_seen.pop(source, None)
        return None if began is None else self._clock() - began

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        source = fault_source(_record_error(record), record.name)
        if source is None:
            return True
        now = self._clock()
        last = self._last_seen.get(source)
        self._last_seen[source] = now
        if last is not None and now - last < OUTAGE_QUIET_S:
            self._suppressed[source] = self._suppressed.get(source, 0) + 1
            return False
        self._since[source] = now
        error = _record_error(record)
        reason = _first_line(error) if error is not None else ""
        earlier = self._suppressed.pop(source, 0)
        message = _without_sql(record.getMessage(), error)
        record.msg = (
            f"{_what_failed(source, error)} ({reason}); {message}; {self._consequences[source]}"
            f"; further failures of this outage are not logged"
            + (f" (the last outage had {earlier} more)" if earlier else "")
        )
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.__dict__.setdefault(
            "event", "database.pooler" if source == "pooler" else f"{source}.unreachable"
        )
        return True


def _what_failed(source: str, error: BaseException | None) -> str:
    """How an outage's line begins: the dependency that failed, or for `pooler` the fix."""
    hint = _pooler_hint(error) if source == "pooler" and error is not None else None
    return hint or f"{source} unreachable"


def _driver_line(error: BaseException) -> str:
    """The first line of the driver's own message: of the exception SQLAlchemy wraps
    (`orig`) when it wrapped one, never the statement, parameters or link it adds."""
    orig = getattr(error, "orig", None) if hasattr(error, "statement") else None
    text = _SQL_DETAIL.sub("", str(orig if isinstance(orig, BaseException) else error))
    lines = _CLASS_PREFIX.sub("", text).strip().splitlines()
    return lines[0].strip() if lines else ""


def _first_line(error: BaseException) -> str:
    line = _driver_line(error)
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def _without_sql(message: str, error: BaseException | None) -> str:
    """A record's message with each SQLAlchemy error it quotes (`%s` of the error) said as
    its driver's line, and anything else from SQLAlchemy's first mark on cut."""
    for cause in _causes(error):
        if hasattr(cause, "statement"):
            message = message.replace(str(cause), _driver_line(cause))
    return _CLASS_PREFIX.sub("", _SQL_DETAIL.sub("", message)).strip()


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _RESERVED and k != "event"}


class TextFormatter(logging.Formatter):
    """`2026-01-02T03:04:05.678Z INFO    worker-1: message key=value …`, one line (a traceback,
    shown only with `--debug`, follows indented)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        message = record.getMessage().replace("\n", " ")
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items() if v is not None)
        line = f"{stamp.replace('+00:00', 'Z')} {record.levelname:<7} {self.service}: {message}"
        if extras:
            line += f" [{extras}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: `ts`, `level`, `service`, `event`, `message`, `logger`, then
    the record's own fields (`run_id`, `vertex`, `destination`, …)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "event": getattr(record, "event", None) or record.name,
            "message": record.getMessage(),
            "logger": record.name,
        }
        body.update(_extras(record))
        if record.exc_info:
            body["traceback"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


ACCESS_EVENT = "http.request"
"""The `event` of every access-log line."""


class AccessFormatter(logging.Formatter):
    """The access log's line: `ts`, `level`, `service`, `event`, `message`, `logger` as
    every JSON line has them, then the request's own fields (`method`, `route`, `path`,
    `status`, `duration_ms`, `key_id`, `client`, …). A record without them (not the
    middleware's) is its message as it is."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, ACCESS_FIELDS, None)
        if not isinstance(fields, dict):
            return record.getMessage()
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        body: dict[str, Any] = {
            "ts": fields.get("ts", stamp),
            "level": record.levelname.lower(),
            "service": self.service,
            "event": ACCESS_EVENT,
            "message": f"{fields.get('method')} {fields.get('path')} {fields.get('status')}",
            "logger": record.name,
        }
        body.update((k, v) for k, v in fields.items() if k not in body)
        return json.dumps(body, default=str)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is now (a live display may have redirected it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _installed() -> OutageFilter | None:
    """The outage filter `configure` put on the root handler (None: none, `--debug`)."""
    for handler in logging.getLogger().handlers:
        for found in handler.filters:
            if isinstance(found, OutageFilter):
                return found
    return None


def outage_since(source: str) -> float | None:
    """When the outage of `source` the log told (and has not ended) began, by
    `time.monotonic`; None when there is none, or `configure` installed no outage filter."""
    outages = _installed()
    return None if outages is None else outages.since(source)


def end_outage(source: str, logger: logging.Logger) -> None:
    """Say once (info) that `source` works again after the outage the log told, which ends
    it: its next failure is told again."""
    outages = _installed()
    lasted = None if outages is None else outages.end(source)
    if lasted is not None:
        logger.info(
            "%s works again after %.1f s",
            source,
            lasted,
            extra={"event": f"{source}.recovered"},
        )


def name_service(service: str) -> None:
    """Name the process `service` in every line `configure` set up from now on: an `api` is
    named by the port it listens on, known once it is bound, after logging began."""
    for handler in (*logging.getLogger().handlers, *logging.getLogger(ACCESS_LOGGER).handlers):
        if isinstance(handler.formatter, TextFormatter | JsonFormatter | AccessFormatter):
            handler.formatter.service = service


def configure(
    service: str,
    *,
    level: str = "info",
    fmt: LogFormat = "text",
    access_log: AccessLog = AccessLog.OFF,
    debug: bool = False,
    role: Literal["api", "worker"] = "worker",
) -> None:
    """Set up the process's logging once: the root handler on stderr in `fmt`, the outage
    filter (off with `debug`) telling what a process of `role` does meanwhile (`worker`: any
    process that runs one, `serve` and `run` included), quiet libraries, and the REST access
    log (JSON, on stderr: every request, the notable ones, or none)."""
    handler = _Stderr()
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter(service))
    if not debug and level != "debug":
        handler.addFilter(OutageFilter(consequences=_API_CONSEQUENCES if role == "api" else None))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else level.upper())
    # Python writes a warning (a library's deprecation, SQLAlchemy's SAWarning) as raw lines
    # on stderr, which a shipper of JSON logs cannot parse: log it as a record instead.
    logging.captureWarnings(True)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    access = logging.getLogger(ACCESS_LOGGER)
    access.propagate = False
    access.setLevel(logging.CRITICAL + 1 if access_log is AccessLog.OFF else logging.INFO)
    for old in list(access.handlers):
        access.removeHandler(old)
    raw = _Stderr()
    # For a person (`text`) the request's own fields are enough, and keep the line short.
    raw.setFormatter(
        AccessFormatter(service) if fmt == "json" else logging.Formatter("%(message)s")
    )
    if access_log is AccessLog.CHANGES:
        raw.addFilter(NotableOnly())
    access.addHandler(raw)
