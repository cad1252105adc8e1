"""`schemabridge runs purge --ended-before DURATION|TIME [--dry-run]`: delete now (or count)
the root runs that ended before a moment, with their whole tree: child runs, steps, log lines
and payload chunks (docs/architecture.md, 'Run retention'). Registered on the `runs` group by
`api/cli/runs.py`.

Unlike the group's other commands it acts on the database directly
(SCHEMABRIDGE_DATABASE_URL), through the operations layer, as `keys` does: whoever holds the
database's credentials is its administrator, and the deletion runs in the workers' short
batches for as long as it takes, which no HTTP request should wait for. A purge that deleted
something is an audit event (`runs.purged`, actor `cli`). Exit codes: 0 done (nothing to
delete included), 2 a moment that is neither a span nor a past time, or a database not at
this release's schema, 4 the database unreachable.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from api.cli.direct import cli_actor, with_operations
from api.cli.exit_codes import ExitCode
from api.cli.remote import fail
from api.cli.text import parse_since


def purge(
    ended_before: Annotated[
        str,
        typer.Option(
            "--ended-before",
            help="Runs that ended before: a span back from now (30d, 12h, 1w) or an ISO date "
            "or time (2026-11-01, 2026-11-01T08:00; local time unless it has a zone).",
            metavar="DURATION|TIME",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Delete without asking (what a script must say: no terminal)."
        ),
    ] = False,
) -> None:
    """Delete the root runs that ended before a moment, with their children, steps, log lines
    and payloads (on the database directly; admin). Runs whose tree still runs, and those a
    running deployment counts, stay. Asks first in a terminal; elsewhere needs --yes."""
    cutoff = _moment(ended_before)
    if not dry_run and not yes:
        _confirmed(cutoff, ended_before)
    outcome = with_operations(
        lambda ops: ops.retention.purge(cutoff, dry_run=dry_run, actor=cli_actor())
    )
    print(f"{outcome.sentence()} {_in_database()}", flush=True)


def _in_database() -> str:
    """`(database sqlite+aiosqlite:///./schemabridge.db)`: the one command of `runs` that
    reads SCHEMABRIDGE_DATABASE_URL, not the API the others call. A user who set only
    SCHEMABRIDGE_API_URL read "nothing to delete" of a database they never meant."""
    from api.cli.environment import load_settings
    from engine.operations.startup import mask_url

    return f"(database {mask_url(load_settings().database_url)})"


def _confirmed(cutoff: float, said: str) -> None:
    """A deletion for good is asked for twice: `30m` typed for `30d` would take almost every
    run. In a terminal, say what would go and ask; elsewhere (a script, a pipe) refuse without
    --yes, since nobody can answer."""
    if not sys.stdin.isatty():
        fail(
            f"runs purge deletes for good: add --yes to delete the runs ended before {said!r} "
            "without asking, or --dry-run to count them first",
            ExitCode.USAGE,
        )
    counted = with_operations(
        lambda ops: ops.retention.purge(cutoff, dry_run=True, actor=cli_actor())
    )
    print(f"{counted.sentence()} {_in_database()}", flush=True)
    if not counted.roots and not counted.children:
        raise typer.Exit(0)
    if not typer.confirm("Delete them for good?", default=False):
        typer.echo("nothing deleted", err=True)
        raise typer.Exit(ExitCode.FAILED)


def _moment(value: str) -> float:
    """`--ended-before`'s moment in epoch seconds; one line and exit 2 for what is no moment,
    or one no date can be said of (a span of millions of days, a year past 9999 or before 1)."""
    try:
        cutoff = parse_since(value, time.time())
    except ValueError as error:
        if str(error).startswith(repr(value)):  # parse_since's sentence names the value
            fail(f"--ended-before {error}", ExitCode.USAGE)
        cutoff = None
    if cutoff is not None:
        try:
            datetime.fromtimestamp(cutoff, UTC)  # what the sentences say it as
        except (ValueError, OverflowError, OSError):
            cutoff = None
    if cutoff is not None:
        if cutoff > time.time():  # said before --yes is asked for (the store checks it again)
            fail(
                f"--ended-before {value!r} is still to come: give a span back from now (30d) "
                "or a past time",
                ExitCode.USAGE,
            )
        return cutoff
    fail(
        f"--ended-before {value!r} is out of range: give a span back from now (30d) or a "
        "past date (2026-11-01)",
        ExitCode.USAGE,
    )
