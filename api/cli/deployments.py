"""`schemabridge deployments start | list | show | abort | rollback` on the REST API (admin).

`start` moves a share of a workflow's new runs to a candidate version stage by stage and lets
the engine roll it back when the candidate fails more than allowed; the options map onto the
API's body (`--stages 10,50,100` are the weights, `--min-runs` and `--min-duration` hold each
stage, `--max-failure-ratio`, `--margin` and `--min-finished` the rollback policy); what is
left out takes the API's defaults. A second deployment of a workflow while one runs is exit 1
(a 409, with the running one's id), stages that cannot work exit 2, in one line each. `show`,
`abort` and `rollback` take the deployment's id or a unique prefix of it, 8 hex digits or more
(the monitor's short id: `api.cli.id_prefixes`); `abort` and `rollback` take an optional
`--reason TEXT`, recorded with who did it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from api.cli.client_errors import ApiFailure
from api.cli.deployment_display import (
    candidate_share,
    deployment_view,
    deployments_table,
    exposure_line,
    percent,
)
from api.cli.exit_codes import ExitCode
from api.cli.id_prefixes import full_deployment_id
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
    print_page,
    render,
    say,
    stdout,
)
from api.cli.run_options import CursorOption
from api.cli.target import DEFAULT_API_URL
from api.cli.text import parse_duration

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import DeploymentChange, DeploymentPreview, DeploymentView, Page

T = TypeVar("T")

MAX_LISTED = 5_000
"""The most deployments one `deployments list` shows (10 pages of the API's)."""

deployments_app = typer.Typer(
    help="Gradual deployments of workflow versions on the REST API (admin): start, list, "
    "show, abort, rollback.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
)

DEFAULT_WEIGHTS = (10.0, 25.0, 50.0, 100.0)
"""The API's default stages, used when only --min-runs or --min-duration is given."""
MAX_STAGES = 10

DeploymentArgument = Annotated[
    str,
    typer.Argument(
        help="The deployment's id, or its first 8 or more characters (as the web monitor "
        "shows it).",
        metavar="ID",
    ),
]


def parse_stages(text: str) -> list[float]:
    """`--stages 10,50,100`: the weights in percent (exit 2, in one line, for anything that is
    not 1 to 10 numbers above 0 and at most 100; their order is the API's to judge)."""
    weights: list[float] = []
    for part in text.split(","):
        try:
            weight = float(part.strip().removesuffix("%"))
        except ValueError:
            fail(
                f"--stages {text!r}: {part.strip()!r} is not a number; give the weights in "
                "percent, rising to 100, e.g. --stages 10,50,100",
                ExitCode.USAGE,
            )
        if not 0 < weight <= 100:
            fail(
                f"--stages {text!r}: {weight:g} is not a weight; each is above 0 and at most 100",
                ExitCode.USAGE,
            )
        weights.append(weight)
    if len(weights) > MAX_STAGES:
        fail(f"--stages {text!r}: at most {MAX_STAGES} stages", ExitCode.USAGE)
    return weights


def stages_body(
    stages: str | None, min_runs: int | None, min_duration: str | None
) -> list[dict[str, Any]] | None:
    """The body's `stages` (None: the API's defaults)."""
    if stages is None and min_runs is None and min_duration is None:
        return None
    weights = DEFAULT_WEIGHTS if stages is None else parse_stages(stages)
    hold: dict[str, Any] = {}
    if min_runs is not None:
        hold["minRuns"] = min_runs
    if min_duration is not None:
        try:
            hold["minDurationSeconds"] = parse_duration(min_duration)
        except ValueError as error:
            fail(f"--min-duration {error}", ExitCode.USAGE)
    return [{"weight": weight, **hold} for weight in weights]


def _one_line(failure: ApiFailure, stages: str | None) -> ApiFailure:
    """The API's refusals of a start, said the CLI's way: stages that cannot work name the
    option (one line: the message already lists every problem). A running deployment's
    commands are added by `call` (`hints.with_fix`), as for a serving switch it refuses."""
    if failure.code == "invalid_deployment":
        given = "" if stages is None else f"--stages {stages}: "
        message = failure.message.splitlines()[0]
        return ApiFailure(f"{given}{message}", ExitCode.USAGE, status=failure.status)
    return failure


@deployments_app.command("start", epilog=EXIT_CODES_HELP)
def start(
    workflow: Annotated[str, typer.Argument(help="The workflow's name.", metavar="WORKFLOW")],
    version: Annotated[
        int, typer.Option("--version", help="The candidate: a published version.", min=1)
    ],
    stages: Annotated[
        str | None,
        typer.Option(
            help="The stages' weights in percent, rising to 100 (default 10,25,50,100).",
            metavar="W,W,...",
        ),
    ] = None,
    min_runs: Annotated[
        int | None,
        typer.Option(help="Runs the candidate receives in each stage before it ends (20).", min=0),
    ] = None,
    min_duration: Annotated[
        str | None,
        typer.Option(
            help="How long each stage holds at least: a span, 60s, 5m, 1h; a bare number is "
            "seconds (60s).",
            metavar="SPAN",
        ),
    ] = None,
    max_failure_ratio: Annotated[
        float | None,
        typer.Option(
            help="Roll back over this failure ratio of the candidate (0.05).", min=0, max=1
        ),
    ] = None,
    margin: Annotated[
        float | None,
        typer.Option(
            help="Or over the serving version's own ratio plus this, if higher (none).",
            min=0,
            max=1,
        ),
    ] = None,
    min_finished: Annotated[
        int | None,
        typer.Option(help="Finished runs of the candidate before it is judged (20).", min=0),
    ] = None,
    check_interval: Annotated[
        float | None,
        typer.Option(help="Seconds between the checks of a stage (5).", min=0.1, max=300),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say what the start would do and warn about (refused alike), start nothing.",
        ),
    ] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Start a gradual deployment of a version: new runs move to it stage by stage, and it
    rolls back by itself when it fails more than allowed.

    Exit 0 started (or, with --dry-run, would start), 1 refused (another deployment of the
    workflow runs, the version is unknown or already serving), 2 stages or thresholds that
    cannot work, 4 API unreachable or key refused."""
    remote = Remote(api_url, api_key, output, debug)
    stage_list = stages_body(stages, min_runs, min_duration)
    rollback = {
        "maxFailureRatio": max_failure_ratio,
        "marginOverServing": margin,
        "minFinishedRuns": min_finished,
    }
    policy = {name: value for name, value in rollback.items() if value is not None}
    body: dict[str, Any] = {
        "stages": stage_list,
        "rollback": policy,
        "check_interval_s": check_interval,
    }
    if dry_run:
        preview = _asked(
            remote,
            workflow,
            stages,
            lambda api: api.deployments.start_preview(workflow, version, **body),
        )
        _say_preview(remote, preview)
        return
    started = _asked(
        remote, workflow, stages, lambda api: api.deployments.start(workflow, version, **body)
    )
    if remote.json:
        print_json(dump(started))
        return
    weights = " → ".join(percent(s.weight) for s in started.stages)
    weight = candidate_share(started)
    # At 100 % there is no rest to give the serving version.
    rest = (
        f"all of them: v{started.serving_version} gets none while it runs"
        if weight >= 100
        else f"v{started.serving_version} the rest"
    )
    stdout().print(
        f"deployment {started.id} started: {started.workflow} v{started.candidate_version} "
        f"gets {percent(weight)} of new runs ({rest}); stages {weights}",
        markup=False,
    )
    for warning in started.warnings:  # started, but it may not progress: say why
        say(f"warning: {warning}")
    say(f"follow it: schemabridge deployments show {started.id}")


def _asked(
    remote: Remote,
    workflow: str,
    stages: str | None,
    ask: Callable[[ApiClient], Awaitable[T]],
) -> T:
    """`ask`'s answer; a refusal in one line that names the option at fault (`_one_line`)."""

    async def action(api: ApiClient) -> T:
        try:
            return await ask(api)
        except ApiFailure as failure:
            raise _one_line(failure, stages) from None

    return call(remote, action, workflow=workflow)


def _say_preview(remote: Remote, preview: DeploymentPreview) -> None:
    """`start --dry-run`: the start's words and warnings, with nothing started."""
    if remote.json:
        print_json(dump(preview))
        return
    stdout().print(f"dry run, nothing started: {preview.summary}", markup=False)
    for warning in preview.warnings:
        say(f"warning: {warning}")


@deployments_app.command("list", epilog=EXIT_CODES_HELP)
def list_deployments(
    workflow: Annotated[
        str | None,
        typer.Argument(
            help="Only this workflow's (default: every workflow's).", metavar="WORKFLOW"
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            help=f"Show at most this many deployments, up to {MAX_LISTED:,} (the CLI reads as "
            "many pages of the API as it takes).",
            min=1,
            max=MAX_LISTED,
        ),
    ] = 20,
    cursor: CursorOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Deployments, newest first: candidate and serving version, status, stage, weight and
    the candidate's runs and failure ratio. More than --limit: the last line gives the
    --cursor that continues."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> Page[DeploymentView]:
        from api.cli.client_routes import collect_pages  # with the client: see `audit list`

        return await collect_pages(
            lambda size, after: api.deployments.list(workflow, limit=size, cursor=after),
            limit,
            cursor,
        )

    found = call(remote, action, workflow=workflow)
    empty = _no_deployments(workflow)
    print_page(remote, found, lambda items: deployments_table(items, time.time()), empty)


def _no_deployments(workflow: str | None) -> str:
    """What an empty list says: the start that would make one, of the workflow asked for; but
    the engine's own workflow is never deployed (its start is refused `system_workflow`), so
    nothing is offered for it."""
    if workflow is None:
        return "no deployments; start one: schemabridge deployments start WORKFLOW --version V"
    # Here, not at the top: the workflow models load only for the commands that need them.
    from schemas.definitions import RESERVED_WORKFLOWS

    if workflow in RESERVED_WORKFLOWS:
        return f"no deployments of {workflow}: the engine's own workflow is never deployed"
    return (
        f"no deployments of {workflow}; start one: "
        f"schemabridge deployments start {workflow} --version V"
    )


@deployments_app.command("show", epilog=EXIT_CODES_HELP)
def show(
    deployment_id: DeploymentArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A deployment: stage and weight, each version's runs and failure ratio, the exposure
    (the runs the candidate received, and the command that lists them), the figures behind a
    rollback, and the timeline of its stages."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> DeploymentView:
        return await api.deployments.get(await full_deployment_id(api, deployment_id))

    found = call(remote, action)
    if remote.json:
        print_json(dump(found))
        return
    render(stdout(), deployment_view(found, time.time()))


MAX_REASON_CHARS = 500
"""The longest reason the API takes (`engine.operations.deployments.MAX_REASON_CHARS`, which a
unit test holds this to)."""


def checked_reason(reason: str | None) -> str | None:
    """`--reason` on one line, as the deployment records it (None when it is blank), refused
    here when too long: the API's refusal would name its body's `/reason`, not the option."""
    if reason is None:
        return None
    flat = " ".join(reason.split())
    if len(flat) > MAX_REASON_CHARS:
        raise typer.BadParameter(f"{len(flat):,} characters; give at most {MAX_REASON_CHARS}")
    return flat or None


ReasonOption = Annotated[
    str | None,
    typer.Option(
        help="Why (optional): shown with who did it in the deployment's outcome and timeline, "
        f"its run's log and the API's log; at most {MAX_REASON_CHARS} characters.",
        metavar="TEXT",
        callback=checked_reason,
    ),
]


def _stopped(remote: Remote, change: DeploymentChange) -> None:
    if remote.json:
        print_json(dump(change))
        return
    stdout().print(change.message, markup=False)
    deployment = change.deployment
    # The exposure as `deployments show` words it: refused submissions are not runs.
    say(f"{exposure_line(deployment)}; details: schemabridge deployments show {deployment.id}")


@deployments_app.command("abort", epilog=EXIT_CODES_HELP)
def abort(
    deployment_id: DeploymentArgument,
    reason: ReasonOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Abort a running deployment: the candidate gets no new runs and is not promoted (runs
    already on it finish on it). Exit 0 also when it was already aborted; 1 when it ended
    otherwise."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> DeploymentChange:
        return await api.deployments.abort(await full_deployment_id(api, deployment_id), reason)

    _stopped(remote, call(remote, action))


@deployments_app.command("rollback", epilog=EXIT_CODES_HELP)
def rollback(
    deployment_id: DeploymentArgument,
    reason: ReasonOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Roll a running deployment back by hand: as abort, but it ends ROLLED_BACK with the
    figures of the moment."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> DeploymentChange:
        return await api.deployments.rollback(await full_deployment_id(api, deployment_id), reason)

    _stopped(remote, call(remote, action))
