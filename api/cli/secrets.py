"""`schemabridge secrets`: set, list, delete and re-encrypt the secrets workflows reference as
`{{ secrets.NAME }}`.

Like `keys`, these act on the database directly (SCHEMABRIDGE_DATABASE_URL) through the
operations layer, with the encryption keys of this process (SCHEMABRIDGE_SECRET_KEYS). A value
is read from a file (`--from-file`) or from stdin, never from the command line, where other
users could read it in the process list and the shell would keep it in its history; one
trailing newline is dropped (what `echo` and most editors add). On a terminal it is asked
for without echo.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from api.cli.direct import cli_actor, console, utc_time, with_operations
from api.cli.exit_codes import ExitCode
from api.cli.remote import OutputFormat, OutputOption, render, stdout, table
from schemas.counts import plural

secrets_app = typer.Typer(
    help="Secrets workflows reference as {{ secrets.NAME }} (encrypted; values never shown).",
    no_args_is_help=True,
)

READ_LIMIT_CHARS = 64 * 1024
"""More than any acceptable value (the operations refuse what is too long with the limit)."""


def _strip_newline(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def _read_value(from_file: Path | None) -> str:
    if from_file is not None:
        try:
            with from_file.open(encoding="utf-8") as source:
                text = source.read(READ_LIMIT_CHARS + 1)
        except (OSError, UnicodeDecodeError) as error:
            console.print(f"error: cannot read {from_file}: {error}", markup=False, soft_wrap=True)
            raise typer.Exit(ExitCode.USAGE) from None
    elif sys.stdin.isatty():
        text = typer.prompt("value", hide_input=True, err=True)
    else:
        text = sys.stdin.read(READ_LIMIT_CHARS + 1)
    if len(text) > READ_LIMIT_CHARS:
        console.print(f"error: the value is longer than {READ_LIMIT_CHARS} characters")
        raise typer.Exit(ExitCode.USAGE)
    value = _strip_newline(text)
    if not value:
        where = from_file or "stdin"
        console.print(
            f"error: no value: {where} is empty (pipe the value in, or --from-file)",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.USAGE)
    return value


@secrets_app.command("set")
def set_secret(
    name: Annotated[str, typer.Argument(help="The name workflows use: {{ secrets.NAME }}.")],
    tenant: Annotated[str, typer.Option(help="The tenant whose runs may use it.")],
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file", help="Read the value from this file (default: stdin).", dir_okay=False
        ),
    ] = None,
) -> None:
    """Set a secret's value (read from stdin or --from-file, never from the command line)."""
    value = _read_value(from_file)
    stored = with_operations(lambda ops: ops.secrets.set(tenant, name, value, actor=cli_actor()))
    verb = "created" if stored.created else "replaced the value of"
    console.print(f"{verb} secret {stored.name} of tenant {stored.tenant}", highlight=False)


@secrets_app.command("list")
def list_secrets(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's secrets.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --output json.")] = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """List secrets: tenant, name, created, updated and by whom (never a value)."""
    listed = with_operations(lambda ops: ops.secrets.list(tenant))
    if as_json or output is OutputFormat.JSON:
        print(json.dumps(listed.model_dump(by_alias=True)["items"], indent=2), flush=True)
        return
    rows = [
        [
            secret.tenant,
            secret.name,
            utc_time(secret.created_at),
            utc_time(secret.updated_at),
            secret.updated_by,
        ]
        for secret in listed.items
    ]
    headers = ["TENANT", "NAME", "CREATED (UTC)", "UPDATED (UTC)", "UPDATED BY"]
    render(stdout(), table(headers, rows))


@secrets_app.command("delete")
def delete_secret(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
    tenant: Annotated[str, typer.Option(help="The tenant it belongs to.")],
) -> None:
    """Delete a secret; runs that reference it fail with secret_not_found from then on."""
    deleted = with_operations(lambda ops: ops.secrets.delete(tenant, name, actor=cli_actor()))
    console.print(f"deleted secret {deleted.name} of tenant {deleted.tenant}", highlight=False)


@secrets_app.command("rotate")
def rotate() -> None:
    """Re-encrypt every secret under the first key of SCHEMABRIDGE_SECRET_KEYS."""
    result = with_operations(lambda ops: ops.secrets.rotate(actor=cli_actor()))
    console.print(
        f"re-encrypted {plural(result.rotated, 'secret')} under the first key (id {result.key_id})",
        highlight=False,
    )
    if result.unreadable:
        names = ", ".join(f"{ref.tenant}/{ref.name}" for ref in result.unreadable)
        count = len(result.unreadable)
        they, them = ("it was", "it") if count == 1 else ("they were", "them")
        ids = result.missing_key_ids
        which = f", {'id' if len(ids) == 1 else 'ids'} {', '.join(ids)}," if ids else ""
        console.print(
            f"error: no configured key decrypts {plural(count, 'secret')}, left unchanged: "
            f"{names} (add the key {they} encrypted with{which} after the first one, or set "
            f"{them} again)",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.FAILED)
