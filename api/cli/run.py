"""`schemabridge run`: execute one workflow in-process with a live progress display.

It publishes the workflows given, submits the run through the operations layer and runs one
worker in this process until the run ends, on `SCHEMABRIDGE_DATABASE_URL` (or `--database`):
the SQLite file by default, or PostgreSQL, where workers of other processes share the work.
The display says why work waits (`api.cli.run_live_display`). The run is durable: at `--timeout`
or on Ctrl-C the command stops, gives its in-flight steps' claims back to the store at once
(another worker, or a later start, runs them without waiting for a lease to expire) and says
how to follow the run, which goes on wherever a worker runs.

Exit codes: 0 SUCCEEDED, 1 FAILED or CANCELLED, 2 invalid workflow, input or settings, 3 still
running at `--timeout`, 4 the database or Redis does not answer, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

# Heavy modules (the runtime: SQLAlchemy, aiohttp, Redis clients) are imported inside the
# commands that need them, so `schemabridge --help` and `validate` start fast.
import asyncio
import contextlib
import dataclasses
import json
import shlex
import signal
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.live import Live

from api.cli import demo_address, log_setup, run_live_display, usage
from api.cli.database_option import DatabaseOption
from api.cli.direct import cli_actor
from api.cli.exit_codes import EXIT_FOR_REFUSAL, ExitCode
from api.cli.problem_text import problem_line, split_first
from api.cli.remote import read_json_value
from api.cli.usage import fail
from schemas.close_names import close_names, did_you_mean
from schemas.errors import DefinitionError, OperationError, Refusal

if TYPE_CHECKING:
    from engine.operations import Operations
    from engine.operations.views import RunDetail, RunSummary
    from engine.runtime import Runtime
    from engine.settings import Settings
    from schemas.definitions import Workflow
    from schemas.errors import Problem

console = usage.stderr()

POLL_S = 0.5
"""How often the display reads the run's progress."""
STORE_RETRY_S = 2.0
"""How often a display that lost the database tries again."""


class OutputFormat(StrEnum):
    TEXT = "text"
    """A screenful: `text`, as every other command calls its output for people."""
    JSON = "json"
    SUMMARY = "summary"
    """`text`'s name before it was `text`, still taken so that scripts keep working."""


@dataclass(frozen=True)
class Stopped:
    """The watch ended before the run did: why (`timeout` or `interrupt`)."""

    why: str


def read_files(files: list[Path], runs_commands: Collection[str] = ()) -> list[tuple[str, bytes]]:
    """Each file's name and bytes, read once (a file may be a pipe: `/dev/stdin`). A first
    file that does not exist and is named as one of `runs_commands` is `runs` typed as `run`
    (`schemabridge run list`): the fix is that command, not a path."""
    documents: list[tuple[str, bytes]] = []
    for index, path in enumerate(files):
        try:
            documents.append((str(path), path.read_bytes()))
        except OSError as exc:
            if index == 0 and str(path) in runs_commands and not path.exists():
                meant = shlex.join(["schemabridge", "runs", *map(str, files)])
                raise fail(f"there is no workflow file `{path}`; did you mean `{meant}`?") from None
            raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
    return documents


def runs_commands(ctx: typer.Context) -> set[str]:
    """The names of the `runs` group's commands (`list`, `show`, `retry`, …), read from the
    command line's own tree so that a new one is known without a list kept here."""
    root = ctx.find_root().command
    runs = getattr(root, "commands", {}).get("runs")
    return set(getattr(runs, "commands", {}))


def load_workflows(
    documents: list[tuple[str, bytes]],
    downstream_url: str | None = None,
    published: Collection[str] = (),
) -> list[Workflow]:
    """Parse the files' `documents`; with `downstream_url`, the examples' demo downstream URL
    is replaced by it. A SPAWNER may start a workflow named in `published` that no file holds
    (`published_elsewhere` finds it in the database)."""
    if downstream_url is not None:
        placeholder, url = demo_address.EXAMPLES_URL.encode(), downstream_url.encode()
        documents = [(name, data.replace(placeholder, url)) for name, data in documents]
    # Here, not at the top: validation loads networkx and jsonschema, which `--help` and the
    # other commands need not pay for.
    from engine.validation import parse_documents

    try:
        return parse_documents(documents, known_workflows=published)
    except DefinitionError as exc:
        raise _problems("the workflow files", exc.problems) from None


