"""Long-running services and maintenance: `worker`, `serve`, `db upgrade`."""

from __future__ import annotations

# The runtime is imported inside the commands (see api/cli/run.py for why).
import asyncio
import logging
import os
import socket
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from engine.settings import Settings

console = Console(stderr=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )


def _settings(concurrency: int | None) -> Settings:
    settings = Settings()
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    return settings


async def _serve_worker(settings: Settings, name: str) -> None:
    from engine.lifecycle import ServiceLifecycle
    from engine.runtime import Runtime, run_service, settle_heap

    lifecycle = ServiceLifecycle()
    with lifecycle:
        runtime = await Runtime.open(settings)
        settle_heap()
        try:
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
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
) -> None:
    """Run a worker process (several, on several machines, to scale out).

    Claims and executes steps until SIGINT/SIGTERM, then drains in-flight steps and exits 0.
    Workers share the work through the same SCHEMABRIDGE_DATABASE_URL and
    SCHEMABRIDGE_REDIS_URL."""
    _logging(log_level)
    service = name or f"worker-{socket.gethostname()}-{os.getpid()}"
    asyncio.run(_serve_worker(_settings(concurrency), service))


def serve(
    concurrency: Annotated[int | None, typer.Option(help="Steps in flight.")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
) -> None:
    """Run workers and timers in one process on the configured store.

    The embedded SQLite file and in-process Redis by default. Stops gracefully on
    SIGINT/SIGTERM."""
    _logging(log_level)
    asyncio.run(_serve_worker(_settings(concurrency), f"serve-{socket.gethostname()}"))


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the database migrations (SCHEMABRIDGE_DATABASE_URL) up to REVISION."""

    from engine.store import db

    async def upgrade() -> None:
        engines = db.create_engines(Settings().database_url)
        try:
            await db.upgrade(engines, revision)
        finally:
            await engines.dispose()

    asyncio.run(upgrade())
    console.print(f"database upgraded to {revision}")
