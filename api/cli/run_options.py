"""What the `runs` commands share: the RUN argument, the status, timeout and filter options,
and turning them into the API's run filter (exit 2 for a value out of place)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.exit_codes import ExitCode
from api.cli.reconnect import RESTART_WINDOW_S
from api.cli.remote import fail
from api.cli.text import parse_since
from schemas.close_names import typo_clause
from schemas.durations import duration

if TYPE_CHECKING:
    from api.cli.wire import RunQuery

MAX_LIST = 10_000
"""The most rows one list command prints."""
STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
"""The statuses a run can be in: runs are created RUNNING (none is ever PENDING)."""
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
"""The statuses a run does not leave by itself."""

RunArgument = Annotated[
    str,
    typer.Argument(
        help="The run's id, or its first 8 or more characters (as the web monitor shows it).",
        metavar="RUN",
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        help="Stop waiting after this many seconds (exit 3; the run goes on).",
        metavar="SECONDS",
        min=0,
    ),
]
ReconnectOption = Annotated[
    float,
    typer.Option(
        "--reconnect-for",
        help="When the API goes away while following (a restart, a 5xx, a dropped stream), "
        "keep trying to get it back for this many seconds, then give up (exit 4). An API "
        f"that said it is stopping (a rolling restart) is waited for at least "
        f"{duration(RESTART_WINDOW_S)}.",
        metavar="SECONDS",
        min=0,
    ),
]
StatusOption = Annotated[
    str | None,
    typer.Option(help=f"Only runs in this status ({', '.join(STATUSES)}).", metavar="STATUS"),
]
WorkflowOption = Annotated[
    str | None,
    typer.Option(help="Only runs of this workflow (NAME or NAME@VERSION).", metavar="WORKFLOW"),
]
TenantOption = Annotated[str | None, typer.Option(help="Only runs of this tenant.")]
SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Only runs created since: a span (90s, 15m, 2h, 3d, 1w) or an ISO date or time.",
        metavar="WHEN",
    ),
]
UntilOption = Annotated[
    str | None,
    typer.Option(
        help="Only runs created before: a span back from now (90s, 15m, 2h) or an ISO date or "
        "time (exclusive; with --since, a window such as a deployment's).",
        metavar="WHEN",
    ),
]
VersionOption = Annotated[
    int | None,
    typer.Option(help="Only runs of this version of --workflow.", metavar="V", min=1),
]
RouteOption = Annotated[
    str | None,
    typer.Option(
        help="Only runs whose version was chosen so: serving, candidate (a deployment's "
        "share), pinned (the submission named it), system or start_over.",
        metavar="ROUTE",
    ),
]
CursorOption = Annotated[
    str | None, typer.Option(help="Continue a previous list where it stopped.")
]


def split_version(workflow: str) -> tuple[str, int | None]:
    """`NAME` or `NAME@VERSION` (exit 2 for a version that is not a positive number)."""
    name, at, version = workflow.partition("@")
    if not at:
        return name, None
    if not version.isdigit() or int(version) < 1:
        fail(f"{workflow!r}: the version after @ must be a number from 1", ExitCode.USAGE)
    return name, int(version)


def checked_status(value: str | None) -> str | None:
    """A run status in capitals (exit 2 for one that does not exist)."""
    if value is None:
        return None
    upper = value.upper()
    if upper not in STATUSES:
        typo = typo_clause(upper, STATUSES)
        fail(f"unknown status {value!r}{typo}; one of {', '.join(STATUSES)}", ExitCode.USAGE)
    return upper


ROUTES = ("serving", "candidate", "pinned", "system", "start_over")
"""How a run got its version (the API's `route`)."""


def run_filter(
    *,
    status: str | None,
    workflow: str | None,
    tenant: str | None,
    since: str | None,
    roots_only: bool,
    version: int | None = None,
    route: str | None = None,
    until: str | None = None,
) -> RunQuery:
    """The filter the list and batch options describe (exit 2 for a `version` without a
    workflow, or one that contradicts NAME@VERSION, for an unknown `route`, and for a
    `since` later than `until`)."""
    from api.cli.wire import RunQuery

    name, pinned = split_version(workflow) if workflow else (None, None)
    if version is not None and name is None:
        fail("--version needs --workflow (a version belongs to one workflow)", ExitCode.USAGE)
    if version is not None and pinned is not None and version != pinned:
        fail(f"--workflow {workflow} and --version {version} disagree", ExitCode.USAGE)
    version = version if version is not None else pinned
    if route is not None and route.lower() not in ROUTES:
        typo = typo_clause(route.lower(), ROUTES)
        fail(f"unknown route {route!r}{typo}; one of {', '.join(ROUTES)}", ExitCode.USAGE)
    created_after = _moment("--since", since)
    created_before = _moment("--until", until)
    if created_after is not None and created_before is not None and created_after > created_before:
        # Said in the options' words, as the API would refuse the window in its parameters'.
        fail(
            f"--since {since} is later than --until {until}: no run is created in between; "
            "were they swapped? --since is the window's start, --until its end",
            ExitCode.USAGE,
        )
    return RunQuery(
        workflow=name,
        version=version,
        status=checked_status(status),
        tenant=tenant,
        created_after=created_after,
        created_before=created_before,
        roots_only=roots_only,
        route=None if route is None else route.lower(),
    )


def _moment(option: str, value: str | None) -> float | None:
    """`--since` or `--until` as epoch seconds (exit 2, in one line, for what is neither a span
    nor an ISO date or time)."""
    if value is None:
        return None
    try:
        return parse_since(value, time.time())
    except ValueError as error:
        fail(f"{option} {error}", ExitCode.USAGE)