def children_outside(documents: list[tuple[str, bytes]]) -> set[str]:
    """The workflows the files' SPAWNERs start that the files may not hold: checking the files
    before the database opens takes them as published, and `published_elsewhere` then looks
    for the ones no file holds where the worker will, in the database."""
    from engine.validation import spawned_workflows

    return spawned_workflows(documents)


async def published_elsewhere(
    runtime: Runtime, workflows: Sequence[Workflow], outside: Collection[str]
) -> None:
    """Each workflow in `outside` (started by a SPAWNER of the files, held by none) is
    published in the runtime's database, where the run's children get its serving version as
    they would on any worker; else one line naming them, the database and the fix."""
    if not outside:
        return
    from engine.operations import Operations
    from engine.operations.startup import mask_url
    from schemas.definitions import SpawnerVertex

    stored = {w.name for w in await Operations(runtime).workflows.list(system=True)}
    missing = sorted(set(outside) - stored)
    if not missing:
        return
    starters: dict[str, str] = {}
    for workflow in workflows:
        for vertex_id, vertex in workflow.vertices.items():
            if not isinstance(vertex, SpawnerVertex):
                continue
            child = vertex.config.workflow.split("@")[0]
            if child in missing and child not in starters:
                starters[child] = f"SPAWNER {vertex_id!r} of {workflow.name!r}"
    which = "; ".join(f"{name!r} (started by {starters[name]})" for name in missing)
    where = mask_url(runtime.settings.database_url)
    raise fail(
        f"no file given holds workflow {which}, and it is not published in {where}: "
        "give its file too (`schemabridge run PARENT.json CHILD.json`), or name with "
        "--database the database it is published in"
    )


def _problems(what: str, problems: Sequence[Problem], where: str = "") -> typer.Exit:
    """One `error:` line saying how many problems `what` has, then one line each with its
    JSON pointer (as a 422 from the API prints); the `Exit` to raise."""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    console.print(f"[red]error:[/red] {count} in {what}; fix them and run again")
    for problem in problems:
        line = problem_line(problem.pointer, problem.message, problem.code, where or problem.source)
        console.print(line, markup=False, highlight=False)
    return typer.Exit(ExitCode.USAGE)


def _by_workflow(problems: Sequence[Problem], workflows: Sequence[Workflow]) -> list[Problem]:
    """Publication's problems point into the list of documents published (`/0/vertices/…`):
    name the workflow instead, as the files do."""
    named: list[Problem] = []
    for problem in problems:
        index, rest = split_first(problem.pointer)
        if index.isdigit() and int(index) < len(workflows):
            name = workflows[int(index)].name
            named.append(dataclasses.replace(problem, source=name, pointer=rest))
        else:
            named.append(problem)
    return named


def pick_workflow(workflows: list[Workflow], name: str | None) -> Workflow:
    """The named workflow, or the only one no spawner starts as a child."""
    # Here, not at the top: the workflow models take ~10 ms to build, which every other
    # command would pay at start-up.
    from schemas.definitions import SpawnerVertex

    names = ", ".join(w.name for w in workflows)
    if name is not None:
        for workflow in workflows:
            if workflow.name == name:
                return workflow
        close = close_names(name, [w.name for w in workflows])[:1]
        meant = f"{did_you_mean(close)} " if close else ""
        raise fail(f"no workflow named {name!r} in the files given; {meant}they hold: {names}")
    children = {
        v.config.workflow.split("@")[0]
        for w in workflows
        for v in w.vertices.values()
        if isinstance(v, SpawnerVertex)
    }
    roots = [w for w in workflows if w.name not in children]
    if len(roots) != 1:
        found = ", ".join(w.name for w in roots) or "none"
        raise fail(f"several workflows could run ({found}); choose one with --workflow")
    return roots[0]


