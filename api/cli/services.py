"""Long-running services and maintenance: `api`, `serve`, `worker`, `db upgrade`.

- `api`: the REST API alone. Stateless: run any number of them beside `worker` processes on
  PostgreSQL + Redis. It never migrates, and refuses to start on a database whose schema is
  not the code's head revision, or on an SQLite file that does not exist (never creating it).
- `serve`: the API, a worker and its timers in one process (embedded SQLite and Redis by
  default); it migrates the database, as a single-process install expects. `--demo` adds the
  examples and the demo downstream, with authentication off.
- `worker`: claims and executes steps; `--health-port` serves `/health` and `/metrics` beside it.
  On PostgreSQL it never migrates either, and refuses a schema not at head as `api` does (the
  database is shared: `schemabridge db upgrade` migrates it, before the processes roll); on an
  SQLite file it migrates, as `serve` does.

A process that migrates (`db upgrade`, `serve`, `run`, a worker on SQLite) logs the revisions
it moved the schema from and to; on PostgreSQL it holds an advisory lock meanwhile, so two
starting at once take turns.

A separate `api` or `worker` on PostgreSQL refuses to start without `SCHEMABRIDGE_REDIS_URL`
(exit 2): the embedded Redis lives in one process, so it would coordinate with nothing. On
SQLite it starts with a warning (tests run workers that way beside one file).

Each prints the URL it listens on once it accepts requests (port 0: a free port, and the URL
names it), and stops gracefully on SIGINT/SIGTERM (engine/lifecycle.py): the health marker and
the heartbeat go first, in-flight requests and steps finish within
`SCHEMABRIDGE_SHUTDOWN_GRACE_S`, queued work stays in the store.
"""

from __future__ import annotations

# The runtime and the web stack are imported inside the commands (see api/cli/run.py for why).
import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.rule import Rule

from api.cli import demo_address, log_setup, usage
from api.cli.database_option import DatabaseOption, named_by
from api.cli.exit_codes import ExitCode, exit_code_for
from schemas.service_names import service_name_problem

if TYPE_CHECKING:
    from api.rest import ApiServer
    from engine.runtime import Runtime, ServiceRole
    from engine.settings import Settings

console = usage.stderr()
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)

EXIT_REFUSED = ExitCode.FAILED
"""The service cannot start because something else holds what it needs: its port, or its
worker --name. A setting that cannot work is `ExitCode.USAGE` (2), a database or Redis that
does not answer `ExitCode.UNREACHABLE` (4), as for every command (`api.cli.exit_codes`)."""
SERVICE_EXIT_CODES_HELP = (
    "Exit codes: 0 stopped by SIGINT/SIGTERM; 1 refused to start: its port, or its --name, "
    "in use; 2 usage or a setting that cannot work (a malformed URL or key, a schema not at "
    "head, an SQLite file that does not exist); 4 the database or Redis does not answer."
)
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


Host = Annotated[str, typer.Option(metavar="HOST", help="Address to listen on.")]
Port = Annotated[int, typer.Option(min=0, max=65535, metavar="PORT", help="Port (0: a free one).")]


