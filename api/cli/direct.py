"""Commands that act on the database (and Redis) directly, through the operations layer:
`keys`, `secrets`, `destinations` and `tenants` (the first admin key cannot come from an API
that needs one, and secrets are managed where the encryption key is).

`with_operations(action)` opens a `Runtime` on this process's settings, runs `action` on its
`Operations` and closes it; a refusal is one line on stderr and exit 2 when the value was
refused (`Refusal.INVALID`), 4 when the database does not answer, 1 otherwise
(`api.cli.exit_codes`). Keys and secrets live in the database alone, so Redis
need not answer. These commands act on an existing, up-to-date database and never migrate
it (a read-only `keys list` must not create or change a schema): an SQLite file that does not
exist is refused (exit 2, naming the path and `schemabridge db upgrade`), never created, and a
database whose schema is not at this code's head (never migrated, behind, or migrated by a
newer release) is refused in the words the `api` service uses (exit 2).
"""

from __future__ import annotations

# The runtime is imported inside the function (see api/cli/run.py for why).
import asyncio
import getpass
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from api.cli import usage
from api.cli.exit_codes import exit_code_for
from schemas.errors import OperationError

if TYPE_CHECKING:
    from engine.operations import Operations

console = Console(stderr=True)
T = TypeVar("T")

ACTOR_PART_CHARS = 64
"""The most of a user or host name an actor keeps (the recorded actor fits its column, 200)."""


def cli_actor() -> str:
    """`cli:<user>@<host>`: who a command acting on the database directly (and `schemabridge
    run`) is, in the words operator actions' logs use (`key:<id>` over REST, `demo` with
    authentication off): what the changes it makes record as their actor (a secret's
    `updated_by`, an audit event, a run's `created_by`). The user is the one the operating
    system names for this process (`LOGNAME`, `USER`, then the account of its uid) and the
    host this machine's name: said by the machine that ran the command, not proven to the
    database, whose own credentials are what let it in. They say which account and which
    machine to look at (its shell history, its logins), where a bare `cli` said nothing."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container's arbitrary user)
        user = f"uid{os.getuid()}"
    return f"cli:{_actor_part(user)}@{_actor_part(socket.gethostname())}"


def _actor_part(name: str) -> str:
    """`name` as one printable word of at most ACTOR_PART_CHARS ("?" when nothing is left)."""
    word = "".join(c if c.isprintable() and not c.isspace() else "_" for c in name)
    return word[:ACTOR_PART_CHARS] or "?"


def with_operations(action: Callable[[Operations], Awaitable[T]]) -> T:
    """Run `action` on a runtime of this process's settings (see the module docstring)."""
    from api.cli.environment import load_settings
    from engine.operations import Operations
    from engine.operations.startup import open_runtime

    settings = load_settings()

    async def run() -> T:
        # Redis need not answer these commands: its listeners' complaints (a wake-up listener
        # restarting, tokens unread) would bury the one line that matters. Errors still show.
        coordination = logging.getLogger("engine.coordination")
        level = coordination.level
        coordination.setLevel(logging.ERROR)
        try:
            # create=False: SQLite would make a missing file, and a misspelt path would read
            # as an empty database ("no keys") and leave a stray file behind. migrate=False:
            # an empty database (a fresh `createdb`) or an old one is refused, not migrated
            # behind the operator's back by a command that only reads.
            runtime = await open_runtime(settings, migrate=False, create=False, probe_redis=False)
            try:
                return await action(Operations(runtime))
            finally:
                await runtime.close()
        finally:
            coordination.setLevel(level)

    try:
        return asyncio.run(run())
    except OperationError as error:
        usage.show_traceback(error)
        # Text, never markup: the message quotes what was typed (`keys revoke '[/x]'`).
        console.print(f"[red]error:[/red] {escape(error.message)}", soft_wrap=True, highlight=False)
        raise typer.Exit(exit_code_for(error)) from None


def utc_time(epoch: float | None) -> str:
    """`2026-12-01 09:30` (UTC), or `-`."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M")
