"""Database engines and migrations, with the dialect differences isolated here.

SQLite (embedded): WAL journal, a busy timeout, and write transactions opened with
`BEGIN IMMEDIATE` so two writers never deadlock upgrading a read lock (SQLite serialises
writers; IMMEDIATE makes the wait happen up front where the busy timeout covers it). Reads use a
second engine with plain deferred transactions so the run monitor never waits for a writer.
Both SQLite engines open their connections through one `SqliteConnections`, so that disposing
of them also waits for every aiosqlite worker thread to end (see that module for why).
PostgreSQL: one asyncpg engine and one pool for both; reads run in autocommit, because a
transaction around a read pays a BEGIN and a ROLLBACK round trip for nothing: at READ
COMMITTED every statement takes its own snapshot anyway, in a transaction or not. (A read
that needs one snapshot over several statements, or a lock, uses `write.begin()`.)

Migrations are Alembic's, run programmatically on an open connection (`upgrade`), one
process at a time on PostgreSQL (an advisory lock), each that moved the schema logged.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy import column, event, func, inspect, select, table, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from engine.store import migration_locks
from engine.store.dialect import POSTGRESQL, SQLITE, Dialect
from engine.store.direct import DirectStatements
from engine.store.pooler import POOLER_SETTING, Pooler, PoolerWatch
from engine.store.sqlite_connections import SqliteConnections
from engine.store.sqlite_cursor import DEFERRED
from schemas import json_codec

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_JOIN_MARGIN_S = 5.0
"""How much longer than the busy timeout disposing waits for a connection's worker thread."""
IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000
"""PostgreSQL ends a session of ours left idle inside a transaction this long (server setting
`idle_in_transaction_session_timeout`), releasing its row locks. A process frozen mid-transaction
(SIGSTOP, a VM paused, a swap storm) would otherwise hold them until it wakes: the locks on a
fan-out's parent step stall every other worker's results, and the reaper's requeue of the frozen
worker's steps waits on them too. Our transactions never idle that long between statements. A
URL that sets the parameter itself (`options=-c idle_in_transaction_session_timeout=...`) keeps
its value; behind a transaction pooler PgBouncer's own `idle_transaction_timeout` does this."""


@dataclass(frozen=True)
class Engines:
    """`write` for transactions that change data, `read` for queries."""

    write: AsyncEngine
    read: AsyncEngine
    dialect: Dialect
    shared_pool: bool = False
    """`read` is `write` with other execution options (one pool, disposed once)."""
    sqlite_connections: SqliteConnections | None = None
    """What opens the SQLite engines' connections (None on PostgreSQL)."""
    direct: DirectStatements | None = None
    """PostgreSQL: the hottest single statements on asyncpg itself (`engine.store.direct`)."""
    pooler_watch: PoolerWatch | None = None
    """PostgreSQL without a pooler setting: whether statements fail as they do behind a
    transaction pooler (`engine.store.pooler`)."""

    async def dispose(self) -> None:
        """Close every pooled connection and, on SQLite, wait for their worker threads (and
        those of failed or forced-closed connections) to end. Connections still checked out
        are the caller's: close them first."""
        try:
            await self.write.dispose()
        finally:
            try:
                if not self.shared_pool:
                    await self.read.dispose()
            finally:
                if self.sqlite_connections is not None:
                    await self.sqlite_connections.wait_stopped()


def _sqlite_connect_args(url: URL) -> tuple[list[Any], dict[str, Any]]:
    """The arguments SQLAlchemy itself passes the driver for an SQLite `url`: the file's
    absolute path (or `:memory:`, or with `?uri=true` a `file:` URI), the `uri` mode and the
    other query options."""
    args, kwargs = url.get_dialect()().create_connect_args(url)
    return list(args), dict(kwargs)


def sqlite_file(url: URL) -> Path | None:
    """The file SQLite opens for `url` (as `normalise_url` returns it), absolute; None for a
    database that is no file (in memory) or not SQLite. Read from the driver's own arguments,
    so a check of the path looks where SQLite will: `~` is not expanded, a relative path is
    under the working directory, a `file:` URI (`?uri=true`) is its percent-decoded path."""
    if url.get_backend_name() != "sqlite":
        return None
    args, kwargs = _sqlite_connect_args(url)
    name = str(args[0])
    if kwargs.get("uri") and name.startswith("file:"):
        uri = urlsplit(name)
        if "memory" in parse_qs(uri.query).get("mode", []):
            return None
        name = unquote(uri.path)
    if name in ("", ":memory:"):  # "": SQLite's private temporary database
        return None
    return Path(os.path.abspath(name))


