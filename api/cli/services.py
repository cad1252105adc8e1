"""Long-running services and maintenance: `api`, `serve`, `worker`, `db upgrade`.

- `api`: the REST API alone. Stateless: run any number of them beside `worker` processes on
  PostgreSQL + Redis. It never migrates, and refuses to start on a database whose schema is
  not the code's head revision.
- `serve`: the API, a worker and its timers in one process (embedded SQLite and Redis by
  default); it migrates the database, as a single-process install expects. `--demo` adds the
  examples and the demo downstream, with authentication off.
- `worker`: claims and executes steps; `--health-port` serves `/health` beside it.

Each prints the URL it listens on once it accepts requests (port 0: a free port, and the URL
names it), and stops gracefully on SIGINT/SIGTERM (engine/lifecycle.py): the health marker and
the heartbeat go first, in-flight requests and steps finish within
`SCHEMABRIDGE_SHUTDOWN_GRACE_S`, queued work stays in the store.
"""

from __future__ import annotations

# The runtime and the web stack are imported inside the commands (see api/cli/run.py for why).
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvloop
from rich.console import Console
from rich.logging import RichHandler

from engine.settings import Settings

if TYPE_CHECKING:
    from api.rest import ApiServer
    from engine.runtime import Runtime

console = Console(stderr=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)

EXIT_REFUSED = 1
"""The service cannot start (schema behind, address in use, database unreachable)."""
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
DEMO_DOWNSTREAM_URL = "http://127.0.0.1:8765"
"""Where the example files call the demo downstream; `serve --demo` publishes them with this
replaced by the URL of the one it started."""
SCHEMA_CHECK_TIMEOUT_S = 10.0


class CannotStart(Exception):
    """A service refuses to start; the message is the one line shown to the operator."""


def _logging(level: str, *, access_log: bool = True) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )
    # Alembic announces each of its plugins at INFO whenever a migration script directory is
    # read (the schema check of every start): noise to an operator, so only its warnings show.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    from api.rest.middleware import ACCESS_LOGGER

    # The access log is JSON, one object a line on stderr, whatever the log level: log
    # shippers parse it, so it bypasses the human-oriented handler.
    access = logging.getLogger(ACCESS_LOGGER)
    access.propagate = False
    access.setLevel(logging.INFO if access_log else logging.CRITICAL + 1)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access.addHandler(handler)


def _settings(concurrency: int | None) -> Settings:
    settings = Settings()
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    return settings