def check_input(workflow: Workflow, run_input: Any) -> None:
    """The run input against the workflow's inputSchema (the validator's own check)."""
    from engine.validation import validate_input

    problems = validate_input(workflow, run_input)
    if problems:
        raise _problems(f"the input (the inputSchema of {workflow.name})", problems, "input")


@contextlib.asynccontextmanager
async def started_downstream(
    runtime: Runtime,
    workflows: Sequence[Workflow],
    enabled: bool,
    port: int | None,
    published_children: Sequence[str] = (),
) -> AsyncIterator[str | None]:
    """The shipped demo downstream on loopback, or nothing: on `port` (0: a free one) when
    given, else where the latest published versions of the `workflows` that call it already
    call it, when that port is free (the documents are then those published, so no new version
    is made), else on a free port. The `published_children` (no file holds them) come first:
    their published documents cannot follow the downstream to another port, the files can."""
    if not enabled:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        if port is None:
            names = [*published_children, *(w.name for w in workflows if _calls_demo(w))]
            preferred = await demo_address.remembered_port(runtime, names)
            url = await stack.enter_async_context(demo_address.started(preferred, "workflows"))
        else:
            url = await stack.enter_async_context(demo_address.on_port(port, fail))
        # All of loopback is opened (Settings.allowing_loopback), not the downstream's port
        # alone: a workflow run here may call any local service. Said as `serve --demo` says it.
        # The URL stays followed by a space, as scripts (and the tests) read it.
        console.print(
            f"demo downstream listening on {url} (egress to all of loopback, 127.0.0.0/8, "
            "::1 and localhost, is allowed in this process, not just to it; other internal "
            "addresses stay refused)"
        )
        yield url


def _calls_demo(workflow: Workflow) -> bool:
    """Whether the file's workflow calls the demo downstream where the examples do."""
    document = workflow.model_dump(mode="json", by_alias=True, exclude_none=True)
    return demo_address.EXAMPLES_URL in json.dumps(document)


async def _read(ops: Operations, live: run_live_display.LiveView, run_id: str) -> bool:
    """One progress read into the display; False once the run has ended. While the database
    does not answer, the display says so and the watch goes on (the worker rides it out)."""
    try:
        current = await ops.runs.progress(run_id)
    except OperationError as error:
        if error.refusal is not Refusal.UNAVAILABLE:
            raise
        live.note([f"{error.message} (the run goes on; trying again every {STORE_RETRY_S:g} s)"])
        await asyncio.sleep(STORE_RETRY_S - POLL_S)
        return True
    live.show(current)
    return not current.ended


async def watch(
    ops: Operations, target: Workflow, run_id: str, timeout_s: float, interrupted: asyncio.Event
) -> Stopped | None:
    """Show the run until it ends (None), `timeout_s` passes or Ctrl-C."""
    live = run_live_display.LiveView(target.name, len(target.vertices))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    shows = usage.stderr(soft_wrap=False)
    with contextlib.ExitStack() as stack:
        if not shows.is_terminal:
            # Rich ends a live display's last frame without a newline when it is not drawing
            # on a terminal: end it, so the next message starts a line of its own.
            stack.callback(shows.line)
        shown = stack.enter_context(
            Live(live.renderable(), console=shows, refresh_per_second=4, transient=False)
        )
        while True:
            going = await _read(ops, live, run_id)
            shown.update(live.renderable())
            if not going:
                return None
            if interrupted.is_set():
                return Stopped("interrupt")
            if loop.time() >= deadline:
                return Stopped("timeout")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(interrupted.wait(), min(POLL_S, deadline - loop.time()))


async def _final(ops: Operations, run_id: str) -> tuple[RunDetail, list[RunSummary]]:
    """The ended run and its first failed children, read again until the database answers."""
    for _ in range(60):
        try:
            run = await ops.runs.get(run_id)
            failed: list[RunSummary] = []
            if run.fanout.failed:
                page = await ops.runs.children(
                    run_id, status="FAILED", limit=run_live_display.FIRST_FAILURES
                )
                failed = list(page.items)
            return run, failed
        except OperationError as error:
            if error.refusal is not Refusal.UNAVAILABLE:
                raise
            await asyncio.sleep(STORE_RETRY_S)
    raise OperationError("the database did not answer for 2 minutes", code="store_unavailable")