def _sqlite_connections(url: URL) -> SqliteConnections:
    args, kwargs = _sqlite_connect_args(url)  # plus the busy timeout
    return SqliteConnections(
        args,
        {**kwargs, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        join_timeout_s=SQLITE_BUSY_TIMEOUT_MS / 1000 + SQLITE_JOIN_MARGIN_S,
    )


def _sqlite_engine(url: URL, connections: SqliteConnections, *, immediate: bool) -> AsyncEngine:
    engine = create_async_engine(
        url,
        async_creator=connections.connect,
        json_serializer=json_codec.dumps,
        json_deserializer=json_codec.loads,
    )

    # The store's cursor reads every row of a statement in one hop (engine.store.sqlite_cursor):
    # a result streamed from here (`AsyncConnection.stream`) would be buffered whole, so
    # streaming is refused outright rather than quietly costing the memory it should save.
    engine.dialect.supports_server_side_cursors = False

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours (SQLAlchemy's
        # documented recipe for pysqlite/aiosqlite).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Deferred: BEGIN rides with the first statement (engine.store.sqlite_cursor).
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        conn.exec_driver_sql(begin, execution_options={DEFERRED: True})

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _before_execute(
        conn: Connection, _cursor: Any, sql: str, _params: Any, context: Any, _many: bool
    ) -> None:
        # Not inside a savepoint: its statement's failure must surface there, where
        # SQLAlchemy rolls the savepoint back. Deferred, it would surface at RELEASE
        # SAVEPOINT, after which SQLAlchemy emits no ROLLBACK TO: the savepoint's other
        # writes would be committed with the transaction.
        if (
            context is not None
            and context.execution_options.get(DEFERRED)
            and not conn.in_nested_transaction()
        ):
            driver: Any = conn.connection.driver_connection  # an `SqliteConnections` one
            driver.hops.defer(sql)

    return engine


ACCEPTED_URLS = (
    "sqlite:///path.db or postgresql://user@host:5432/db; postgres://, sqlite+aiosqlite:// "
    "and postgresql+asyncpg:// work too"
)
"""How a message names the database URLs SchemaBridge takes (`normalise_url`)."""

_DRIVERS = {
    # What a URL's scheme may say → the async driver SchemaBridge runs it on.
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",  # Heroku's and some libraries' spelling
    "postgresql+asyncpg": "postgresql+asyncpg",
}
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


class DatabaseURLError(ValueError):
    """A database URL SchemaBridge cannot use; `code` is `invalid_database_url` (not a URL,
    or a bad option) or `unsupported_database` (another database or driver). The message
    never holds a password."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def normalise_url(database_url: str, pooler: Pooler = "none") -> URL:
    """`database_url` as the SQLAlchemy URL of the async driver SchemaBridge uses.

    Takes the forms users have at hand, as libpq, psql, Heroku and Docker images write them:
    `postgresql://` and `postgres://` run on asyncpg, `sqlite:///path` on aiosqlite; the
    explicit `postgresql+asyncpg://` and `sqlite+aiosqlite://` stay as they are. Only the
    driver name changes (credentials, host, port and query survive as parsed), except libpq's
    query parameters, which `connect_options` translates (and this URL then lacks those it
    moves to asyncpg's keyword arguments). Any other driver or database is refused:
    SchemaBridge runs on these two only."""
    return connect_options(database_url, pooler)[0]


def connect_options(database_url: str, pooler: Pooler = "none") -> tuple[URL, dict[str, Any]]:
    """`normalise_url`'s URL, and the keyword arguments asyncpg.connect needs that a URL
    cannot carry (`create_async_engine(connect_args=...)`; empty on SQLite).

    SQLAlchemy's asyncpg dialect hands every query parameter to asyncpg.connect under its own
    name, so one asyncpg does not know fails at connect time as a TypeError. On PostgreSQL
    the query is checked here instead: libpq's `sslmode` becomes asyncpg's `ssl` (same
    values), `connect_timeout` its `timeout` (seconds), `application_name` and `options`
    (`-c name=value ...`) its `server_settings`; the parameters asyncpg takes as they are
    (`_PASSED_THROUGH`) stay in the URL, and anything else is refused naming them all.

    `pooler` `transaction` (PgBouncer in transaction mode, `engine.store.pooler`): asyncpg's
    statement cache is turned off, and `options` is refused, since such a pooler does not
    carry settings to the server (PgBouncer refuses the connection)."""
    try:
        url = make_url(database_url)
    except (ArgumentError, ValueError):  # a bad port is a ValueError
        raise DatabaseURLError(
            f"the database URL {redact(database_url)[:80]!r} is not a URL; give {ACCEPTED_URLS}",
            code="invalid_database_url",
        ) from None
    driver = _DRIVERS.get(url.drivername)
    if driver is None:
        raise DatabaseURLError(
            f"unsupported database scheme {url.drivername!r} in "
            f"{url.render_as_string(hide_password=True)}: give {ACCEPTED_URLS}",
            code="unsupported_database",
        )
    if url.host is not None and "@" in url.host:
        raise DatabaseURLError(
            f"the database URL {redact(database_url)!r} has an '@' in its user name or "
            "password: write it percent-encoded, as %40",
            code="invalid_database_url",
        )
    if driver != "postgresql+asyncpg":
        return url.set(drivername=driver), {}
    if pooler == "transaction" and "options" in url.query:
        raise _refuse(
            url,
            f"options with {POOLER_SETTING}=transaction",
            "a transaction pooler does not carry settings to the server; set them on the "
            "role or the database instead (ALTER ROLE ... SET name = value)",
        )
    url, kwargs = _postgresql_query(url)  # its messages show the scheme the user wrote
    if pooler == "transaction":
        # Every statement unnamed, its Parse sent again with each Bind: nothing is left
        # on a server connection between transactions (`engine.store.pooler`).
        kwargs["statement_cache_size"] = 0
    return url.set(drivername=driver), kwargs


_PASSED_THROUGH = (
    # Query parameters asyncpg.connect (or SQLAlchemy's dialect) takes as strings, as named.
    "ssl",
    "target_session_attrs",
    "command_timeout",
    "passfile",
    "prepared_statement_cache_size",
    "host",
    "port",
)
_TRANSLATED = ("sslmode", "connect_timeout", "application_name", "options")
_SSL_FILES = {
    # libpq parameters asyncpg takes only from the environment (or a DSN SQLAlchemy never
    # builds): the variable to set instead.
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
}
ACCEPTED_QUERY = ", ".join(sorted(_TRANSLATED + _PASSED_THROUGH))
"""The query parameters a PostgreSQL URL may have (for messages)."""


def _refuse(url: URL, what: str, fix: str) -> DatabaseURLError:
    return DatabaseURLError(
        f"cannot use {what} in {url.render_as_string(hide_password=True)}: {fix}",
        code="invalid_database_url",
    )


def _postgresql_query(url: URL) -> tuple[URL, dict[str, Any]]:
    for name, value in url.query.items():
        if name == "statement_cache_size":
            raise _refuse(
                url,
                "statement_cache_size",
                f"for PgBouncer in transaction mode set {POOLER_SETTING}=transaction instead",
            )
        if name in _SSL_FILES:
            raise _refuse(
                url,
                name,
                f"asyncpg does not take it in the URL; set {_SSL_FILES[name]} in the "
                "environment instead",
            )
        if name not in _TRANSLATED and name not in _PASSED_THROUGH:
            raise _refuse(
                url, f"the query parameter {name!r}", f"the accepted ones are {ACCEPTED_QUERY}"
            )
        if name != "host" and not isinstance(value, str):  # `host` may repeat (multihost)
            raise _refuse(url, f"{name} more than once", "give each query parameter once")
    kwargs: dict[str, Any] = {}
    if "sslmode" in url.query:
        url = _ssl_from_sslmode(url)
    if "connect_timeout" in url.query:
        kwargs["timeout"] = _connect_timeout(url)
    server_settings: dict[str, str] = {}
    if "options" in url.query:
        server_settings.update(_options(url))
    if "application_name" in url.query:
        server_settings["application_name"] = str(url.query["application_name"])
    if server_settings:
        kwargs["server_settings"] = server_settings
    return url.difference_update_query(["connect_timeout", "application_name", "options"]), kwargs


def _ssl_from_sslmode(url: URL) -> URL:
    mode = url.query["sslmode"]
    if "ssl" in url.query or not isinstance(mode, str) or mode not in _SSL_MODES:
        fix = f"give sslmode once, without ssl, as one of {', '.join(_SSL_MODES)}"
        raise _refuse(url, f"sslmode={mode!r}", fix)
    return url.difference_update_query(["sslmode"]).update_query_dict({"ssl": mode})


def _connect_timeout(url: URL) -> float:
    value = str(url.query["connect_timeout"])
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise _refuse(url, f"connect_timeout={value!r}", "give a number of seconds above 0")
    return seconds


def _options(url: URL) -> dict[str, str]:
    """libpq's `options` (`-c name=value` or `--name=value`, space-separated) as asyncpg's
    `server_settings`; only settings, not other server command-line switches."""
    value = str(url.query["options"])
    words = value.split()
    settings: dict[str, str] = {}
    while words:
        word = words.pop(0)
        if word == "-c" and words:
            word = words.pop(0)
        elif word.startswith(("-c", "--")):  # -cname=value, --name=value
            word = word[2:]
        else:
            word = ""
        name, equals, setting = word.partition("=")
        if not name or not equals:
            raise _refuse(
                url, f"options={value!r}", "give settings as -c name=value (space-separated)"
            )
        settings[name.replace("-", "_")] = setting
    return settings


def redact(url: str) -> str:
    """`url` with whatever stands between `user:` and the last `@` replaced by `***`: a
    password hidden even where the URL does not parse (or parses wrongly)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}"


IDLE_SETTING = "idle_in_transaction_session_timeout"


def _bound_idle_transactions(dbapi_connection: Any, _record: Any) -> None:
    """Set `IDLE_IN_TRANSACTION_TIMEOUT_MS` on a new connection (a SET, not a startup
    parameter: a session pooler such as PgBouncer refuses startup parameters it does not know,
    and carries a session's SET)."""
    cursor = dbapi_connection.cursor()
    cursor.execute(f"SET {IDLE_SETTING} = {int(IDLE_IN_TRANSACTION_TIMEOUT_MS)}")
    cursor.close()
    # The driver's adapter ran it in a transaction of its own: a rollback would undo it.
    dbapi_connection.commit()


def create_engines(database_url: str, *, pool_size: int = 20, pooler: Pooler = "none") -> Engines:
    """Build the engines for `database_url` (any form `normalise_url` takes); `pooler` says
    what stands between them and PostgreSQL (`SCHEMABRIDGE_DATABASE_POOLER`)."""
    url, connect_args = connect_options(database_url, pooler)
    if url.get_backend_name() == "sqlite":
        connections = _sqlite_connections(url)
        return Engines(
            write=_sqlite_engine(url, connections, immediate=True),
            read=_sqlite_engine(url, connections, immediate=False),
            dialect=SQLITE,
            sqlite_connections=connections,
        )
    engine = create_async_engine(
        url,
        # At most `pool_size` connections, each kept once opened. An overflow connection
        # is closed when it is returned, so a process busy beyond the pool's size opened
        # a PostgreSQL connection (a server process) and closed it again several times a
        # second (bench/RESULTS.md, "connection churn").
        pool_size=pool_size,
        max_overflow=0,
        # JSON columns through orjson: several small documents per step (schemas.json_codec).
        json_serializer=json_codec.dumps,
        json_deserializer=json_codec.loads,
        # What the URL's libpq parameters became that a URL cannot carry (`connect_options`).
        connect_args=connect_args,
    )
    # Setting the isolation level of an asyncpg connection is local (no round trip): a
    # read checks a connection out of the same pool in autocommit, and it goes back reset.
    reads = engine.execution_options(isolation_level="AUTOCOMMIT")
    watch = None
    if pooler == "none":
        # Told nothing, the store still notices the statements a transaction pooler breaks,
        # so that the operator is told the fix (`engine.store.pooler`).
        watch = PoolerWatch()
        event.listen(engine.sync_engine, "handle_error", _noting(watch))
        if IDLE_SETTING not in connect_args.get("server_settings", {}):
            event.listen(engine.sync_engine, "connect", _bound_idle_transactions)
    direct = DirectStatements(reads, watch)
    return Engines(
        write=engine,
        read=reads,
        dialect=POSTGRESQL,
        shared_pool=True,
        direct=direct,
        pooler_watch=watch,
    )


def _noting(watch: PoolerWatch) -> Any:
    """A `handle_error` listener that shows `watch` every error a statement raises (it is
    called only on errors: a statement that succeeds costs nothing more)."""

    def note(context: Any) -> None:
        watch.note(context.original_exception)

    return note


MIGRATIONS = resources.files("engine.store") / "migrations"
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
"""A migration's file: its revision id (four digits, one more than the one before) and what
it does. Alembic's own chain (`revision`, `down_revision`) says the same, which
tests/unit/test_migration_files.py checks."""
_VERSION_TABLE = table("alembic_version", column("version_num"))


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations."""
    # Alembic is imported where a migration runs, not at start: it costs a command or a
    # service ~0.1-0.2 s, and only `db upgrade` and the embedded store's creation need it.
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


MIGRATION_LOCK_KEY = 0x5CB0_D0B1_6E55
"""The PostgreSQL advisory lock `upgrade` holds for its transaction (any 64-bit number no
other lock of the database uses; it spells nothing): processes that migrate one database at
once take turns, and the later one finds the schema at head instead of creating the same
tables and failing on PostgreSQL's catalog (`pg_type_typname_nsp_index`)."""


@dataclass(frozen=True)
class Migrated:
    """What `upgrade` did: the database's revision before and after (None: never migrated)."""

    before: str | None
    after: str | None

    @property
    def moved(self) -> bool:
        return self.before != self.after

    def line(self) -> str:
        """One line for an operator, e.g. "from 0017 to 0019"."""
        before = "empty (never migrated)" if self.before is None else self.before
        return f"from {before} to {self.after}" if self.moved else f"at {self.after} already"


class UnknownRevision(Exception):
    """A revision this code ships no migration for: the one the database is at (`in_database`
    True: a newer release migrated it, and this one cannot move it anywhere), or the one
    `upgrade` was asked for (False: a typo, or a newer release's). Alembic would say either
    as a `CommandError` "Can't locate revision", which reads as a crash."""

    def __init__(self, revision: str, *, in_database: bool) -> None:
        where = "the database is at" if in_database else "asked for"
        super().__init__(f"{where} revision {revision}, which this code does not ship")
        self.revision = revision
        self.in_database = in_database


def _upgrade(connection: Connection, revision: str) -> Migrated:
    from alembic import command

    before = _current(connection)
    if before is not None and before not in known_revisions():
        raise UnknownRevision(before, in_database=True)
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
    return Migrated(before, _current(connection))


async def upgrade(
    engines: Engines,
    revision: str = "head",
    *,
    lock_timeout_s: float = migration_locks.LOCK_TIMEOUT_S,
) -> Migrated:
    """Apply migrations up to `revision` (idempotent), in one transaction that on PostgreSQL
    holds `MIGRATION_LOCK_KEY` (SQLite's `BEGIN IMMEDIATE` serialises the file's writers
    already). A migration that moved the schema is logged, once, with both revisions.
    `revision` is `head` or one this code ships (else `UnknownRevision`, before connecting).
    On PostgreSQL a table's lock is waited for `lock_timeout_s` at most, then
    `MigrationBlocked` names who holds locks, nothing changed (`engine.store.migration_locks`);
    another process migrating is waited for as long as it takes."""
    if revision != "head" and revision not in known_revisions():
        raise UnknownRevision(revision, in_database=False)
    try:
        async with engines.write.begin() as conn:
            if engines.dialect.is_postgresql:
                # Transaction-scoped: released by the COMMIT, or the ROLLBACK of a failed
                # migration, or the server when a process dies holding it.
                await conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
                # A migration is one transaction an operator started on purpose: the bound on
                # idle transactions every connection sets (`IDLE_IN_TRANSACTION_TIMEOUT_MS`)
                # must not end it half-way because the migrating process was slow between two
                # statements.
                await conn.execute(text(f"SET LOCAL {IDLE_SETTING} = 0"))
                await migration_locks.set_lock_timeout(conn, lock_timeout_s)
            migrated = await conn.run_sync(_upgrade, revision)
    except DBAPIError as error:
        if not (engines.dialect.is_postgresql and migration_locks.is_lock_timeout(error)):
            raise
        holders = await migration_locks.lock_holders(engines.write)
        raise migration_locks.MigrationBlocked(holders, lock_timeout_s) from error
    if migrated.moved:
        logger.info(
            "migrated the database schema %s",
            migrated.line(),
            extra={
                "event": "schema.migrated",
                "from_revision": migrated.before,
                "to_revision": migrated.after,
            },
        )
    return migrated


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every migration this code ships, by the names of its files (`_REVISION_FILE`): read
    without Alembic, since every command and service checks the schema as it opens, and once
    a process (the schema check asks for them and for the head)."""
    names = (entry.name for entry in (MIGRATIONS / "versions").iterdir())
    return frozenset(found.group(1) for found in map(_REVISION_FILE.match, names) if found)


def head_revision() -> str:
    """The newest migration this code ships (what `upgrade` brings a database to)."""
    known = known_revisions()
    if not known:  # only a broken package has no migrations at all
        raise RuntimeError("the packaged migrations have no head revision")
    return max(known)


def _current(connection: Connection) -> str | None:
    if not inspect(connection).has_table(_VERSION_TABLE.name):
        return None
    return connection.execute(select(_VERSION_TABLE.c.version_num)).scalar()


async def current_revision(engines: Engines) -> str | None:
    """The revision the database is at (None: never migrated)."""
    async with engines.read.connect() as conn:
        return await conn.run_sync(_current)