class CannotStart(Exception):
    """A service refuses to start; the message is the one line shown to the operator, and
    `exit_code` the documented code of its kind (`EXIT_REFUSED` unless told)."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


LogLevel = Annotated[
    log_setup.Level,
    typer.Option(
        case_sensitive=False, help="Least level logged (info: only what an operator acts on)."
    ),
]
LogFormatOption = Annotated[
    log_setup.Format | None,
    typer.Option(
        case_sensitive=False,
        help="text (a line a record) or json (an object a line); default "
        "SCHEMABRIDGE_LOG_FORMAT, else text.",
        show_default=False,
    ),
]

ACCESS_LOG_HELP = (
    "Requests the JSON access log writes on stderr: all, changes (all but GET and HEAD, "
    "errors, slow GETs) or off; default SCHEMABRIDGE_ACCESS_LOG, else "
)
# Text, checked by `_access_log` (as numbers are by the commands that take them): a choice
# typer checked would be refused in its words ("Invalid value …: Value error, …").
ACCESS_LOG_METAVAR = "all|changes|off"
ApiAccessLogOption = Annotated[
    str | None,
    typer.Option(metavar=ACCESS_LOG_METAVAR, help=ACCESS_LOG_HELP + "all.", show_default=False),
]
ServeAccessLogOption = Annotated[
    str | None,
    typer.Option(metavar=ACCESS_LOG_METAVAR, help=ACCESS_LOG_HELP + "changes.", show_default=False),
]
WorkerAccessLogOption = Annotated[
    str | None,
    typer.Option(
        metavar=ACCESS_LOG_METAVAR,
        help="Requests to the health port (--health-port) the JSON access log writes on "
        "stderr: all, changes (errors, and all but GET and HEAD) or off; default "
        "SCHEMABRIDGE_ACCESS_LOG, else changes.",
        show_default=False,
    ),
]
NoAccessLogOption = Annotated[
    bool,
    # Hidden: the spelling from before --access-log took a value; scripts still use it.
    typer.Option("--no-access-log", hidden=True, help="The same as --access-log off."),
]


def _access_log(
    chosen: str | None, no_access_log: bool, default: log_setup.AccessLog
) -> log_setup.AccessLog:
    """`--access-log` (or `--no-access-log`), else `SCHEMABRIDGE_ACCESS_LOG`, else `default`;
    a value that is not a choice is one usage line naming it and the choices."""
    if no_access_log and chosen is None:
        return log_setup.AccessLog.OFF  # the environment's choice is overridden, not read
    try:
        access_log = log_setup.access_log(chosen, default)
    except ValueError as error:
        raise usage.fail(str(error)) from None
    if no_access_log and access_log is not log_setup.AccessLog.OFF:
        raise usage.fail(f"--no-access-log and --access-log {chosen}: give one of them")
    return access_log


def _logging(
    service: str,
    level: str,
    fmt: str | None,
    *,
    access_log: log_setup.AccessLog = log_setup.AccessLog.OFF,
    role: Literal["api", "worker"] = "worker",
) -> None:
    try:
        chosen = log_setup.log_format(fmt)
    except ValueError as error:
        raise usage.fail(f"{error} (SCHEMABRIDGE_LOG_FORMAT)") from None
    log_setup.configure(
        service,
        level=level,
        fmt=chosen,
        access_log=access_log,
        debug=usage.OPTIONS.debug,
        role=role,
    )


def _settings(concurrency: int | None, database: str | None = None) -> Settings:
    from api.cli.environment import load_settings
    from engine.settings import MAX_WORKER_CONCURRENCY

    if concurrency is not None and not 1 <= concurrency <= MAX_WORKER_CONCURRENCY:
        # A worker at 0 would start and never claim a step; past the maximum its lease
        # renewals would not fit one statement (engine.settings.MAX_WORKER_CONCURRENCY).
        raise usage.fail(
            f"--concurrency {concurrency}: give a number of steps in flight from 1 to "
            f"{MAX_WORKER_CONCURRENCY}; for more, start more worker processes"
        )
    settings = load_settings()
    updates: dict[str, Any] = {}
    if concurrency is not None:
        updates["worker_concurrency"] = concurrency
    if database is not None:
        updates["database_url"] = database
    return settings.model_copy(update=updates)


def _run(
    start: Callable[[], Coroutine[Any, Any, None]], settings: Settings, database: str | None
) -> None:
    """Run the service `start()` builds; a refusal to start (`CannotStart`, or a database or
    Redis problem a user can fix, raised building it or running it) is one line and the exit
    code of its kind (`SERVICE_EXIT_CODES_HELP`), never a traceback. `database`: the
    `--database` given, if one was (the refusal names it rather than the setting)."""
    from engine.operations.startup import explain

    try:
        # uvloop: the event loop in C. Per REST submission it saves ~0.5 ms of the api
        # process's CPU against asyncio's loop, and the worker's I/O loops gain alike
        # (bench/results-api.md).
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(start())
    except CannotStart as refusal:
        usage.show_traceback(refusal)
        console.print(f"[red]error:[/red] {named_by(str(refusal), database)}")
        raise typer.Exit(refusal.exit_code) from None
    except Exception as error:
        refused = explain(error, settings)
        if refused is None:
            raise
        usage.show_traceback(error)
        console.print(f"[red]error:[/red] {named_by(refused.message, database)}")
        raise typer.Exit(exit_code_for(refused)) from None


async def _open(settings: Settings, *, migrate: bool = True) -> Runtime:
    """The runtime, or `CannotStart` saying what the user must fix. Only a service that
    migrates may create its SQLite file: one that does not (`api`) would create an empty
    database it then refuses, leaving the file behind; it refuses a schema that is not at
    head (`open_runtime`)."""
    from engine.operations.startup import StartupRefused, open_runtime

    try:
        return await open_runtime(settings, migrate=migrate, create=migrate)
    except StartupRefused as refused:
        # Chained (not `from None`): under --debug its traceback shows where it was refused.
        raise CannotStart(refused.message, exit_code_for(refused)) from refused


async def _opened(settings: Settings, server: ApiServer | None, *, migrate: bool = True) -> Runtime:
    """`_open`, closing `server`'s listening socket when it refuses (else the port stays
    bound until the process exits, which in a test process it does not)."""
    try:
        return await _open(settings, migrate=migrate)
    except BaseException:
        if server is not None:
            server.close()
        raise


def _ready(service: str, settings: Settings, url: str | None = None) -> None:
    """The one `ready` line (stdout, for scripts: a URL is its last word), and in JSON logs
    the same as a record."""
    from engine.operations.startup import mask_url

    redis = mask_url(settings.redis_url) if settings.redis_url else "embedded"
    line = (
        f"{service} ready: pid {os.getpid()}, database {mask_url(settings.database_url)}, "
        f"redis {redis}"
    )
    print(line + (f"; listening on {url}" if url else ""), flush=True)
    logging.getLogger("schemabridge.service").info(
        "ready",
        extra={
            "event": "service.ready",
            "pid": os.getpid(),
            "database": mask_url(settings.database_url),
            "redis": redis,
            "listen": url,
        },
    )


def _require_shared_redis(role: str, settings: Settings) -> None:
    """Refuse (exit 2, one line) a separate `worker` or `api` process on PostgreSQL with no
    `SCHEMABRIDGE_REDIS_URL`: its embedded Redis would live in it alone, so the admission
    (caps, breakers, tenant rates), the cancellations and the heartbeats it keeps would
    never reach the other processes of the store it shares, and nothing would say so."""
    from engine.operations.startup import shares_store

    if settings.redis_url is not None or not shares_store(settings.database_url):
        return
    raise usage.fail(
        f"a separate {role} process on PostgreSQL needs the Redis the other processes use: "
        "set SCHEMABRIDGE_REDIS_URL (e.g. redis://127.0.0.1:6379/0); without it the "
        "embedded Redis is this process's alone, so its caps, breakers, tenant rates and "
        "cancellations would be its own and `schemabridge services` would not see it "
        "(everything in one process: `schemabridge serve`)"
    )


def _warn_private_redis(role: str, settings: Settings) -> None:
    """On SQLite a separate `worker` or `api` process may start with the embedded Redis (a
    test, a laptop), but it coordinates with nothing: say so once it is ready."""
    if settings.redis_url is not None:
        return
    logging.getLogger("schemabridge.service").warning(
        "redis embedded: this %s's caps, breakers, tenant rates, cancellations and heartbeat "
        "are its own, seen by no other process; set SCHEMABRIDGE_REDIS_URL to share them "
        "with the other processes, or run `schemabridge serve` for everything in one process",
        role,
        extra={"event": "service.redis_embedded"},
    )


def _check_secret_keys(settings: Settings) -> None:
    """Refuse to start with a malformed `SCHEMABRIDGE_SECRET_KEYS`: every secret would fail
    later, one step at a time. No key at all is fine (secrets are then unavailable, and the
    steps or requests that need one say how to make a key)."""
    from engine.operations.secrets import malformed_keys

    problem = malformed_keys(settings)
    if problem is not None:
        raise CannotStart(problem, ExitCode.USAGE)


def _listen(host: str, port: int, settings: Settings, *, option: str = "--port") -> ApiServer:
    """The server on `host:port`, or `CannotStart` naming `option`, the command's own option
    for that port (a worker's is `--health-port`)."""
    from api.rest import ApiServer

    try:
        return ApiServer(
            host,
            port,
            grace_s=settings.shutdown_grace_s,
            trusted_proxies=settings.trusted_proxy_networks(),
        )
    except OSError as error:
        raise CannotStart(
            f"cannot listen on {host}:{port}: {error.strerror or error}; pick another with "
            f"{option} (0: a free one)"
        ) from None


async def _announce(server: ApiServer, service: str, settings: Settings) -> None:
    if await server.wait_ready():
        # stdout, one line: scripts (and tests) started with --port 0 read the URL from it.
        _ready(service, settings, server.url)


# ── worker ──────────────────────────────────────────────────────────────────────────────────


async def _serve_worker(settings: Settings, name: str, health: ApiServer | None = None) -> None:
    from api.rest import create_health_app
    from engine.lifecycle import ServiceLifecycle
    from engine.operations.metrics import WorkerMetrics
    from engine.operations.startup import shares_store
    from engine.runtime import ServiceRole, run_service, settle_heap

    lifecycle = ServiceLifecycle()
    with lifecycle:
        # On PostgreSQL, as an api: other processes share the database, and a worker of a
        # new release migrating it under them (a rolling upgrade) would change their schema
        # unasked; `db upgrade` does it, first. An SQLite file is most often its own.
        migrate = not shares_store(settings.database_url)
        runtime = await _opened(settings, health, migrate=migrate)
        _warn_private_redis("worker", settings)
        metrics = WorkerMetrics()
        settle_heap()
        try:
            await _check_name(runtime, name, health)
            await _warn_keys_missing(runtime, f"worker {name}")
            await _warn_clock_skew(runtime, f"worker {name}")
            async with asyncio.TaskGroup() as group:
                if health is not None:
                    app = create_health_app(settings, runtime, metrics)
                    group.create_task(health.serve(app, lifecycle.stop_event), name="health")
                    group.create_task(_announce(health, name, settings), name="announce")
                else:
                    _ready(name, settings)
                stop = lifecycle.stop_event
                group.create_task(_report_recovery(runtime, stop), name="recovery")
                await run_service(runtime, name, stop, role=ServiceRole.WORKER, metrics=metrics)
        finally:
            await runtime.close()


async def _warn_keys_missing(runtime: Runtime, process: str) -> None:
    """Warn, once at start, when stored secrets are encrypted with a key this process's
    worker lacks (a worker's SCHEMABRIDGE_SECRET_KEYS differs from the api's, or `serve` was
    restarted with another key than the one that set them): otherwise the first sign is
    runs failing secret_unreadable. `process` names it: `worker <name>`, or serve's name."""
    from sqlalchemy.exc import SQLAlchemyError

    from engine.operations.secrets import keys_missing

    try:
        problem = await keys_missing(runtime.store, runtime.secret_cipher, process)
    except SQLAlchemyError:  # a check, not a gate: the database's trouble is told elsewhere
        return
    if problem is not None:
        logging.getLogger("schemabridge.service").warning(
            "%s", problem, extra={"event": "secrets.keys_missing"}
        )


CLOCK_SKEW_WARN_S = 5.0
"""How far a process's clock may be from the database server's before it says so at start:
a lease is 30 s by default, a heartbeat lives 30 s."""


async def _warn_clock_skew(runtime: Runtime, process: str) -> None:
    """Warn, once at start, when this machine's clock is off the PostgreSQL server's: every
    process writes leases, timers and heartbeats by its own clock and judges the others' by
    it, so a worker 45 s behind is listed down while it runs, its claims read as expired
    leases (taken back and run again by other workers) and steps wait 45 s before it sees
    them due."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        measured = await runtime.store.clock_offset_s()
    except SQLAlchemyError:  # a check, not a gate: the database's trouble is told elsewhere
        return
    if measured is None:
        return
    offset, trip = measured
    if abs(offset) - trip / 2 <= CLOCK_SKEW_WARN_S:
        return
    logging.getLogger("schemabridge.service").warning(
        "%s: this machine's clock is %.0f s %s the database server's; leases, timers and "
        "heartbeats are judged by wall clocks across processes (its claims look expired to "
        "other workers, `services` lists it down): sync the clocks (NTP) of every machine "
        "running SchemaBridge",
        process,
        abs(offset),
        "ahead of" if offset > 0 else "behind",
        extra={"event": "clock.skewed", "offset_s": round(offset, 3)},
    )


async def _check_name(runtime: Runtime, name: str, health: ApiServer | None) -> None:
    """Before a worker beats under `name`: refuse it when a live process of this machine
    beats under it already (two workers under one name look like one, and the first to stop
    would have hidden the other); take it over, saying so, from one that is gone (a restart
    right after a crash, whose beat lives on up to the TTL); warn when it is another
    machine's, whose process cannot be looked at from here."""
    from engine.runtime import live_namesake

    found = await live_namesake(runtime, name)
    if found is None:
        return
    log = logging.getLogger("schemabridge.service")
    where = f"pid {found.pid}" + (f" on {found.host}" if found.host else "")
    if found.alive_here():
        if health is not None:
            health.close()
        raise CannotStart(
            f"{_process_words(found.role)} named {name} is running here already ({where}, "
            f"last heartbeat {found.silent_s:g} s ago); give this one another --name, or stop "
            "that one first"
        )
    if found.host == socket.gethostname():
        log.info(
            "worker %s: taking over the name from %s, which is gone (its heartbeat was %g s old)",
            name,
            where,
            found.silent_s,
            extra={"event": "service.name_taken_over"},
        )
        return
    log.warning(
        "worker %s: %s beat under this name %g s ago; if it is alive, both look like one "
        "worker to `schemabridge services` and to the steps they hold: give each worker its "
        "own --name",
        name,
        where,
        found.silent_s,
        extra={"event": "service.name_shared"},
    )


def _process_words(role: ServiceRole | None) -> str:
    """What process beats under a name, as its heartbeat's role says (a worker's --name may
    be any name, an api process's `api-<host>-<port>` too); a beat that does not say its role
    (written before beats did) is taken for a worker's, as before."""
    from engine.runtime import ServiceRole

    if role is ServiceRole.API:
        return "an api process (`schemabridge api`)"
    if role is ServiceRole.SERVE:
        return "a serve process (`schemabridge serve`: an API and a worker)"
    return "a worker"


def worker(
    name: Annotated[
        str | None, typer.Option(help="Service name (default worker-<host>-<pid>).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Steps in flight (default SCHEMABRIDGE_WORKER_CONCURRENCY).")
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve GET /health and GET /metrics on this port (0: a free one).",
        ),
    ] = None,
    health_host: Annotated[
        str, typer.Option(metavar="HOST", help="Address of the health port.")
    ] = "127.0.0.1",
    database: DatabaseOption = None,
    log_level: LogLevel = log_setup.Level.INFO,
    log_format: LogFormatOption = None,
    access_log: WorkerAccessLogOption = None,
) -> None:
    """Run a worker process (several, on several machines, to scale out).

    Claims and executes steps until SIGINT/SIGTERM, then drains in-flight steps and exits 0.
    Workers share the work through the same SCHEMABRIDGE_DATABASE_URL and
    SCHEMABRIDGE_REDIS_URL (on PostgreSQL it refuses to start without the latter). On
    PostgreSQL it never migrates: it refuses (exit 2) a database whose schema is not this
    code's head revision; run 'schemabridge db upgrade' first. An SQLite file it migrates. With
    --health-port it also serves GET /health (the database and
    Redis answer) and GET /metrics (its own figures, with an admin key) and prints that URL;
    --access-log says which of those requests its access log writes."""
    service = name or f"worker-{socket.gethostname()}-{os.getpid()}"
    # Refused before anything starts: the marker is written once the worker is ready, and a
    # name it cannot take then failed the worker after its ready line (a script went on).
    problem = service_name_problem(service)
    if problem is not None:
        raise usage.fail(f"--name: {problem}" if name else problem, ExitCode.USAGE)
    # `changes` by default: a scraper refused (a wrong key) or failing is logged, the
    # successful scrapes and probes every few seconds are not.
    chosen = _access_log(access_log, False, log_setup.AccessLog.CHANGES)
    _logging(service, log_level, log_format, access_log=chosen)
    settings = _settings(concurrency, database)
    _require_shared_redis("worker", settings)

    def start() -> Coroutine[Any, Any, None]:
        _check_secret_keys(settings)
        health = (
            None
            if health_port is None
            else _listen(health_host, health_port, settings, option="--health-port")
        )
        return _serve_worker(settings, service, health)

    _run(start, settings, database)


