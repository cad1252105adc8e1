"""`schemabridge runs …`: runs on the REST API — submit, list, show, logs, children, watch —
and the operator actions (`api/cli/runs_actions.py`, registered on this group).

Every command talks to the API at `--api-url` (SCHEMABRIDGE_API_URL, default the local
`schemabridge serve`) with `--api-key` (SCHEMABRIDGE_API_KEY), prints tables for people and
JSON with `--output json`, and exits with the codes of `api.cli.remote`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.core import ParameterSource

from api.cli import hints, run_display, runs_actions, runs_purge
from api.cli.exit_codes import ExitCode
from api.cli.first_contact import changed_nothing, first_answer
from api.cli.id_prefixes import full_run_id
from api.cli.key_role import opens_admin_routes
from api.cli.log_follow import read_log
from api.cli.reconnect import DEFAULT_WINDOW_S, Reconnect
from api.cli.remote import (
    EXIT_CODES_HELP,
    ApiKeyOption,
    ApiUrlOption,
    DebugOption,
    OutputFormat,
    OutputOption,
    Remote,
    call,
    dump,
    fail,
    print_json,
    print_json_line,
    print_page,
    read_json_value,
    render,
    say,
    stderr,
    stdout,
)
from api.cli.run_options import (
    ENDED,
    MAX_LIST,
    CursorOption,
    ReconnectOption,
    RouteOption,
    RunArgument,
    SinceOption,
    StatusOption,
    TenantOption,
    TimeoutOption,
    UntilOption,
    VersionOption,
    WorkflowOption,
    checked_status,
    run_filter,
    split_version,
)
from api.cli.target import DEFAULT_API_URL
from api.cli.watch import StillRunning, follow, outcome_code, outcome_line, still_running_line

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import Page, RunDetail, RunSummary, SubmitResult

runs_app = typer.Typer(
    help="Runs on the REST API: submit, list, show, logs, children, watch, and the operator "
    "actions (retry, resolve, start-over, reprocess, cancel).",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
)

# ── submit ──────────────────────────────────────────────────────────────────────────────────


@runs_app.command("submit", epilog=EXIT_CODES_HELP)
def submit(
    ctx: typer.Context,
    workflow: Annotated[
        str, typer.Argument(help="The workflow's name, or NAME@VERSION.", metavar="WORKFLOW")
    ],
    input: Annotated[
        str | None,
        typer.Option("--input", help="The run's input: JSON text or @file.json.", metavar="JSON"),
    ] = None,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            help="The version to run (as NAME@VERSION); default: the serving version, as a "
            "running deployment routes it.",
            metavar="N",
            min=1,
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(help="The tenant the run is for (default: default).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Submitting the same key and request again answers the same run."),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow the run until it ends; exit by its outcome. The run is an ordinary "
            "one (its calls time out by the process tier, 30 s, or for a fan-out the collect "
            "tier, 60 s), not REST's ?wait=true, whose calls must fit the gateway tier (15 s).",
        ),
    ] = False,
    timeout: TimeoutOption = 600.0,
    reconnect_for: ReconnectOption = DEFAULT_WINDOW_S,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Start a run of a published workflow.

    Prints the run's id (with --wait: follows it and prints its output, or its error).
    Exit 0 submitted (with --wait: SUCCEEDED), 1 FAILED or CANCELLED or refused, 2 bad
    input, 3 still running at --timeout, 4 API unreachable or key refused."""
    if not wait and ctx.get_parameter_source("timeout") is ParameterSource.COMMANDLINE:
        # Without --wait the command returns once the run is submitted: a timeout would be
        # silently ignored, and the user meant to wait.
        raise typer.BadParameter("only bounds --wait; add --wait", param_hint="--timeout")
    remote = Remote(api_url, api_key, output, debug)
    name, pinned = split_version(workflow)
    if version is not None and pinned is not None and version != pinned:
        fail(f"{workflow} and --version {version} disagree", ExitCode.USAGE)
    version = version if version is not None else pinned
    run_input = {} if input is None else read_json_value(input, "--input")
    following: list[str] = []  # the run, once submitted (what Ctrl-C says goes on)

    reconnect = Reconnect(window_s=reconnect_for)

    async def send(api: ApiClient) -> SubmitResult:
        return await api.runs.submit(
            name, run_input, tenant=tenant, version=version, idempotency_key=idempotency_key
        )

    async def action(api: ApiClient) -> ExitCode:
        if wait:
            # A follower waits for an API not there yet (as `runs watch` does), sending the
            # submission again only where that cannot start a second run.
            repeatable = (lambda _: True) if idempotency_key is not None else changed_nothing
            submitted = await first_answer(reconnect, lambda: send(api), repeatable)
        else:
            submitted = await send(api)
        run = submitted.run
        following.append(run.id)
        if not wait:
            if remote.json:
                print_json(dump(submitted))
            elif submitted.created:
                stdout().print(
                    f"run {run.id} submitted ({run_display.submitted_as(run)}, "
                    f"tenant {run.tenant_id})",
                    markup=False,
                )
                say(f"follow it: schemabridge runs watch {run.id}")
            else:
                stdout().print(
                    f"run {run.id} was submitted before with this idempotency key "
                    f"(it is {run.status})",
                    markup=False,
                )
            return ExitCode.OK
        say(f"run {run.id} submitted ({run_display.submitted_as(run)}); following it")
        return await _wait_for(api, remote, run.id, timeout, reconnect)

    code = call(remote, action, workflow=name, following=lambda: next(iter(following), None))
    raise typer.Exit(code)