def _run(start: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run the service `start()` builds; a refusal to start (`CannotStart`, raised building
    it or running it) is one line and exit code 1, never a traceback."""
    try:
        # uvloop: the event loop in C. Per REST submission it saves ~0.5 ms of the api
        # process's CPU against asyncio's loop, and the worker's I/O loops gain alike
        # (bench/results-api.md).
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(start())
    except CannotStart as refusal:
        console.print(f"[red]error:[/red] {refusal}", soft_wrap=True)
        raise typer.Exit(EXIT_REFUSED) from None


def _listen(host: str, port: int, settings: Settings) -> ApiServer:
    from api.rest import ApiServer

    try:
        return ApiServer(host, port, grace_s=settings.shutdown_grace_s)
    except OSError as error:
        raise CannotStart(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


async def _announce(server: ApiServer, what: str) -> None:
    if await server.wait_ready():
        # stdout, one line: scripts (and tests) started with --port 0 read the URL from it.
        print(f"{what} listening on {server.url}", flush=True)


async def _check_schema(runtime: Runtime) -> None:
    """Refuse a database whose schema is not this code's head revision."""
    from engine.operations import Operations

    try:
        schema = await asyncio.wait_for(Operations(runtime).health.schema(), SCHEMA_CHECK_TIMEOUT_S)
    except Exception as error:  # whatever the driver raises, the operator gets one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CannotStart(f"cannot read the database's schema revision: {reason}") from None
    if not schema.up_to_date:
        raise CannotStart(schema.explain())


# ── worker ──────────────────────────────────────────────────────────────────────────────────


async def _serve_worker(settings: Settings, name: str, health: ApiServer | None = None) -> None:
    from api.rest import create_health_app
    from engine.lifecycle import ServiceLifecycle
    from engine.runtime import Runtime, run_service, settle_heap

    lifecycle = ServiceLifecycle()
    with lifecycle:
        runtime = await Runtime.open(settings)
        settle_heap()
        try:
            async with asyncio.TaskGroup() as group:
                if health is not None:
                    app = create_health_app(settings, runtime)
                    group.create_task(health.serve(app, lifecycle.stop_event), name="health")
                    group.create_task(_announce(health, f"{name} health"), name="announce")
                await run_service(runtime, name, lifecycle.stop_event)
        finally:
            await runtime.close()


def worker(
    name: Annotated[
        str | None, typer.Option(help="Service name (default worker-<host>-<pid>).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Steps in flight (default SCHEMABRIDGE_WORKER_CONCURRENCY).")
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Serve GET /health on this port (0: a free one)."),
    ] = None,
    health_host: Annotated[str, typer.Option(help="Address of the health port.")] = "127.0.0.1",
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
) -> None:
    """Run a worker process (several, on several machines, to scale out).

    Claims and executes steps until SIGINT/SIGTERM, then drains in-flight steps and exits 0.
    Workers share the work through the same SCHEMABRIDGE_DATABASE_URL and
    SCHEMABRIDGE_REDIS_URL. With --health-port it also serves GET /health (the database and
    Redis answer) and prints that URL."""
    _logging(log_level, access_log=False)
    settings = _settings(concurrency)
    service = name or f"worker-{socket.gethostname()}-{os.getpid()}"

    def start() -> Coroutine[Any, Any, None]:
        health = None if health_port is None else _listen(health_host, health_port, settings)
        return _serve_worker(settings, service, health)

    _run(start)


# ── api ─────────────────────────────────────────────────────────────────────────────────────


async def _serve_api(settings: Settings, server: ApiServer) -> None:
    from api.rest import borrowed_runtime, create_app
    from engine.lifecycle import ServiceLifecycle
    from engine.runtime import Runtime

    lifecycle = ServiceLifecycle()
    with lifecycle:
        runtime = await Runtime.open(settings, migrate=False)
        try:
            await _check_schema(runtime)
            app = create_app(settings, runtime_factory=borrowed_runtime(runtime))
            async with asyncio.TaskGroup() as group:
                group.create_task(_announce(server, "api"), name="announce")
                await server.serve(app, lifecycle.stop_event)
        finally:
            server.close()
            await runtime.close()


def api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8000,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
    access_log: Annotated[bool, typer.Option(help="JSON access log on stderr.")] = True,
) -> None:
    """Run the REST API alone (any number of them, beside worker processes).

    Never migrates: refuses to start (exit 1) on a database whose schema is not this code's
    head revision; run 'schemabridge db upgrade' first. Prints the URL once it accepts
    requests; stops gracefully on SIGINT/SIGTERM."""
    _logging(log_level, access_log=access_log)
    # Reading the schema revision goes through Alembic, which announces its context at INFO;
    # this process never migrates, so that is noise before the one line that matters.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = Settings()
    _run(lambda: _serve_api(settings, _listen(host, port, settings)))


# ── serve ───────────────────────────────────────────────────────────────────────────────────


@contextlib.asynccontextmanager
async def _demo_downstream() -> AsyncIterator[str]:
    """The shipped demo downstream on a free loopback port (never a fixed one: another
    process may hold it); the examples are published pointing there."""
    from demo.downstream import start_downstream

    downstream = await start_downstream(port=0)
    try:
        yield downstream.url
    finally:
        await downstream.stop()