# ── api ─────────────────────────────────────────────────────────────────────────────────────


async def _serve_api(settings: Settings, server: ApiServer) -> None:
    from api.rest import borrowed_runtime, create_app
    from engine.lifecycle import ServiceLifecycle
    from engine.runtime import ServiceRole, api_service_name, run_presence, settle_heap

    # Named by host and port: several api processes may run on one machine. Its log lines
    # and ready line carry the name its heartbeat and marker have, from here on.
    service = api_service_name(socket.gethostname(), server.port)
    log_setup.name_service(service)
    lifecycle = ServiceLifecycle()
    with lifecycle:
        runtime = await _opened(settings, server, migrate=False)  # refuses a schema not at head
        _warn_private_redis("api", settings)
        try:
            await _warn_clock_skew(runtime, service)  # it judges the workers' heartbeats
            app = create_app(settings, runtime_factory=borrowed_runtime(runtime))
            # As a worker does: the start-up heap out of the collector's reach, or its first
            # full collections (about 100 ms each) stall the first seconds of answers.
            settle_heap()
            stop = lifecycle.stop_event
            async with asyncio.TaskGroup() as group:
                group.create_task(_announce(server, service, settings), name="announce")
                presence = run_presence(runtime, service, stop, role=ServiceRole.API)
                group.create_task(presence, name="presence")
                group.create_task(_report_recovery(runtime, stop), name="recovery")
                try:
                    await server.serve(app, stop)
                finally:
                    stop.set()  # a server that ended by itself (its app failed) ends the rest
            # As a worker says it (docs/monitoring.md lists the event for every service).
            logging.getLogger("schemabridge.service").info(
                "service %s stopped", service, extra={"event": "service.stopped"}
            )
        finally:
            server.close()
            await runtime.close()


