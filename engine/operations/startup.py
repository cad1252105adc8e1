"""Opening a process's runtime, with every problem a user can cause told in one sentence.

A wrong or unreachable database URL, a scheme SchemaBridge does not support, an SQLite file in
a directory that cannot be written (or, for a command that must not create one, that does not
exist), a Redis that does not answer: each would otherwise surface as a driver's exception
deep in a traceback, or as an empty database SQLite created. `open_runtime` refuses with a
`StartupRefused` whose message names what is wrong and the fix, and `explain` does the same for
such an error raised later (a command that opened its runtime itself). URLs in messages never
show a password.
"""

from __future__ import annotations

import asyncio
import shlex
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from asyncpg.exceptions import ClientConfigurationError, InvalidCatalogNameError
from redis.connection import parse_url
from redis.exceptions import RedisError, ResponseError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from engine.coordination.redis_client import (
    COORDINATION_ERRORS,
    close_redis,
    is_unix_socket,
    open_redis,
    redis_database,
)
from engine.settings import DEFAULT_DATABASE_URL, Settings
from engine.store.db import (
    DatabaseURLError,
    UnknownRevision,
    head_revision,
    known_revisions,
    normalise_url,
    redact,
    sqlite_file,
)
from engine.store.migration_locks import MigrationBlocked
from engine.store.pooler import POOLER_HINT, Pooler, pooler_mismatch
from schemas.clock import Clock
from schemas.errors import OperationError, Refusal

if TYPE_CHECKING:
    # The runtime (the whole store, the HTTP client) is imported by the functions that open
    # one: `schemabridge db upgrade` checks its URL here and needs neither.
    from engine.runtime import Runtime

REDIS_PROBE_TIMEOUT_S = 5.0
SCHEMA_CHECK_TIMEOUT_S = 10.0
"""How long reading the database's schema revision may take before the database is said
not to answer."""
BIND_TIMEOUT_S = 10.0
"""How long reading the database's id and binding Redis to it may take at start."""


class StartupRefused(OperationError):
    """The process cannot start on these settings; the message says why and the fix.
    `refusal` is `invalid` for a setting that can never work (a malformed URL, an unsupported
    scheme, an unwritable path) and `unavailable` for a service that does not answer."""

    def __init__(self, message: str, *, code: str, refusal: Refusal) -> None:
        super().__init__(message, code=code)
        self.refusal = refusal


def mask_url(url: str) -> str:
    """`url` with its password replaced by `***` (for logs and messages)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return "<not a URL>"
    if parsed.host is not None and "@" in parsed.host:  # an unencoded '@' in the password
        return redact(url)
    return parsed.render_as_string(hide_password=True)


def check_database_url(url: str, *, create: bool = True, pooler: Pooler = "none") -> None:
    """Refuse a database URL SchemaBridge cannot use, before anything connects. `create`
    False: the command reads or changes an existing database, so an SQLite file that does not
    exist is refused too (SQLite would create it empty: a misspelt path would show an empty
    database and leave a stray file behind). A PostgreSQL server never creates a database;
    one that is missing is refused when it answers (`explain`). `pooler`: what
    `SCHEMABRIDGE_DATABASE_POOLER` says (a transaction pooler refuses `options`)."""
    try:
        parsed = normalise_url(url, pooler)
    except DatabaseURLError as error:
        raise StartupRefused(
            f"{error} (SCHEMABRIDGE_DATABASE_URL)",
            code=error.code,
            refusal=Refusal.INVALID,
        ) from None
    path = sqlite_file(parsed)
    if path is None:
        return
    if not create and not path.exists():
        # Before the directory: a missing directory is a missing database here, whose fix
        # is the URL or `db upgrade`, not a writable path.
        raise _no_sqlite_database(path, default=url == DEFAULT_DATABASE_URL)
    if not path.parent.is_dir():
        raise _unwritable(parsed.database or str(path), "its directory does not exist")


def shares_store(database_url: str) -> bool:
    """Whether the store is a database server (PostgreSQL), which other processes share by
    nature; an SQLite file is most often one process's own."""
    return database_url.split(":", 1)[0].startswith("postgres")