@contextlib.contextmanager
def _interrupts(event: asyncio.Event) -> Any:
    """Ctrl-C sets `event` (the watch stops and the worker gives its claims back); a second
    Ctrl-C ends the process the ordinary way."""
    loop = asyncio.get_running_loop()

    def first() -> None:
        event.set()
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, first)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def execute_run(
    runtime: Runtime,
    workflows: list[Workflow],
    target: Workflow,
    run_input: Any,
    opts: RunOptions,
) -> tuple[str, RunDetail | Stopped, list[RunSummary]]:
    """Publish, submit, run a worker and watch until the run ends or the watch stops."""
    from engine.operations import Operations
    from engine.runtime import settle_heap

    settle_heap()
    interrupted = asyncio.Event()
    ops = Operations(runtime)
    documents = [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows]
    try:
        # What the files say runs: the run is pinned to the versions just published, its
        # children's too, and what serves for other clients stays as it was.
        published = {
            p.name: p.version for p in await ops.workflows.publish(documents, actor=cli_actor())
        }
        run = (
            await ops.runs.submit(
                target.name,
                run_input,
                tenant_id=opts.tenant,
                version=published[target.name],
                child_versions=published,
                actor=cli_actor(),
            )
        ).run
    except DefinitionError as error:  # what only publication checks (the egress policy)
        raise _problems("the workflows", _by_workflow(error.problems, workflows)) from None
    except OperationError as error:
        if error.refusal is Refusal.UNAVAILABLE:
            raise
        usage.show_traceback(error)
        raise fail(error.message) from None
    console.print(f"run {run.id} ({target.name} v{run.version})")
    worker = runtime.worker()
    stop = asyncio.Event()
    stopped: Stopped | None = None
    with _interrupts(interrupted):
        async with asyncio.TaskGroup() as group:
            group.create_task(worker.run(stop), name="worker")
            try:
                stopped = await watch(ops, target, run.id, opts.timeout_s, interrupted)
            finally:
                if interrupted.is_set() or stopped is not None:
                    worker.hurry()  # the prompt back now; claims given back, not expired
                stop.set()
    if stopped is not None:
        return run.id, stopped, []
    detail, failed = await _final(ops, run.id)
    return run.id, detail, failed


@dataclass(frozen=True)
class RunOptions:
    tenant: str
    timeout_s: float


def _goes_on(run_id: str, settings: Settings, why: Stopped) -> str:
    from engine.operations.startup import mask_url

    where = mask_url(settings.database_url)
    first = (
        "interrupted" if why.why == "interrupt" else "still running at --timeout"
    ) + f": run {run_id} goes on in {where}"
    return (
        f"{first}; its in-flight steps were handed back. Follow it with "
        f"`schemabridge runs watch {run_id}` against a `schemabridge serve` (or `api` and "
        "`worker`) on that database; a worker there carries it on."
    )


