"""`schemabridge run`: execute one workflow in-process with a live progress display."""

from __future__ import annotations

# Heavy modules (the runtime: SQLAlchemy, aiohttp, Redis clients) are imported inside the
# commands that need them, so `schemabridge --help` and `validate` start fast.
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from engine.settings import Settings
from engine.validation import parse_documents, validate_input
from schemas.definitions import SpawnerVertex, Workflow
from schemas.errors import DefinitionError, OperationError

if TYPE_CHECKING:
    from engine.operations import Operations
    from engine.operations.views import RunDetail

console = Console(stderr=True)
out = Console()

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
DEMO_DOWNSTREAM_PORT = 8765


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def read_input(value: str | None) -> Any:
    """`--input` is inline JSON or `@path` to a JSON file."""
    if value is None:
        return {}
    source = "--input"
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"cannot read input file {path}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"{source} is not valid JSON: {exc}") from exc


def load_workflows(files: list[Path]) -> list[Workflow]:
    documents: list[tuple[str, bytes]] = []
    for path in files:
        try:
            documents.append((str(path), path.read_bytes()))
        except OSError as exc:
            raise _fail(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return parse_documents(documents)
    except DefinitionError as exc:
        for problem in exc.problems:
            where = f"{problem.source}:" if getattr(problem, "source", "") else ""
            console.print(f"[red]{where}{problem.pointer or '/'}[/red] {problem.message}")
        raise typer.Exit(EXIT_USAGE) from exc


def pick_workflow(workflows: list[Workflow], name: str | None) -> Workflow:
    """The named workflow, or the only one no spawner starts as a child."""
    if name is not None:
        for workflow in workflows:
            if workflow.name == name:
                return workflow
        raise _fail(f"no workflow named {name!r} in the files given")
    children = {
        v.config.workflow.split("@")[0]
        for w in workflows
        for v in w.vertices.values()
        if isinstance(v, SpawnerVertex)
    }
    roots = [w for w in workflows if w.name not in children]
    if len(roots) != 1:
        names = ", ".join(w.name for w in roots) or "none"
        raise _fail(f"several workflows could run ({names}); choose one with --workflow")
    return roots[0]


def check_input(workflow: Workflow, run_input: Any) -> None:
    """The run input against the workflow's inputSchema (the validator's own check)."""
    problems = validate_input(workflow, run_input)
    for problem in problems:
        console.print(f"[red]input{problem.pointer}[/red] {problem.message}")
    if problems:
        raise typer.Exit(EXIT_USAGE)


@contextlib.asynccontextmanager
async def _demo_downstream(enabled: bool) -> AsyncIterator[None]:
    if not enabled:
        yield
        return
    from demo.downstream import start_downstream

    downstream = await start_downstream(port=DEMO_DOWNSTREAM_PORT)
    console.print(f"demo downstream listening on {downstream.url}")
    try:
        yield
    finally:
        await downstream.stop()


async def _watch(ops: Operations, run_id: str, total: int, timeout_s: float) -> RunDetail:
    """Show the run's steps and, once it fans out, its children, until it ends."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        current = await ops.runs.get(run_id)
        steps_bar = progress.add_task(f"{current.workflow} steps", total=total, detail="")
        children_bar: TaskID | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            current = await ops.runs.get(run_id)
            done = sum(1 for s in current.steps if s.status in {"SUCCEEDED", "RESOLVED", "SKIPPED"})
            running = [s.vertex_id for s in current.steps if s.status in {"RUNNING", "PARKED"}]
            detail = f"running {', '.join(running)}" if running else ""
            progress.update(steps_bar, completed=done, detail=detail)
            fanout = current.fanout
            if fanout.total:
                if children_bar is None:
                    children_bar = progress.add_task("children", total=fanout.total, detail="")
                ended = fanout.succeeded + fanout.failed + fanout.cancelled
                summary = f"{fanout.failed} failed, {fanout.running} running"
                progress.update(children_bar, total=fanout.total, completed=ended, detail=summary)
            if current.status in {"SUCCEEDED", "FAILED", "CANCELLED"}:
                progress.update(steps_bar, detail=current.status)
                return current
            await asyncio.sleep(0.2)
    raise _fail(f"run {run_id} still not finished after {timeout_s:.0f} s", EXIT_TIMEOUT)


async def execute_run(
    workflows: list[Workflow],
    target: Workflow,
    run_input: Any,
    settings: Settings,
    *,
    tenant: str,
    demo_downstream: bool,
    timeout_s: float,
) -> RunDetail:
    from engine.operations import Operations
    from engine.runtime import Runtime, settle_heap

    async with _demo_downstream(demo_downstream):
        runtime = await Runtime.open(settings)
        settle_heap()
        stop = asyncio.Event()
        try:
            ops = Operations(runtime)
            documents = [
                w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows
            ]
            try:
                # What the files say runs: their versions serve (children included).
                await ops.workflows.publish(documents, serve_as="cli run")
                run = (await ops.runs.submit(target.name, run_input, tenant_id=tenant)).run
            except OperationError as exc:
                raise _fail(exc.message) from exc
            console.print(f"run {run.id} ({target.name} v{run.version})")
            worker = runtime.worker()
            async with asyncio.TaskGroup() as group:
                group.create_task(worker.run(stop), name="worker")
                try:
                    return await _watch(ops, run.id, len(target.vertices), timeout_s)
                finally:
                    stop.set()
        finally:
            await runtime.close()


def print_result(run: RunDetail) -> None:
    if run.status == "SUCCEEDED":
        console.print(f"[green]SUCCEEDED[/green] run {run.id}")
        out.print_json(json.dumps(run.output))
        return
    console.print(f"[red]{run.status}[/red] run {run.id}")
    error = run.error
    console.print(f"  vertex:  {(error and error.vertex_id) or '?'}")
    console.print(f"  kind:    {error.kind if error else '?'}")
    console.print(f"  message: {error.message if error else ''}")
    if error is not None and (error.http_status is not None or error.attempts is not None):
        console.print(f"  http:    status {error.http_status} after {error.attempts} attempts")
        if error.body_excerpt:
            console.print(f"  body:    {error.body_excerpt[:300]}")


def run(
    files: Annotated[list[Path], typer.Argument(help="Workflow files (parent and children).")],
    workflow: Annotated[str | None, typer.Option(help="Which workflow to run.")] = None,
    input: Annotated[
        str | None, typer.Option("--input", help="Run input: JSON text or @file.json.")
    ] = None,
    tenant: Annotated[str, typer.Option(help="Tenant id of the run.")] = "default",
    database: Annotated[
        str | None, typer.Option(help="Database URL (default: SCHEMABRIDGE_DATABASE_URL).")
    ] = None,
    demo_downstream: Annotated[
        bool, typer.Option(help="Start the shipped demo downstream on 127.0.0.1:8765.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Give up waiting after this many seconds.")] = 600,
) -> None:
    """Run one workflow in-process on the embedded store and print its result.

    Exit code: 0 SUCCEEDED, 1 FAILED or CANCELLED, 2 invalid workflow/input or usage,
    3 still running at --timeout.
    """
    workflows = load_workflows(files)
    target = pick_workflow(workflows, workflow)
    run_input = read_input(input)
    check_input(target, run_input)
    settings = Settings()
    if database is not None:
        settings = settings.model_copy(update={"database_url": database})
    record = asyncio.run(
        execute_run(
            workflows,
            target,
            run_input,
            settings,
            tenant=tenant,
            demo_downstream=demo_downstream,
            timeout_s=timeout,
        )
    )
    print_result(record)
    raise typer.Exit(EXIT_SUCCEEDED if record.status == "SUCCEEDED" else EXIT_FAILED)