def _redis_fix(database_url: str) -> str:
    """The end of the advice about a Redis URL that fails, as fits the process: on a shared
    store (PostgreSQL) the fix is the Redis the other processes use (a separate `worker` or
    `api` refuses the embedded one, and any other process would coordinate with nothing
    through it); on SQLite the embedded Redis is a way out too."""
    if shares_store(database_url):
        return " (the Redis every process of this database shares)"
    return ", or unset SCHEMABRIDGE_REDIS_URL to use the embedded Redis (one process only)"


def check_redis_url(url: str | None, database_url: str) -> None:
    """Refuse a Redis URL redis-py cannot use (None: the embedded Redis), before anything
    connects: redis-py's own complaint is a ValueError that would read as an internal error,
    and a database that is not a number it ignores (db 0, shared with whatever uses it).
    `database_url`: the store, which decides the fix offered (`_redis_fix`)."""
    if url is None:
        return
    try:
        # The database first: redis-py's own words for it do not say which part is wrong.
        database = redis_database(url)
        if not (database.isascii() and database.isdigit()):
            where = "?db= of a Unix socket" if is_unix_socket(url) else "database after the port"
            raise ValueError(f"the {where} is a number, not {database!r}")
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as error:
        shown = "empty" if not url.strip() else repr(redact(url))
        reason = str(error)
        if "schemes" in reason:  # redis-py's "must specify one of the following schemes"
            reason = "it does not start with redis://, rediss:// or unix://"
        raise StartupRefused(
            f"the Redis URL is {shown}: {reason}; give redis://host:6379/0 (rediss:// for "
            f"TLS, unix:///path/to/redis.sock?db=0){_redis_fix(database_url)}",
            code="invalid_redis_url",
            refusal=Refusal.INVALID,
        ) from None


def _no_sqlite_database(path: Path, *, default: bool) -> StartupRefused:
    # The default URL is named as such: the variable may be unset where the user thinks it
    # is set (another shell, a service's environment).
    which = " (SCHEMABRIDGE_DATABASE_URL's default)" if default else ""
    return StartupRefused(
        f"cannot open the SQLite database {path}{which}: there is no such file; set "
        "SCHEMABRIDGE_DATABASE_URL to the database meant, or create this one with "
        "`schemabridge db upgrade`",
        code="database_missing",
        refusal=Refusal.INVALID,
    )


def _unwritable(path: str, why: str) -> StartupRefused:
    return StartupRefused(
        f"cannot open the SQLite database {path}: {why}; give a writable path in "
        "SCHEMABRIDGE_DATABASE_URL, e.g. sqlite:///./schemabridge.db",
        code="database_path_unwritable",
        refusal=Refusal.INVALID,
    )


def _reason(error: BaseException) -> str:
    """The driver's own first line, without SQLAlchemy's wrapping, nor its closing full stop:
    the caller goes on after it with "; …" (redis-py ends its "Connection refused.")."""
    inner = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    lines = str(inner).strip().splitlines()
    first = lines[0].rstrip().removesuffix(".") if lines else ""
    if first:
        return first
    if isinstance(inner, TimeoutError):  # asyncpg's connect timeout says nothing itself
        return "the server did not answer in time (connect_timeout in the URL sets how long)"
    return type(inner).__name__


def _driver_errors(error: BaseException) -> list[BaseException]:
    """`error`, the driver's exception SQLAlchemy wraps (`orig`) and what each was raised
    from: asyncpg's own exception is the `__cause__` of SQLAlchemy's adapted one."""
    chain: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        found = pending.pop()
        if found is None or any(found is seen for seen in chain):
            continue
        chain.append(found)
        pending += [getattr(found, "orig", None), found.__cause__]
    return chain