def run(
    ctx: typer.Context,
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE", help="Workflow files (parent and children).")
    ],
    workflow: Annotated[
        str | None, typer.Option(metavar="NAME", help="Which workflow of the files to run.")
    ] = None,
    input: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON|@FILE", help="Run input: JSON text or @file.json."),
    ] = None,
    tenant: Annotated[
        str, typer.Option(metavar="TENANT", help="Tenant id of the run.")
    ] = "default",
    tenant_rate: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="GATEWAY steps a minute a tenant may start in this process (default "
            "SCHEMABRIDGE_TENANT_RATE_PER_MINUTE, 1000; a rate set with `tenants set-rate` "
            "still wins).",
        ),
    ] = None,
    database: DatabaseOption = None,
    demo_downstream: Annotated[
        bool,
        typer.Option(
            "--demo-downstream",
            help="Start the shipped demo downstream in-process (the examples call it).",
        ),
    ] = False,
    demo_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            metavar="PORT",
            help="Port of the demo downstream (0: a free one). Default: the port the "
            "workflows' published versions call, when free (no new version), else a free one.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Stop watching after this long.")
    ] = 600,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output",
            "-o",
            case_sensitive=False,
            metavar="text|json",
            help="text (a screenful) or json (the whole run, for scripts).",
        ),
    ] = OutputFormat.TEXT,
    log_level: Annotated[
        log_setup.Level, typer.Option(case_sensitive=False, help="Least level logged.")
    ] = log_setup.Level.WARNING,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            callback=usage.debug_given,
            help="Print a traceback when something fails, and every log line "
            "(as `schemabridge --debug run` does).",
        ),
    ] = False,
) -> None:
    """Run one workflow in this process and print its result.

    Uses SCHEMABRIDGE_DATABASE_URL (or --database): an SQLite file by default, or PostgreSQL
    (with SCHEMABRIDGE_REDIS_URL, workers of other processes share the run). Shows progress
    and why work waits. At --timeout or on Ctrl-C the run goes on in the store.

    Exit code: 0 SUCCEEDED, 1 FAILED or CANCELLED, 2 invalid workflow, input or settings,
    3 still running at --timeout, 4 database or Redis unreachable, 130 interrupted.
    """
    from api.cli.environment import load_settings
    from schemas.definitions import RESERVED_WORKFLOWS

    log_setup.configure("run", level=log_level, debug=usage.OPTIONS.debug)
    settings = load_settings()
    updates: dict[str, Any] = {}
    if database is not None:
        updates["database_url"] = database
    if tenant_rate is not None:
        updates["tenant_rate_per_minute"] = tenant_rate
    settings = settings.model_copy(update=updates)
    if demo_downstream:
        settings = settings.allowing_loopback()
    run_input = {} if input is None else read_json_value(input, "--input")
    options = RunOptions(tenant=tenant, timeout_s=timeout)
    # Files and input are checked before anything starts, so a mistake in them is the only
    # thing said.
    documents = read_files(files, runs_commands(ctx))
    spawned = children_outside(documents)
    workflows = load_workflows(documents, published=spawned)
    target = pick_workflow(workflows, workflow)
    check_input(target, run_input)
    outside = spawned - {w.name for w in workflows} - RESERVED_WORKFLOWS

    async def go() -> tuple[str, RunDetail | Stopped, list[RunSummary]]:
        from engine.operations.startup import open_runtime

        runtime = await open_runtime(settings)
        try:
            await published_elsewhere(runtime, workflows, outside)
            async with started_downstream(
                runtime, workflows, demo_downstream, demo_port, sorted(outside)
            ) as url:
                calling = workflows if url is None else load_workflows(documents, url, spawned)
                chosen = pick_workflow(calling, target.name)
                return await execute_run(runtime, calling, chosen, run_input, options)
        finally:
            await runtime.close()

    try:
        run_id, outcome, failed = asyncio.run(go())
    except (typer.Exit, KeyboardInterrupt):
        raise
    except BaseException as error:
        _refuse(error, settings, "--database" if database is not None else None)
        raise
    if isinstance(outcome, Stopped):
        console.print(f"[yellow]{_goes_on(run_id, settings, outcome)}[/yellow]")
        raise typer.Exit(
            ExitCode.INTERRUPTED if outcome.why == "interrupt" else ExitCode.STILL_RUNNING
        )
    if output is OutputFormat.JSON:
        print(run_live_display.as_json(outcome), flush=True)
    else:
        print(run_live_display.summary(outcome, failed), flush=True)
    raise typer.Exit(ExitCode.OK if outcome.status == "SUCCEEDED" else ExitCode.FAILED)


def _refuse(error: BaseException, settings: Settings, database_from: str | None) -> None:
    """A database or Redis problem of these settings (or a typer.Exit inside a task group)
    is one line and its exit code; anything else goes on to `usage.report`.
    `database_from`: the option that gave the database URL, named instead of the variable."""
    from engine.operations.startup import explain

    for leaf in error.exceptions if isinstance(error, BaseExceptionGroup) else [error]:
        if isinstance(leaf, typer.Exit):
            raise leaf from None
    refused = explain(error, settings)
    if refused is not None:
        usage.show_traceback(error)
        message = refused.message
        if database_from is not None:
            message = message.replace("SCHEMABRIDGE_DATABASE_URL", database_from)
        raise fail(message, EXIT_FOR_REFUSAL[refused.refusal]) from None