RECOVERY_PROBE_S = 2.0
"""How often a service (`api`, `worker`, `serve`) whose log told a database outage probes
the database."""


async def _report_recovery(runtime: Runtime, stop: asyncio.Event) -> None:
    """While the log has told a database outage, probe the database every
    `RECOVERY_PROBE_S` and say once when it works again ("database works again after N s"),
    the line every service gives: an `api` has no results to record and no claims to make,
    and a worker's recorder tells only of the results it kept, so nothing else would."""
    from engine.operations.health import HealthOperations

    health = HealthOperations(runtime)
    service_log = logging.getLogger("schemabridge.service")
    while not stop.is_set():
        if log_setup.outage_since("database") is not None:
            report = await health.check(timeout_s=RECOVERY_PROBE_S)
            if "database" not in report.failing:
                log_setup.end_outage("database", service_log)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RECOVERY_PROBE_S)


def api(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    database: DatabaseOption = None,
    log_level: LogLevel = log_setup.Level.INFO,
    log_format: LogFormatOption = None,
    access_log: ApiAccessLogOption = None,
    no_access_log: NoAccessLogOption = False,
) -> None:
    """Run the REST API alone (any number of them, beside worker processes).

    Never migrates: refuses to start (exit 2) on a database whose schema is not this code's
    head revision, or an SQLite file that does not exist; run 'schemabridge db upgrade' first.
    On PostgreSQL it needs SCHEMABRIDGE_REDIS_URL, the workers' Redis (exit 2 without it).
    Prints the URL once it accepts requests; stops gracefully on SIGINT/SIGTERM."""
    # Every request by default: in production the log is shipped, and read elsewhere.
    chosen = _access_log(access_log, no_access_log, log_setup.AccessLog.ALL)
    # "api" until it listens: its name has the port (`_serve_api`), 0 picks one.
    _logging("api", log_level, log_format, access_log=chosen, role="api")
    settings = _settings(None, database)
    _require_shared_redis("api", settings)

    def start() -> Coroutine[Any, Any, None]:
        _check_secret_keys(settings)
        return _serve_api(settings, _listen(host, port, settings))

    _run(start, settings, database)