async def _wait_for(
    api: ApiClient, remote: Remote, run_id: str, timeout_s: float | None, reconnect: Reconnect
) -> ExitCode:
    try:
        progress = await follow(
            api,
            run_id,
            timeout_s=timeout_s,
            console=stderr(),
            title=f"run {run_id}",
            reconnect=reconnect,
        )
    except StillRunning as still:
        say(still_running_line(run_id, timeout_s or 0, still.progress))
        if remote.json:
            # A script reads the run (its id first) from stdout whatever the outcome: a run
            # still going at --timeout is the one case that printed nothing there.
            print_json(dump(await api.runs.get(run_id)))
        return ExitCode.STILL_RUNNING
    detail = await api.runs.get(run_id)
    if remote.json:
        print_json(dump(detail))
    else:
        say(outcome_line(run_id, progress))
        if detail.status == "SUCCEEDED":
            print_json(detail.output)
        else:
            _explain_failure(detail)
    return outcome_code(progress)


def _explain_failure(detail: RunDetail) -> None:
    errors = stderr()
    for step in detail.steps:
        if step.status == "FAILED":
            render(errors, run_display.failed_step(step))
    for hint in run_display.next_commands(detail):
        errors.print(f"next: {hint}", markup=False)


# ── list ────────────────────────────────────────────────────────────────────────────────────


