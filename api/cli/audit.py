"""`schemabridge audit list`: who changed what, over the REST API (`GET /audit`, an admin key).

The audit trail records administrative changes (versions published, serving versions
switched, keys created and revoked, tenant limits, destination caps, secrets set and deleted)
with who made them; operator actions on runs are in each run's log (`runs logs`). Newest
first; more events than `--limit`: the last line gives the `--cursor` that continues.
Exit codes as every API command (2 for a filter the API refuses, 4 for a tenant key).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.remote import (
    EXIT_CODES_HELP,
    ApiKeyOption,
    ApiUrlOption,
    DebugOption,
    OutputFormat,
    OutputOption,
    Remote,
    call,
    fail,
    print_page,
    table,
)
from api.cli.run_options import CursorOption
from api.cli.target import DEFAULT_API_URL
from api.cli.text import exact, excerpt, relative
from schemas.close_names import close_names, did_you_mean

if TYPE_CHECKING:
    from rich.table import Table

    from api.cli.client import ApiClient
    from api.cli.wire import AuditEventView, Page

audit_app = typer.Typer(
    help="Who changed what: versions, serving, keys, tenant limits, caps, breaker resets, "
    "secrets (admin key).",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
)

ACTIONS = (
    "workflow.published",
    "workflow.serving_set",
    "key.created",
    "key.revoked",
    "tenant.quota_set",
    "tenant.quota_reset",
    "tenant.rate_set",
    "tenant.rate_reset",
    "destination.caps_set",
    "destination.caps_removed",
    "destination.breakers_reset",
    "secret.set",
    "secret.deleted",
    "secret.rotated",
    "runs.purged",
)
"""The audit's actions (`engine.store.models.AuditAction`, which a unit test holds this to):
what a refused `--action` is compared with for its "did you mean"."""
SUBJECT_KINDS = ("workflow", "api_key", "tenant", "destination", "secret", "runs")
"""The kinds of subject (`AuditSubject`), as `ACTIONS`."""

MAX_EVENTS = 10_000
"""The most events one `audit list` reads (20 pages of the API's 500)."""
DETAIL_CHARS = 120


def option_refusal(failure: ApiFailure, action: str | None, kind: str | None) -> ApiFailure:
    """The API's refusal of `--action` or `--subject-kind` (a 422 whose problem points at
    `/action` or `/subjectKind`, listing its enum) in the words of the option, with the
    value it was probably meant to be: the user typed an option, not a query parameter."""
    pointers = {p.get("pointer") for p in failure.details.get("problems", [])}
    known: tuple[str, ...]
    if "/action" in pointers and action is not None:
        given, known = action, ACTIONS
        said = f"--action {action!r} is not an audit action"
    elif "/subjectKind" in pointers and kind is not None:
        given, known = kind, SUBJECT_KINDS
        said = f"--subject-kind {kind!r} is not a kind of subject"
    else:
        return failure
    meant = did_you_mean(close_names(given, known))
    message = f"{said}; {meant}" if meant else f"{said}: one of {', '.join(known)}"
    return ApiFailure(
        message,
        failure.exit_code,
        status=failure.status,
        code=failure.code,
        details=failure.details,
    )


def events_table(events: list[AuditEventView], now: float) -> Table:
    rows = [
        [
            f"{exact(event.at)} ({relative(event.at, now)})",
            event.actor or "-",
            event.action,
            f"{event.subject_kind} {event.subject_id}",
            excerpt(json.dumps(event.detail, ensure_ascii=False), DETAIL_CHARS)
            if event.detail
            else "-",
        ]
        for event in events
    ]
    return table(["WHEN", "ACTOR", "ACTION", "SUBJECT", "DETAIL"], rows)


@audit_app.command("list", epilog=EXIT_CODES_HELP)
def list_events(
    actor: Annotated[
        str | None,
        typer.Option(
            help="Only this actor's changes: key:<id>, cli:<user>@<host>, demo; a kind "
            "without ':' (cli, key) takes every actor of that kind.",
            metavar="ACTOR",
        ),
    ] = None,
    action: Annotated[
        str | None,
        typer.Option(
            help="Only this action: workflow.published, key.revoked, secret.deleted, …",
            metavar="ACTION",
        ),
    ] = None,
    subject_kind: Annotated[
        str | None,
        typer.Option(
            help="Only changes of this kind of thing: workflow, api_key, tenant, destination, "
            "secret.",
            metavar="KIND",
        ),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            help="Only changes of this one (needs --subject-kind): a workflow's name, a key's "
            "id, a tenant, a destination key, TENANT/NAME for a secret.",
            metavar="ID",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            help=f"Show at most this many events, up to {MAX_EVENTS:,} (the CLI reads as "
            "many pages of the API as it takes).",
            min=1,
            max=MAX_EVENTS,
        ),
    ] = 50,
    cursor: CursorOption = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """List administrative changes, newest first: when, who, what, to which thing."""
    remote = Remote(api_url, api_key, output, debug)
    if subject is not None and subject_kind is None:
        # The API's rule (a subject id is unique only within its kind), said with the options.
        fail(
            f"--subject needs --subject-kind, the kind of thing {subject!r} is: "
            f"{', '.join(SUBJECT_KINDS)}",
            ExitCode.USAGE,
        )

    async def action_(api: ApiClient) -> Page[AuditEventView]:
        # With the client: the models load only for the commands that call the API.
        from api.cli.client_routes import collect_pages
        from api.cli.wire import AuditQuery

        selection = AuditQuery(
            actor=actor, action=action, subject_kind=subject_kind, subject_id=subject
        )
        try:
            return await collect_pages(
                lambda size, after: api.audit.list(selection, limit=size, cursor=after),
                limit,
                cursor,
            )
        except ApiFailure as failure:
            raise option_refusal(failure, action, subject_kind) from failure

    events = call(remote, action_)
    now = time.time()
    print_page(remote, events, lambda items: events_table(items, now), "no audit events")