# ── serve ───────────────────────────────────────────────────────────────────────────────────


def _example_names(examples: list[tuple[str, str]]) -> list[str]:
    """The names the example files give their workflows (a file that is not one is left to
    publication to refuse)."""
    names: list[str] = []
    for _, text in examples:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            name = json.loads(text)["name"]
            if isinstance(name, str):
                names.append(name)
    return names


def _read_examples(examples: Path) -> list[tuple[str, str]]:
    """The example workflow files (not their sample inputs): (path, text)."""
    try:
        files = sorted(p for p in examples.glob("*.json") if not p.name.endswith(".input.json"))
        documents = [(str(path), path.read_text(encoding="utf-8")) for path in files]
    except OSError as error:
        raise CannotStart(
            f"cannot read the examples in {examples}: {error}", ExitCode.USAGE
        ) from None
    if not documents:
        raise CannotStart(
            f"no example workflows in {examples}; give --examples DIR", ExitCode.USAGE
        )
    return documents


async def _publish_examples(
    runtime: Runtime, examples: list[tuple[str, str]], downstream_url: str
) -> list[str]:
    from engine.validation import parse_documents

    documents = [
        (source, text.replace(demo_address.EXAMPLES_URL, downstream_url).encode())
        for source, text in examples
    ]
    try:
        workflows = parse_documents(documents)
    except Exception as error:
        raise CannotStart(f"the example workflows are not valid: {error}", ExitCode.USAGE) from None
    from engine.operations import Operations

    # Published again on each start: the same versions while the downstream keeps its port,
    # new ones when it moved. They serve, unless a deployment of one is running (it keeps
    # deciding; logged either way).
    published = await Operations(runtime).workflows.publish_serving(
        [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows],
        actor="serve --demo",
    )
    return [result.name for result in published]