def _read_examples(examples: Path) -> list[tuple[str, str]]:
    """The example workflow files (not their sample inputs): (path, text)."""
    try:
        files = sorted(p for p in examples.glob("*.json") if not p.name.endswith(".input.json"))
        documents = [(str(path), path.read_text(encoding="utf-8")) for path in files]
    except OSError as error:
        raise CannotStart(f"cannot read the examples in {examples}: {error}") from None
    if not documents:
        raise CannotStart(f"no example workflows in {examples}; give --examples DIR")
    return documents


async def _publish_examples(
    runtime: Runtime, examples: list[tuple[str, str]], downstream_url: str
) -> list[str]:
    from engine.validation import parse_documents

    documents = [
        (source, text.replace(DEMO_DOWNSTREAM_URL, downstream_url).encode())
        for source, text in examples
    ]
    try:
        workflows = parse_documents(documents)
    except Exception as error:
        raise CannotStart(f"the example workflows are not valid: {error}") from None
    from engine.operations import Operations

    published = await Operations(runtime).workflows.publish(
        [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows]
    )
    return [result.name for result in published]


def _warn_demo(downstream_url: str, names: list[str]) -> None:
    console.rule("[bold red]DEMO MODE[/bold red]")
    console.print(
        "[bold red]Authentication is OFF:[/bold red] every request acts as the admin 'demo'. "
        "Do not expose this port."
    )
    console.print(f"demo downstream: {downstream_url}; example workflows: {', '.join(names)}")
    console.rule()


async def _serve_all(
    settings: Settings, server: ApiServer, service: str, demo: list[tuple[str, str]] | None
) -> None:
    from api.rest import borrowed_runtime, create_app
    from engine.lifecycle import ServiceLifecycle
    from engine.runtime import Runtime, run_service, settle_heap

    lifecycle = ServiceLifecycle()
    with lifecycle:
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(server.close)
            runtime = await Runtime.open(settings)
            stack.push_async_callback(runtime.close)
            if demo is not None:
                downstream_url = await stack.enter_async_context(_demo_downstream())
                _warn_demo(downstream_url, await _publish_examples(runtime, demo, downstream_url))
            settle_heap()
            app = create_app(
                settings,
                runtime_factory=borrowed_runtime(runtime),
                auth=False if demo is not None else None,
            )
            async with asyncio.TaskGroup() as group:
                group.create_task(server.serve(app, lifecycle.stop_event), name="http")
                group.create_task(_announce(server, "serve"), name="announce")
                await run_service(runtime, service, lifecycle.stop_event)


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8000,
    demo: Annotated[
        bool,
        typer.Option(
            help="Publish the examples, start the demo downstream, and turn authentication OFF."
        ),
    ] = False,
    examples: Annotated[
        Path, typer.Option(help="Example workflows published by --demo.")
    ] = EXAMPLES_DIR,
    concurrency: Annotated[int | None, typer.Option(help="Steps in flight.")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
    access_log: Annotated[bool, typer.Option(help="JSON access log on stderr.")] = True,
) -> None:
    """Run the REST API, a worker and its timers in one process.

    The embedded SQLite file and in-process Redis by default; migrates the database. Prints
    the URL once it accepts requests; stops gracefully on SIGINT/SIGTERM."""
    _logging(log_level, access_log=access_log)
    settings = _settings(concurrency)
    service = f"serve-{socket.gethostname()}"

    def start() -> Coroutine[Any, Any, None]:
        documents = _read_examples(examples) if demo else None
        return _serve_all(settings, _listen(host, port, settings), service, documents)

    _run(start)


# ── db ──────────────────────────────────────────────────────────────────────────────────────


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the database migrations (SCHEMABRIDGE_DATABASE_URL) up to REVISION."""
    from engine.operations.schema import upgrade_database

    asyncio.run(upgrade_database(Settings().database_url, revision))
    console.print(f"database upgraded to {revision}")