def _database_missing(error: BaseException) -> bool:
    """The server said the database does not exist: SQLSTATE 3D000 (asyncpg's
    `InvalidCatalogNameError`), not any message with "does not exist" in it (a role, a
    certificate file)."""
    return any(
        isinstance(found, InvalidCatalogNameError) or getattr(found, "sqlstate", None) == "3D000"
        for found in _driver_errors(error)
    )


def _login_refused(error: BaseException) -> bool:
    """The server refused the login (SQLSTATE class 28: a role that does not exist, a wrong
    password): it answered, so this is a setting to fix, not a server to wait for."""
    return any(
        str(getattr(found, "sqlstate", "") or "").startswith("28")
        for found in _driver_errors(error)
    )


def _certificate_missing(error: BaseException) -> bool:
    """asyncpg could not read the root certificate `sslmode=verify-ca`/`verify-full` needs."""
    return any(
        isinstance(found, ClientConfigurationError) and "certificate" in str(found)
        for found in _driver_errors(error)
    )


def pooler_hint(error: BaseException) -> str | None:
    """What to do when `error` says the database is behind a transaction pooler that
    `SCHEMABRIDGE_DATABASE_POOLER` does not name (`engine.store.pooler`); None otherwise. The
    front doors' logging tells this fault by it."""
    return POOLER_HINT if pooler_mismatch(error) else None


def explain(error: BaseException, settings: Settings) -> StartupRefused | None:
    """The refusal a user should read for `error` (raised while opening or using the
    database or Redis of `settings`), or None when it is not one of theirs."""
    if isinstance(error, StartupRefused):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = explain(inner, settings)
            if found is not None:
                return found
        return None
    url = settings.database_url
    if isinstance(error, UnknownRevision | MigrationBlocked):
        return _migration_refused(error, url)
    if isinstance(error, ArgumentError | NoSuchModuleError | ModuleNotFoundError | ValueError):
        try:
            check_database_url(url, pooler=settings.database_pooler)
            check_redis_url(settings.redis_url, url)
        except StartupRefused as refused:
            return refused
        return None
    if isinstance(error, RedisError):
        return redis_refusal(settings, error)
    if isinstance(error, SQLAlchemyError | OSError | sqlite3.Error):
        reason = _reason(error)
        if "unable to open database file" in reason or "readonly database" in reason:
            return _unwritable(make_url(url).database or url, reason)
        invalid = _invalid_database(error, url, reason)
        if invalid is not None:
            return invalid
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {reason}; check "
            "SCHEMABRIDGE_DATABASE_URL and that the server is running",
            code="store_unavailable",
            refusal=Refusal.UNAVAILABLE,
        )
    return None


def _migration_refused(error: UnknownRevision | MigrationBlocked, url: str) -> StartupRefused:
    """A migration refused: a revision this code does not ship, or a lock it gave up on (a
    conflict of the moment, exit 1: nothing changed, and the same command succeeds once the
    sessions it names end)."""
    if isinstance(error, UnknownRevision):
        return _unknown_revision(error, url)
    return StartupRefused(
        f"cannot migrate the database {mask_url(url)}: {error}",
        code="migration_blocked",
        refusal=Refusal.CONFLICT,
    )


def _unknown_revision(error: UnknownRevision, url: str) -> StartupRefused:
    """The refusal of a migration from a revision this code does not ship, or to one: a
    database a newer release migrated is said as `check_schema` says it (the fix is that
    release: a rollback of the code, not of the schema), a target with the revisions there
    are."""
    from engine.operations.health import SchemaStatus  # see the imports at the top

    if error.in_database:
        newer = SchemaStatus(
            current=error.revision, head=head_revision(), up_to_date=False, known=False
        )
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {newer.explain()}",
            code="schema_not_current",
            refusal=Refusal.INVALID,
        )
    shipped = sorted(known_revisions())
    return StartupRefused(
        f"no revision {error.revision!r}: this release's are {shipped[0]} to {shipped[-1]}; "
        "give one of them, or none to upgrade to the newest (head)",
        code="unknown_revision",
        refusal=Refusal.INVALID,
    )