def _warn_demo(downstream_url: str, names: list[str], api_url: str) -> None:
    # stdout, one line, before the "listening on" line: `make demo` (demo/monitor.py) reads
    # it to script the downstream's failures.
    print(f"demo downstream at {downstream_url}", flush=True)
    # A rule spans the console, which is PIPED_WIDTH wide in a log or pipe: keep it readable.
    rule_width = min(console.width, 100)
    console.print(Rule("[bold red]DEMO MODE[/bold red]"), width=rule_width)
    console.print(
        "[bold red]Authentication is OFF:[/bold red] every request acts as the admin 'demo'. "
        "Do not expose this port."
    )
    console.print(
        "[bold red]Egress to loopback is ALLOWED[/bold red] (127.0.0.0/8, ::1, localhost) so "
        "the examples reach the demo downstream; other internal addresses stay refused."
    )
    console.print(f"demo downstream: {downstream_url}; example workflows: {', '.join(names)}")
    # Where to look: the banner named the downstream and the ready line the API, but not the
    # monitor someone paged at night opens first.
    console.print(f"web monitor: {api_url}/ui")
    console.print(Rule(), width=rule_width)


async def _serve_all(
    settings: Settings,
    server: ApiServer,
    service: str,
    demo: list[tuple[str, str]] | None,
    demo_port: int | None = None,
) -> None:
    from api.rest import borrowed_runtime, create_app
    from engine.lifecycle import ServiceLifecycle
    from engine.operations.metrics import WorkerMetrics
    from engine.runtime import ServiceRole, run_service, settle_heap

    lifecycle = ServiceLifecycle()
    with lifecycle:
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(server.close)
            downstream_url = None
            if demo is not None and demo_port is not None:
                # The port the user chose is checked before the database is opened (and
                # migrated, which takes time): a port taken is said at once.
                downstream_url = await stack.enter_async_context(
                    demo_address.on_port(demo_port, CannotStart)
                )
            runtime = await _open(settings)
            stack.push_async_callback(runtime.close)
            if demo is not None and downstream_url is None:
                preferred = await demo_address.remembered_port(runtime, _example_names(demo))
                downstream_url = await stack.enter_async_context(
                    demo_address.started(preferred, "examples")
                )
            if demo is not None and downstream_url is not None:
                published = await _publish_examples(runtime, demo, downstream_url)
                _warn_demo(downstream_url, published, server.url)
            # serve runs a worker: a key changed since the secrets were set fails their steps.
            await _warn_keys_missing(runtime, service)
            metrics = WorkerMetrics()
            settle_heap()
            app = create_app(
                settings,
                runtime_factory=borrowed_runtime(runtime),
                auth=False if demo is not None else None,
                demo_downstream=downstream_url,
                worker_metrics=metrics,  # one process: its /metrics has the worker's too
            )
            async with asyncio.TaskGroup() as group:
                stop = lifecycle.stop_event
                group.create_task(server.serve(app, stop), name="http")
                group.create_task(_announce(server, service, settings), name="announce")
                group.create_task(_report_recovery(runtime, stop), name="recovery")
                await run_service(runtime, service, stop, role=ServiceRole.SERVE, metrics=metrics)


