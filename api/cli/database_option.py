"""`--database`, the same option on every command that opens the store itself (`run`, `serve`,
`api`, `worker`): it wins over SCHEMABRIDGE_DATABASE_URL, and a refusal about the URL names
the option that gave it."""

from __future__ import annotations

from typing import Annotated

import typer

DATABASE_SETTING = "SCHEMABRIDGE_DATABASE_URL"

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="Database URL: sqlite:///path.db or postgresql://user@host:5432/db "
        f"(default {DATABASE_SETTING}, else ./schemabridge.db in the current directory).",
    ),
]


def named_by(message: str, database: str | None) -> str:
    """`message` naming `--database` where it names the setting, when the option gave the URL
    (the variable may not even be set)."""
    return message if database is None else message.replace(DATABASE_SETTING, "--database")