def _invalid_database(error: BaseException, url: str, reason: str) -> StartupRefused | None:
    """The refusal for a database that answers but cannot be used as the settings say."""
    if _certificate_missing(error):
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {reason}; sslmode=verify-ca and "
            "verify-full check the server's certificate against that file: put its CA "
            "certificate there (or name one in PGSSLROOTCERT), or use sslmode=require to "
            "encrypt without checking",
            code="database_certificate_missing",
            refusal=Refusal.INVALID,
        )
    hint = pooler_hint(error)
    if hint is not None:
        # A setting that cannot work as it is (exit 2), not a database that is down.
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {reason}; {hint}",
            code="database_pooler",
            refusal=Refusal.INVALID,
        )
    if _database_missing(error):
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {reason}; create it (e.g. "
            "`createdb`) or fix SCHEMABRIDGE_DATABASE_URL",
            code="database_missing",
            refusal=Refusal.INVALID,
        )
    if _login_refused(error):
        # A second new user's tour: a role that does not exist read "does not answer" (exit 4),
        # though the server had answered.
        return StartupRefused(
            f"cannot use the database {mask_url(url)}: {reason}; the server refused the "
            "login: fix the user or password in SCHEMABRIDGE_DATABASE_URL",
            code="database_login_refused",
            refusal=Refusal.INVALID,
        )
    return None


def redis_refusal(settings: Settings, error: BaseException) -> StartupRefused:
    """The refusal for a Redis error at start: a database number the server does not have
    is a setting to fix (`invalid`, exit 2: waiting never helps); anything else a Redis that
    does not answer (`unavailable`). The fix offered fits the store (`_redis_fix`)."""
    where = mask_url(settings.redis_url) if settings.redis_url else "the embedded Redis"
    if isinstance(error, ResponseError) and "DB index is out of range" in str(error):
        database = redis_database(settings.redis_url or "")
        return StartupRefused(
            f"cannot use Redis at {where}: {_reason(error)}, the server has no database "
            f"{database}; give one it has in SCHEMABRIDGE_REDIS_URL (0 to 15 unless its "
            "`databases` setting allows more)",
            code="invalid_redis_url",
            refusal=Refusal.INVALID,
        )
    return StartupRefused(
        f"cannot reach Redis at {where}: {_reason(error)}; start it or fix "
        f"SCHEMABRIDGE_REDIS_URL{_redis_fix(settings.database_url)}",
        code="coordination_unavailable",
        refusal=Refusal.UNAVAILABLE,
    )


async def check_schema(runtime: Runtime, *, timeout_s: float = SCHEMA_CHECK_TIMEOUT_S) -> None:
    """Refuse (`schema_not_current`) a database whose schema is not this code's head
    revision: never migrated, behind (the fix: `schemabridge db upgrade`) or migrated by a
    newer release. Reading the revision is bounded by `timeout_s`; a database that does not
    answer is refused as `explain` says it."""
    from engine.operations.health import HealthOperations  # see the imports at the top

    try:
        schema = await asyncio.wait_for(HealthOperations(runtime).schema(), timeout_s)
    except Exception as error:  # whatever the driver raises, the operator gets one line
        refused = explain(error, runtime.settings)
        if refused is not None:
            raise refused from error
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise StartupRefused(
            f"cannot read the database's schema revision: {reason}",
            code="store_unavailable",
            refusal=Refusal.UNAVAILABLE,
        ) from error
    if not schema.up_to_date:
        # Named: the operator may be on another database than the one they upgraded.
        where = mask_url(runtime.settings.database_url)
        raise StartupRefused(
            f"cannot use the database {where}: {schema.explain()}",
            code="schema_not_current",
            refusal=Refusal.INVALID,
        )