def serve(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    demo: Annotated[
        bool,
        typer.Option(
            help="Publish the examples, start the demo downstream, and turn authentication OFF."
        ),
    ] = False,
    examples: Annotated[
        Path, typer.Option(help="Example workflows published by --demo.")
    ] = EXAMPLES_DIR,
    demo_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            metavar="PORT",
            help="Port of the --demo downstream (0: a free one). Default: the port the "
            "examples' published versions call, when free (no new version), else a free one.",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Steps in flight.")] = None,
    database: DatabaseOption = None,
    log_level: LogLevel = log_setup.Level.INFO,
    log_format: LogFormatOption = None,
    access_log: ServeAccessLogOption = None,
    no_access_log: NoAccessLogOption = False,
) -> None:
    """Run the REST API, a worker and its timers in one process.

    The embedded SQLite file and in-process Redis by default; migrates the database. Prints
    the URL once it accepts requests; stops gracefully on SIGINT/SIGTERM."""
    service = f"serve-{socket.gethostname()}"
    # Only what changed or failed by default: the terminal of a laptop with the monitor open,
    # whose polling reads would bury the lines an operator acts on.
    chosen = _access_log(access_log, no_access_log, log_setup.AccessLog.CHANGES)
    _logging(service, log_level, log_format, access_log=chosen)
    if demo_port is not None and not demo:
        raise usage.fail("--demo-port is the port of the --demo downstream: give it with --demo")
    settings = _settings(concurrency, database)
    if demo:
        settings = settings.allowing_loopback()

    def start() -> Coroutine[Any, Any, None]:
        _check_secret_keys(settings)
        documents = _read_examples(examples) if demo else None
        server = _listen(host, port, settings)
        return _serve_all(settings, server, service, documents, demo_port)

    _run(start, settings, database)


