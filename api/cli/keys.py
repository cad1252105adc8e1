"""`schemabridge keys`: create, list and revoke REST API keys.

These commands act on the database directly (SCHEMABRIDGE_DATABASE_URL), through the
operations layer, not through the API: the first admin key cannot come from an API that
needs one. `create` prints the secret once, alone on stdout (the details go to stderr), so
`KEY=$(schemabridge keys create --admin)` captures just the key.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from api.cli.direct import cli_actor, console, with_operations
from api.cli.direct import utc_time as _time
from api.cli.remote import OutputFormat, OutputOption, render, stdout, table
from schemas.clock import utc_moment

keys_app = typer.Typer(
    help="REST API keys (on the database directly; the secret is shown once).",
    no_args_is_help=True,
)


@keys_app.command("create")
def create(
    tenant: Annotated[
        str | None, typer.Option(help="The tenant the key acts for (its runs only).")
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="An admin key: every tenant and the admin routes.")
    ] = False,
    name: Annotated[str | None, typer.Option(help="A label for operators.")] = None,
    expires_in_days: Annotated[
        float | None, typer.Option(help="Days until the key stops working (default: never).")
    ] = None,
) -> None:
    """Create a key for --tenant T, or an --admin key, and print its secret once."""
    if (tenant is None) == (not admin):
        raise typer.BadParameter("give --tenant TENANT or --admin (exactly one)")
    created = with_operations(
        lambda ops: ops.keys.create(
            tenant=tenant,
            admin=admin,
            name=name,
            expires_in_days=expires_in_days,
            actor=cli_actor(),
        )
    )
    scope = "admin key" if created.tenant is None else f"key for tenant {created.tenant}"
    # In UTC to the second ("2027-03-07 06:37:12Z"), as `revoke` says its moment.
    expiry = f", expires {utc_moment(created.expires_at)}" if created.expires_at else ""
    console.print(f"created {scope} {created.id}{expiry}")
    console.print("[bold]This is the only time the key is shown: store it now.[/bold]")
    print(created.key, flush=True)


@keys_app.command("list")
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="The same as --output json.")] = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """List keys: id, name, role or tenant, state (live, expired, revoked), created, expires,
    revoked (never a secret)."""
    listed = with_operations(lambda ops: ops.keys.list())
    if as_json or output is OutputFormat.JSON:
        print(json.dumps(listed.model_dump(by_alias=True)["items"], indent=2), flush=True)
        return
    if not listed.items:
        # The first thing a user with authentication on needs here is how to make one; the
        # database is named in case it is not the one meant (a variable unset or misspelt).
        from api.cli.environment import load_settings
        from engine.operations.startup import mask_url

        console.print(
            f"no keys yet in {mask_url(load_settings().database_url)}: `schemabridge keys create "
            "--admin` (or --tenant T) makes one",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
        return
    rows = [
        [
            key.id,
            key.name or "-",
            "admin" if key.tenant is None else f"tenant {key.tenant}",
            key.state,
            _time(key.created_at),
            _time(key.expires_at),
            _time(key.revoked_at),
        ]
        for key in listed.items
    ]
    # STATE first of the times: whether the key works now, which an expiry in the past
    # only implies (REST's `state`).
    headers = ["ID", "NAME", "ROLE", "STATE", "CREATED (UTC)", "EXPIRES (UTC)", "REVOKED (UTC)"]
    render(stdout(), table(headers, rows))


@keys_app.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="The key's id (see `keys list`).")]) -> None:
    """Revoke a key: it stops working at once, on every API process (a key revoked already:
    says when and by whom, exit 0)."""
    revoked = with_operations(lambda ops: ops.keys.revoke(key_id, actor=cli_actor()))
    if not revoked.changed:
        # Nothing to do, as a cancel of a cancelled run: said as such, not as a new revocation.
        console.print(revoked.message, soft_wrap=True, highlight=False, markup=False)
        return
    # In UTC to the second, as the message of a key revoked already says it.
    when = "" if revoked.revoked_at is None else f" at {utc_moment(revoked.revoked_at)}"
    console.print(f"revoked key {revoked.id}{when}")
    if _api_processes_unreachable():
        from engine.operations.keys import KEY_CACHE_MAX_AGE_S  # the CLI starts without it

        console.print(
            "note: API processes that use a Redis server keep keys in memory for up to "
            f"{KEY_CACHE_MAX_AGE_S:g} s, and SCHEMABRIDGE_REDIS_URL is not set here, so none "
            "was told: they refuse the key within that time. Set it to their Redis to make a "
            "revocation hold at once.",
            soft_wrap=True,
            highlight=False,
        )


def _api_processes_unreachable() -> bool:
    """True when this process has no Redis server to announce a revocation on (API
    processes keep keys in memory only with one; whether they have one, it cannot tell)."""
    from api.cli.environment import load_settings

    return load_settings().redis_url is None
