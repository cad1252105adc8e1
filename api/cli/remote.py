"""What every command that talks to the REST API shares: the `--api-url`, `--api-key`,
`--output` and `--debug` options, running an action on an `ApiClient`, turning a failure into
one line and an exit code, and printing tables and JSON.

Exit codes (`ExitCode`): 0 done; 1 the run or the action failed (a FAILED or CANCELLED run,
a refusal: not found, wrong state, a limit, the API's store unavailable); 2 usage or invalid
input (bad JSON, an unreadable file, a 422); 3 still running at `--timeout`; 4 the API is not
reachable or refused the key. A traceback is printed only with `--debug`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from api.cli import hints, usage
from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.target import ApiTarget

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import Page, Wire

T = TypeVar("T")

PIPED_WIDTH = 10_000
"""Line width when stdout is not a terminal: long enough that no line is wrapped."""

EXIT_CODES_HELP = (
    "Exit codes: 0 done (or already the case, said so: a run already cancelled or "
    "started over, a deployment already aborted); 1 the run or action failed (FAILED or "
    "CANCELLED run, not found, wrong state, a limit reached); 2 usage or invalid input (bad "
    "JSON, unreadable file, rejected by the API); 3 still running at --timeout; 4 API not "
    "reachable or not authorised."
)

STATUS_STYLES = {
    "SUCCEEDED": "green",
    "RESOLVED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "RUNNING": "cyan",
    "PARKED": "cyan",
    "READY": "blue",
}


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


_API = "API"
ApiUrlOption = Annotated[
    str,
    typer.Option(
        "--api-url",
        envvar="SCHEMABRIDGE_API_URL",
        metavar="URL",
        help="The SchemaBridge REST API (schemabridge serve or api).",
        rich_help_panel=_API,
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="SCHEMABRIDGE_API_KEY",
        metavar="KEY",
        help="API key, sent as 'Authorization: Bearer' (not needed with serve --demo).",
        show_default=False,
        rich_help_panel=_API,
    ),
]
OutputOption = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", help="text for people, json for scripts.", case_sensitive=False),
]
DebugOption = Annotated[
    bool,
    typer.Option(
        "--debug",
        callback=usage.debug_given,
        help="Print a traceback when something fails (as `schemabridge --debug` does).",
    ),
]


@dataclass(frozen=True)
class Remote:
    """The API a command talks to and how it prints."""

    url: str
    key: str | None
    output: OutputFormat = OutputFormat.TEXT
    debug: bool = False

    @property
    def debugging(self) -> bool:
        """The command's own `--debug`, or the global one (`schemabridge --debug …`)."""
        return self.debug or usage.OPTIONS.debug

    @property
    def json(self) -> bool:
        return self.output is OutputFormat.JSON

    def target(self) -> ApiTarget:
        return ApiTarget(self.url, self.key or None)


def remote(
    api_url: str, api_key: str | None, output: OutputFormat = OutputFormat.TEXT, debug: bool = False
) -> Remote:
    return Remote(api_url, api_key, output, debug)


# ── printing ────────────────────────────────────────────────────────────────────────────────


def _console(*, err: bool) -> Console:
    stream = sys.stderr if err else sys.stdout
    if stream.isatty():
        return Console(stderr=err, highlight=False)
    # Piped: plain text, and lines as long as they are (a log shipper or `grep` reads them).
    return Console(
        stderr=err, highlight=False, soft_wrap=True, width=PIPED_WIDTH, color_system=None
    )


def stdout() -> Console:
    """stdout for people: rich on a terminal; piped, plain and never wrapped."""
    return _console(err=False)


def stderr() -> Console:
    """stderr, the same way (messages, hints, progress while stdout carries a result)."""
    return _console(err=True)


def render(console: Console, renderable: RenderableType) -> None:
    """Print a table or a group; piped, without the padding rich leaves at line ends."""
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    lines = captured.get().splitlines()
    console.file.write("".join(line.rstrip() + "\n" for line in lines))
    console.file.flush()


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout (plain text: scripts read it)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def print_json_line(data: Any) -> None:
    """`data` as one line of JSON on stdout, flushed (JSON Lines: streams, logs)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def dump(answer: Wire | Sequence[Wire]) -> Any:
    """An answer (or a list of them) as the API sent it, for `--output json`."""
    if isinstance(answer, Sequence):
        return [item.raw() for item in answer]
    return answer.raw()


def print_page(
    remote: Remote,
    page: Page[Any],
    render_table: Callable[[list[Any]], RenderableType],
    empty: str,
) -> None:
    """A list answer: `{"items", "next"}` as JSON, else its table (or `empty`, on stderr,
    when there is nothing) and, when the list goes on, the `--cursor` that continues it."""
    if remote.json:
        print_json({"items": dump(page.items), "next": page.next})
        return
    if not page.items:
        say(empty)
        return
    render(stdout(), render_table(page.items))
    if page.next is not None:
        say(f"more: add --cursor {page.next}")


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def table(headers: Sequence[str], rows: Sequence[Sequence[str | Text]]) -> Table:
    """A borderless table: aligned columns, a bold header; piped, it is plain text. A value
    with a newline, a tab or a control character in it (a tenant id the store took) is shown
    escaped (`a\\nb`), so each row stays one line and the columns stay aligned. A value is
    text, never markup: a run's error quotes the reason phrase a destination chose, and an
    `[/x]` in it made `runs list` fail with a MarkupError."""
    grid = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
    for header in headers:
        grid.add_column(header, overflow="fold")
    for row in rows:
        grid.add_row(*(Text(shown(cell)) if isinstance(cell, str) else cell for cell in row))
    return grid


def shown(text: str) -> str:
    """`text` with each character that is not printable written as its escape (`\\n`,
    `\\x07`, `\\u200b`); printable text unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def say(message: str) -> None:
    """A line for people on stderr (what was done, hints), leaving stdout to the result."""
    stderr().print(message, markup=False)