# ── db ──────────────────────────────────────────────────────────────────────────────────────


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the database migrations (SCHEMABRIDGE_DATABASE_URL: sqlite:///path.db or
    postgresql://user@host:5432/db) up to REVISION.

    Run it before starting or upgrading `api` and `worker` processes on PostgreSQL: they never
    migrate. Prints the revisions it went from and to; waits for another process migrating
    the same PostgreSQL database."""
    from api.cli.environment import load_settings
    from engine.operations.schema import upgrade_database
    from engine.operations.startup import check_database_url, mask_url

    settings = load_settings()
    check_database_url(settings.database_url, pooler=settings.database_pooler)
    migrated = asyncio.run(
        upgrade_database(settings.database_url, revision, pooler=settings.database_pooler)
    )
    where = mask_url(settings.database_url)
    if migrated.moved:
        console.print(f"database {where} upgraded to {revision}: {migrated.line()}")
    elif revision not in ("head", migrated.after):
        # Asked for an older revision (a rollback's): "at 0022 already" read as done.
        console.print(
            f"database {where} is at {migrated.after}, past {revision}: nothing to do (`db "
            f"upgrade` never goes back, and no downgrade is offered: a release that ships up "
            f"to {revision} cannot use this database)"
        )
    else:
        console.print(f"database {where} is at {migrated.after} already: nothing to do")


@db_app.command("downgrade", hidden=True)
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Ignored: nothing is downgraded.")] = "",
) -> None:
    """Say that no downgrade is offered, and what to do instead (the command a rollback
    reaches for: typer's own answer to the name was "Did you mean 'upgrade'?")."""
    raise usage.fail(
        "no downgrade is offered: to go back to an older release, restore the backup taken "
        "before `db upgrade` (an older release refuses a database a newer one migrated); "
        "`schemabridge db current` says where this one is",
        ExitCode.USAGE,
    )


@db_app.command("current")
def db_current() -> None:
    """Say the schema revision of the database (SCHEMABRIDGE_DATABASE_URL) against the one
    this release needs. Changes nothing.

    The answer is printed on stdout. Exit 0 when it is this release's, 1 when it is behind
    (run `schemabridge db upgrade`), never migrated, or of a newer release; 2 when there is no
    such SQLite file, 4 when the database does not answer (those two said on stderr)."""
    from api.cli.environment import load_settings
    from engine.operations.schema import database_schema
    from engine.operations.startup import check_database_url, mask_url

    settings = load_settings()
    check_database_url(settings.database_url, create=False, pooler=settings.database_pooler)
    schema = asyncio.run(database_schema(settings.database_url, pooler=settings.database_pooler))
    where = mask_url(settings.database_url)
    # The answer goes to stdout, as a query's (a deploy script reads it); refusals to stderr.
    if schema.up_to_date:
        typer.echo(f"database {where} is at {schema.current}, this release's: up to date")
        return
    typer.echo(f"database {where}: {schema.explain()}")
    raise typer.Exit(ExitCode.FAILED)


# ── demo downstream ─────────────────────────────────────────────────────────────────────────


def demo_downstream(
    host: Host = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=0,
            max=65535,
            metavar="PORT",
            help="Port (the examples call 127.0.0.1:8765; 0: a free one).",
        ),
    ] = 8765,
    latency_ms: Annotated[
        float, typer.Option(metavar="MS", help="Answer every request after this long.")
    ] = 0.0,
) -> None:
    """Run the shipped demo downstream on its own (the HTTP service the examples call).

    It answers any path and method with a JSON echo of the request; query parameters or
    X-Demo-* headers (status, sleep_ms, retry_after, reset, body_bytes, trickle_ms, ...) make
    one request fail or slow down.

    POST /_script queues the next answers: [503, 503, 200] for any path, or {"path": "/x",
    "responses": [...]} for that path only; an entry is a status or an object with those
    names plus body and headers ({"status": 201, "body": {"id": 7}}). Each is used once, in
    order, before the request's own overrides. POST /_reset drops the queued answers and the
    statistics; POST /_config changes latencyMs, capacity, retryAfterS and failRate live;
    GET /_stats[?recent=N] counts the requests served. README.md's paragraph on the demo
    downstream says more.

    Prints `demo downstream listening on URL` once it accepts requests; stops on
    SIGINT/SIGTERM."""
    from demo.downstream import main as run_downstream

    try:
        run_downstream(["--host", host, "--port", str(port), "--latency-ms", str(latency_ms)])
    except OSError as error:
        raise usage.fail(
            f"cannot listen on {host}:{port}: {error.strerror or error}; pick another with "
            "--port (0: a free one)",
            EXIT_REFUSED,
        ) from None