async def open_runtime(
    settings: Settings,
    *,
    migrate: bool = True,
    create: bool = True,
    probe_redis: bool = True,
    clock: Clock | None = None,
) -> Runtime:
    """`Runtime.open`, refusing with one `StartupRefused` for every problem a user can cause:
    the database URL is checked first (with `create` False, also that its SQLite file exists:
    see `check_database_url`), Redis is pinged (`probe_redis`) so a dead one is said at once
    instead of by every worker loop. `migrate` True brings the schema to head; False leaves
    the database as it is and refuses one whose schema is not at head (`check_schema`): a
    process that does not migrate must not run on tables it does not know, nor create them."""
    from engine.runtime import Runtime  # see the imports at the top

    check_database_url(settings.database_url, create=create, pooler=settings.database_pooler)
    check_redis_url(settings.redis_url, settings.database_url)
    if probe_redis and settings.redis_url is not None:
        # Before the runtime: its wake-up listener would otherwise report the outage first.
        client = await open_redis(settings, retries=False)
        try:
            await asyncio.wait_for(client.ping(), REDIS_PROBE_TIMEOUT_S)
        except COORDINATION_ERRORS as error:
            raise redis_refusal(settings, error) from error
        finally:
            await close_redis(client)
    try:
        runtime = await Runtime.open(settings, migrate=migrate, clock=clock)
    except Exception as error:
        refused = explain(error, settings)
        if refused is None:
            raise
        raise refused from error
    try:
        if not migrate:
            await check_schema(runtime)
        if probe_redis:
            await bind_redis(runtime)
    except BaseException:
        await runtime.close()
        raise
    return runtime


async def bind_redis(runtime: Runtime, *, timeout_s: float = BIND_TIMEOUT_S) -> None:
    """Refuse (`redis_of_another_database`) a Redis that another database's processes
    coordinate through (`engine.coordination.store_binding`); bind a Redis that none does to
    this database. Redis or the database not answering here is said as at any other start."""
    from engine.coordination.store_binding import bind

    if runtime.settings.redis_url is None:
        return  # the embedded Redis lives and dies with this one process
    where = mask_url(runtime.settings.redis_url)
    try:
        store_id = await asyncio.wait_for(runtime.store.store_id(), timeout_s)
        other = await asyncio.wait_for(bind(runtime.redis, store_id), timeout_s)
    except COORDINATION_ERRORS as error:
        raise redis_refusal(runtime.settings, error) from error
    except Exception as error:
        refused = explain(error, runtime.settings)
        if refused is not None:
            raise refused from error
        raise
    if other is None:
        return
    raise StartupRefused(
        f"Redis at {where} coordinates the processes of another SchemaBridge database (id "
        f"{other[:8]}, this database's is {store_id[:8]}): each database needs a Redis "
        "database of its own, shared by all its processes; fix SCHEMABRIDGE_REDIS_URL, or, "
        "if that other database is gone for good, empty this Redis database "
        f"({_flush_command(runtime.settings.redis_url)}) and start again",
        code="redis_of_another_database",
        refusal=Refusal.INVALID,
    )


def _flush_command(redis_url: str) -> str:
    """The `redis-cli` command that empties the database `redis_url` names (a password is
    asked for, never shown)."""
    parts = urlsplit(redis_url)
    database = redis_database(redis_url)
    asks = " --askpass" if parts.password else ""
    if is_unix_socket(redis_url):
        return f"redis-cli -s {shlex.quote(parts.path)} -n {database}{asks} FLUSHDB"
    tls = " --tls" if parts.scheme == "rediss" else ""
    host = parts.hostname or "127.0.0.1"
    return f"redis-cli -h {host} -p {parts.port or 6379} -n {database}{tls}{asks} FLUSHDB"