# ── failing ─────────────────────────────────────────────────────────────────────────────────


def fail(message: str, code: ExitCode | int) -> NoReturn:
    """End the command: `error: <message>` on stderr and the exit code."""
    stderr().print(f"error: {message}", markup=False)
    raise typer.Exit(int(code))


def read_json_value(value: str, option: str) -> Any:
    """An option that takes JSON text or `@file` (exit 2 when unreadable or not JSON): the
    one reader of such options, for `run` and for the commands that call the API alike."""
    source, text = option, value
    if value.startswith("@"):
        path = Path(value[1:])
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            fail(f"cannot read {option} file {path}: {reason}", ExitCode.USAGE)
    from engine.validation import duplicate_key_summary, loads_checked
    from engine.validation.json_text import syntax_reason

    try:
        parsed, problems = loads_checked(text)
    except RecursionError:  # thousands of levels: the parser gives up before any limit is asked
        fail(f"{source} nests arrays and objects too deeply to read", ExitCode.USAGE)
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
        hint = " (a file is given as @path)" if not value.startswith("@") else ""
        # In the words `validate` and the REST API use: line and column, and the likely cause.
        reason = syntax_reason(text, error) if isinstance(error, json.JSONDecodeError) else error
        fail(f"{source} is not valid JSON: {reason}{hint}", ExitCode.USAGE)
    if problems:  # a key written twice, or text that is not Unicode
        fail(duplicate_key_summary(source, problems), ExitCode.USAGE)
    return parsed


CTRL_C_GRACE_S = 3.0
"""How long a command may take to wind down after Ctrl-C before it is stopped outright."""


@dataclass
class _CtrlC:
    """Ctrl-C through the event loop: the first cancels the command's task; a second, or
    `CTRL_C_GRACE_S` without the task ending (a cancellation some library swallowed), stops
    at once (KeyboardInterrupt out of the loop).

    asyncio.run's own handler is a plain signal handler: when the kernel delivers SIGINT to
    another thread of the process (one a library started), the loop sleeping in select() does
    not notice until its next event, up to a stream's 15 s heartbeat. The loop's handler wakes
    it through its signal file descriptor, whichever thread received the signal."""

    task: asyncio.Task[Any] | None
    pressed: bool = False

    def install(self) -> None:
        # Not the main thread (or no Unix signals): asyncio.run's handler stays.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._pressed)

    def uninstall(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    def _pressed(self) -> None:
        if self.pressed:
            self._stop_now()
            return
        self.pressed = True
        if self.task is not None:
            self.task.cancel()
        asyncio.get_running_loop().call_later(CTRL_C_GRACE_S, self._stop_now)

    def _stop_now(self) -> None:
        if self.task is not None and not self.task.done():
            raise KeyboardInterrupt


def call(
    target: Remote,
    action: Callable[[ApiClient], Awaitable[T]],
    *,
    workflow: str | None = None,
    system_workflows: bool = False,
    following: Callable[[], str | None] | None = None,
) -> T:
    """Run `action` on a client of `target`'s API. An `ApiFailure` ends the command with its
    message (and the fix for a run or a `workflow` not found: `api.cli.hints`, which names
    the engine's own workflows too with `system_workflows`) and exit code;
    anything unexpected too (exit 1), with its traceback only under `--debug`. Ctrl-C is one
    line, exit 130; `following` answers the run the command follows (if any yet), which that
    line says goes on."""

    # Here, not at the top: the client (httpx, the answers' models) is for the commands that
    # call the API, not for `--help` and the commands that run in-process.
    from api.cli.client import ApiClient

    ctrl_c = _CtrlC(None)

    async def main() -> T:
        ctrl_c.task = asyncio.current_task()
        ctrl_c.install()
        try:
            async with ApiClient(target.target()) as api:
                try:
                    return await action(api)
                except ApiFailure as failure:
                    raise await hints.with_fix(
                        api, failure, workflow, system=system_workflows
                    ) from failure
        finally:
            ctrl_c.uninstall()

    try:
        try:
            return asyncio.run(main())
        except asyncio.CancelledError:
            if not ctrl_c.pressed:
                raise
            raise KeyboardInterrupt from None
    except ApiFailure as failure:
        if target.debugging:
            traceback.print_exc()
        fail(failure.message, failure.exit_code)
    except KeyboardInterrupt:
        run_id = following() if following is not None else None
        line = "interrupted"
        if run_id is not None:
            line += f"; run {run_id} goes on: follow it with `schemabridge runs watch {run_id}`"
        stderr().print(line, markup=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as error:
        if target.debugging:
            traceback.print_exc()
        fail(
            f"unexpected {type(error).__name__}: {error}; run again with --debug for the traceback",
            ExitCode.FAILED,
        )