@runs_app.command("list", epilog=EXIT_CODES_HELP)
def list_runs(
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    route: RouteOption = None,
    tenant: TenantOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[
        int,
        typer.Option(
            help=f"Show at most this many runs, up to {MAX_LIST:,}: the CLI reads as many "
            "pages of the API (GET /runs?limit= takes at most 500) as it takes.",
            min=1,
            max=MAX_LIST,
        ),
    ] = 50,
    all_runs: Annotated[
        bool,
        typer.Option("--all", help="Child runs too (by default only runs no spawner started)."),
    ] = False,
    cursor: CursorOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """List runs, newest first (root runs unless --all).

    More runs than --limit: the last line gives the --cursor that continues the list."""
    remote = Remote(api_url, api_key, output, debug)
    selection = run_filter(
        status=status,
        workflow=workflow,
        tenant=tenant,
        since=since,
        until=until,
        roots_only=not all_runs,
        version=version,
        route=route,
    )

    unknown_tenant: list[str] = []

    async def action(api: ApiClient) -> Page[RunSummary]:
        from api.cli.client_routes import collect_pages  # with the client: see call()

        found = await collect_pages(
            lambda size, after: api.runs.list(selection, limit=size, cursor=after), limit, cursor
        )
        if not found.items and selection.workflow:
            await hints.require_workflow(api, selection.workflow)
        if not found.items and selection.tenant:
            unknown_tenant.extend(await hints.unknown_tenant(api, selection.tenant))
        return found

    # The engine's own runs are listed too: a typo's fix may name gradual_deploy.
    runs = call(remote, action, workflow=selection.workflow, system_workflows=True)
    empty = "no runs" + ("" if all_runs else " (child runs are shown with --all)")
    empty = "; ".join([empty, *unknown_tenant])
    print_page(remote, runs, lambda items: run_display.runs_table(items, time.time()), empty)


# ── show ────────────────────────────────────────────────────────────────────────────────────


@runs_app.command("show", epilog=EXIT_CODES_HELP)
def show_run(
    run_id: RunArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A run: its steps with status and attempts, fan-out progress, and the failed step's
    kind, HTTP status, body excerpt and attempt history."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> tuple[RunDetail, bool]:
        detail = await api.runs.get(await full_run_id(api, run_id))
        # Asked only of a run that names a deployment (the others print the same for every
        # key): a tenant key is shown its id, not a command the API refuses it.
        opens = detail.deployment_id is None or remote.json or await opens_admin_routes(api)
        return detail, opens

    detail, opens_deployments = call(remote, action)
    if remote.json:
        print_json(dump(detail))
        return
    render(stdout(), run_display.run_view(detail, time.time(), opens_deployments=opens_deployments))


# ── logs ────────────────────────────────────────────────────────────────────────────────────


@runs_app.command("logs", epilog=EXIT_CODES_HELP)
def logs(
    run_id: RunArgument,
    follow_log: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends.")
    ] = False,
    reconnect_for: ReconnectOption = DEFAULT_WINDOW_S,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A run's log, oldest first (with --output json: one JSON object a line)."""
    remote = Remote(api_url, api_key, output, debug)
    console = stdout()

    def emit(entries: list[Any]) -> None:
        for entry in entries:
            if remote.json:
                print_json_line(dump(entry))
            else:
                console.print(run_display.log_line(entry), markup=False)

    async def action(api: ApiClient) -> None:
        run = await full_run_id(api, run_id)
        reconnect = Reconnect(window_s=reconnect_for)
        await read_log(api, run, emit, follow=follow_log, reconnect=reconnect)

    call(remote, action)


# ── children ────────────────────────────────────────────────────────────────────────────────


@runs_app.command("children", epilog=EXIT_CODES_HELP)
def children(
    run_id: RunArgument,
    status: StatusOption = None,
    limit: Annotated[
        int, typer.Option(help="Show at most this many children.", min=1, max=MAX_LIST)
    ] = 100,
    cursor: CursorOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A run's child runs (one per SPAWNER item), in item order."""
    remote = Remote(api_url, api_key, output, debug)
    wanted = checked_status(status)

    async def action(api: ApiClient) -> Page[RunSummary]:
        from api.cli.client_routes import collect_pages  # with the client: see call()

        run = await full_run_id(api, run_id)
        return await collect_pages(
            lambda size, after: api.runs.children(run, status=wanted, limit=size, cursor=after),
            limit,
            cursor,
        )

    found = call(remote, action)
    empty = f"run {run_id} has no children" + (f" in status {wanted}" if wanted else "")
    print_page(remote, found, lambda items: run_display.children_table(items, time.time()), empty)


# ── watch ───────────────────────────────────────────────────────────────────────────────────


@runs_app.command("watch", epilog=EXIT_CODES_HELP)
def watch(
    run_id: RunArgument,
    timeout: TimeoutOption = None,
    reconnect_for: ReconnectOption = DEFAULT_WINDOW_S,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Follow a run live (the API's event stream) until it ends.

    Exit 0 SUCCEEDED, 1 FAILED or CANCELLED, 3 still running at --timeout (the run goes
    on), 4 API unreachable or key refused."""
    remote = Remote(api_url, api_key, output, debug)
    following: list[str] = []  # the run's whole id, once resolved (what Ctrl-C says goes on)

    async def action(api: ApiClient) -> ExitCode:
        reconnect = Reconnect(window_s=reconnect_for)

        async def read_run() -> RunDetail:
            return await api.runs.get(await full_run_id(api, run_id))

        # an unknown run is one line before any display; an API not there yet is waited for
        run = await first_answer(reconnect, read_run)
        following.append(run.id)
        if run.status in ENDED and not remote.json:
            stdout().print(f"run {run.id} has already ended", markup=False)
        title = f"run {run.id} ({run.workflow} v{run.version})"
        console = stdout()
        try:
            progress = await follow(
                api,
                run.id,
                timeout_s=timeout,
                console=console,
                title=title,
                quiet=remote.json,
                reconnect=reconnect,
            )
        except StillRunning as still:
            say(still_running_line(run.id, timeout or 0, still.progress))
            return ExitCode.STILL_RUNNING
        if remote.json:
            print_json(dump(progress))
        else:
            console.print(outcome_line(run.id, progress), markup=False)
            if progress.status == "FAILED":
                say(f"details: schemabridge runs show {run.id}")
        return outcome_code(progress)

    raise typer.Exit(call(remote, action, following=lambda: next(iter(following), run_id)))


# ── operator actions (api/cli/runs_actions.py) ──────────────────────────────────────────────

runs_app.command("retry", epilog=EXIT_CODES_HELP)(runs_actions.retry)
runs_app.command("resolve", epilog=EXIT_CODES_HELP)(runs_actions.resolve)
runs_app.command("start-over", epilog=EXIT_CODES_HELP)(runs_actions.start_over)
runs_app.command("reprocess", epilog=EXIT_CODES_HELP)(runs_actions.reprocess)
runs_app.command("cancel", epilog=EXIT_CODES_HELP)(runs_actions.cancel)
runs_app.command("purge")(runs_purge.purge)  # on the database directly: its own exit codes
