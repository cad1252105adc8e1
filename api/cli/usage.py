"""How the command line talks to a person: help that names types in words, and errors as one
line with the fix, never a traceback (unless `--debug`).

- **Help types.** Typer labels option values with Python's type names (`<str>`, `<bool>`,
  `<list[Path]>`); `install_help_types` makes them the words command lines use (`TEXT`,
  `INTEGER`, `NUMBER`, `PATH…`, a choice's values), or the option's own `metavar`, and shows
  nothing for an on/off flag; arguments read `RUN`, `[RUN]...`, `FILE...` (Typer writes
  `{RUN}` and repeats the metavar as a type: `RUN RUN`).
- **Usage errors.** Click prints a usage block, a hint and the error on three or four lines;
  `install_one_line_usage_errors` makes that one `error:` line that keeps click's fix ("Did
  you mean 'list'?") and names the `--help` to read.
- **Failures.** `main` runs the app and hands anything it did not handle to `report`, which
  prints one line on stderr and exits with the code the error calls for: an `OperationError`
  by its refusal (`EXIT_FOR_REFUSAL`), a startup problem (`engine.operations.startup`) by
  what the user must fix; anything else is a bug, said in one line that points at `--debug`.
  With `--debug` (a global option: `schemabridge --debug run …`) the traceback is printed too.
"""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import IO, Any, NoReturn, get_args, get_origin

import typer
from rich.console import Console
from rich.markup import escape
from typer import core as typer_core

# Typer bundles its own click (0.29+); its usage errors are this class.
from typer._click.exceptions import UsageError

from api.cli.exit_codes import EXIT_FOR_REFUSAL, ExitCode, exit_code_for
from schemas.errors import OperationError

PIPED_WIDTH = 1000
"""Width of stderr when it is not a terminal: wide enough that no message is folded."""
_WORDS = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH", bool: "BOOLEAN"}


@dataclass
class Options:
    """The global options (set by the root callback before any command runs)."""

    debug: bool = False


OPTIONS = Options()
"""The one process-wide CLI flag holder: a command line is one process, one invocation."""


def debug_given(value: bool) -> bool:
    """Callback of a command's own `--debug` (`runs list --debug`, `run … --debug`): the same
    as the global one (`schemabridge --debug …`), which it can only turn on, never off."""
    if value:
        OPTIONS.debug = True
    return value


def show_traceback(error: BaseException) -> None:
    """Under `--debug` (global, or the command's own), the traceback of `error`, which the
    command is about to say in one line; nothing otherwise."""
    if OPTIONS.debug:
        traceback.print_exception(error)


def stderr(*, soft_wrap: bool = True) -> Console:
    """A console for messages on stderr that never wraps a line mid-sentence: a terminal
    folds long lines itself, and a log file or pipe keeps each message on its one line.
    (`soft_wrap=False` for a live display, which must end its last line itself.)"""
    terminal = sys.stderr.isatty()
    return Console(
        stderr=True, soft_wrap=soft_wrap, highlight=False, width=None if terminal else PIPED_WIDTH
    )


def _word(annotation: Any) -> str:
    if get_origin(annotation) is list:
        (inner,) = get_args(annotation)
        return f"{_word(inner)}…"
    return _WORDS.get(annotation, "TEXT") if isinstance(annotation, type) else "TEXT"


def _display_type(self: Any, ctx: Any) -> str | None:
    if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
        return None
    if isinstance(self, typer_core.TyperArgument) and self.metavar:
        return None  # the argument's column already shows its metavar ("RUN RUN" otherwise)
    if self.metavar:
        return str(self.metavar)
    descriptor = self.type_descriptor
    if descriptor.is_choice:
        return "|".join(str(c) for c in descriptor.choices or ())
    return _word(descriptor.annotation)


def _argument_name(self: Any) -> str:
    """An argument as command lines write it: `RUN`, `FILE...` (not `{RUN}`, `{FILE}...`);
    the usage line puts an optional one in brackets."""
    return str(self.display_name_raw) + ("..." if self.nargs != 1 else "")


def _argument_usage_name(self: Any) -> str:
    name = _argument_name(self)
    return name if self.required else f"[{name}]"


def install_help_types() -> None:
    """Make help show value types in words and arguments as command lines write them (see
    the module docstring)."""
    typer_core._TyperParameter.display_type = _display_type  # type: ignore[method-assign,assignment]
    typer_core.TyperArgument._rich_display_name = _argument_name  # type: ignore[method-assign]
    typer_core.TyperArgument._usage_display_name = _argument_usage_name  # type: ignore[method-assign]


def _show_usage_error(self: UsageError, root: typer.Typer, file: IO[Any] | None = None) -> None:
    """A usage error as one line: the problem, the fix click suggests ("Did you mean
    'list'?") and where the help is, instead of click's usage block and message."""
    where = self.ctx.command_path if self.ctx is not None else _command_path_given(root)
    message = _in_our_words(self.format_message().strip().replace("\n", " "), self)
    option = getattr(self, "option_name", None)
    if option in _CLIENT_OPTIONS and self.ctx is not None and self.ctx.parent is None:
        # `schemabridge --api-url URL runs list`, as kubectl and temporal take it.
        setting = _CLIENT_OPTIONS[option]
        message += (
            f"; it goes after the command (`schemabridge runs list {option} …`) or in {setting}"
        )
    if option == "-o" and self.ctx is not None and _takes_option(self.ctx.command, "--format"):
        # `runs resolve`: there --output is the step's output; --format is -o elsewhere.
        message += "; did you mean `--format`? (here --output is the step's output)"
    groups, name = _groups_with(self)
    if len(groups) == 1:
        message += f" Did you mean `{where} {groups[0]} {name}`?"
    elif groups:
        message += f" Did you mean `{where} GROUP {name}`, GROUP one of {', '.join(groups)}?"
    stderr().print(f"error: {message} (see `{where} --help`)", markup=False)


def _command_path_given(root: typer.Typer) -> str:
    """The command the command line names (`schemabridge deployments abort`), for a usage
    error click raises without a context: an option given no value ("Option '--reason'
    requires an argument") is the command's, whose --help is the one to read."""
    command = typer.main.get_command(root)
    path = ["schemabridge"]
    for arg in sys.argv[1:]:
        if arg.startswith("-"):
            continue  # a global option before the command (`--debug`)
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        command = sub
        path.append(arg)
    return " ".join(path)


_NOT_ONE_OF = re.compile(
    r"Invalid value for '(?P<option>[^']+)'(?: / '[^']+')*: Value error, "
    r"(?P<value>'.*') is not one of (?P<choices>.+)\.$"
)
_NOT_A_NUMBER = re.compile(
    r"Invalid value for '(?P<option>[^']+)'(?: / '[^']+')*: "
    r"Input should be a valid (?P<kind>integer|number)\b.*$"
)


def _in_our_words(message: str, error: UsageError) -> str:
    """A value typer refused in pydantic's words ("Invalid value for '--log-level': Value
    error, 'loud' is not one of 'debug', 'info'.") said as the CLI's own checks say it:
    `--log-level 'loud': give debug or info`."""
    found = _NOT_ONE_OF.match(message)
    if found is not None:
        choices = [choice.strip().strip("'") for choice in found["choices"].split(",")]
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        return f"{found['option']} {found['value']}: give {listed}"
    found = _NOT_A_NUMBER.match(message)
    param = getattr(error, "param", None)
    if found is not None:
        option, given = _given(found["option"], param)
        what = "a whole number" if found["kind"] == "integer" else "a number"
        shown = "" if given is None else f" {given!r}"
        return f"{option}{shown}: give {what}"
    found = _OUT_OF_BOUNDS.match(message)
    if found is not None and param is not None:
        option, given = _given(found["option"], param)
        shown = "" if given is None else f" {given!r}"
        return f"{option}{shown}: give {_bounded_number(param)}"
    found = _POSSIBLE_OPTIONS.search(message)
    if found is not None:
        # click's "(Possible options: --status)" said as a misspelt command is: "Did you
        # mean 'list'?"
        meant = _closest_first(getattr(error, "option_name", ""), found["options"].split(","))
        options = " or ".join(f"'{option}'" for option in meant)
        return f"{message[: found.start()].rstrip()}. Did you mean {options}?"
    return message.replace(": Value error, ", ": ")


def _closest_first(given: str, options: list[str]) -> list[str]:
    """`options` (click lists them alphabetically) with the closest to `given` first:
    `--timout` is offered '--timeout' before '--input' and '--output'."""
    stripped = [option.strip() for option in options]
    return sorted(stripped, key=lambda option: -SequenceMatcher(None, given, option).ratio())


_POSSIBLE_OPTIONS = re.compile(r"\(Possible options: (?P<options>[^)]+)\)$")
"""click's suggestion for a misspelt option."""


_OUT_OF_BOUNDS = re.compile(
    r"Invalid value for '(?P<option>[^']+)'(?: / '[^']+')*: "
    r"Input should be (?:greater|less) than (?:or equal to )?\S+$"
)


def _bounded_number(param: Any) -> str:
    """What an option's `min`/`max` let it take, in words ("a whole number, 1 or more"),
    rather than the one bound pydantic's message names."""
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    descriptor = getattr(param, "type_descriptor", None)
    whole = getattr(descriptor, "annotation", int) is not float
    what = "a whole number" if whole else "a number"
    if low is not None and high is not None:
        return f"{what} from {low} to {high}"
    if low is not None:
        return f"{what}, {low} or more"
    return f"{what}, at most {high}"


def _takes_option(command: Any, option: str) -> bool:
    return any(option in getattr(param, "opts", ()) for param in getattr(command, "params", ()))


def _given(option: str, param: Any) -> tuple[str, str | None]:
    """The name the command line gave `option` under (one of `param`'s names: `--rate` is
    also `--rate-per-second`) and what it gave it (click's error keeps neither); the value
    None when it is not there as `--option VALUE` or `--option=VALUE` (an environment
    variable)."""
    args = sys.argv[1:]
    names = getattr(param, "opts", None) or [option]
    # From the end: given twice (under two names, too), the last one is the value click took.
    for index in range(len(args) - 1, -1, -1):
        arg = args[index]
        for name in names:
            if arg == name and index + 1 < len(args):
                return name, args[index + 1]
            if arg.startswith(name + "="):
                return name, arg.partition("=")[2]
    return option, None


def _groups_with(error: UsageError) -> tuple[list[str], str]:
    """For an unknown command that groups one level down have (`schemabridge logs` →
    `runs logs`), those groups and the command; no group when click suggested a command."""
    message = error.format_message()
    found = re.match(r"No such command '([^']+)'\.", message)
    group = error.ctx.command if error.ctx is not None else None
    if found is None or "Did you mean" in message or group is None:
        return [], ""
    name = found.group(1)
    subs = sorted(getattr(group, "commands", {}).items())
    return [sub_name for sub_name, sub in subs if name in getattr(sub, "commands", {})], name


_CLIENT_OPTIONS = {"--api-url": "SCHEMABRIDGE_API_URL", "--api-key": "SCHEMABRIDGE_API_KEY"}
"""The REST client's options, which each command takes, not the program."""


def install_one_line_usage_errors(root: typer.Typer) -> None:
    """Make every usage error (an unknown command or option, a missing argument, a value
    out of range) one line on stderr, still exit 2; `root` is the program's tree of
    commands, which names the command of an error click raises without a context."""

    def show(self: UsageError, file: IO[Any] | None = None) -> None:
        _show_usage_error(self, root, file)

    UsageError.show = show  # type: ignore[method-assign]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def explain(error: BaseException) -> tuple[str, int] | None:
    """(the one line, the exit code) for an error a user can act on, else None."""
    from engine.operations.startup import StartupRefused, explain

    for leaf in _leaves(error):
        if isinstance(leaf, typer.Exit):
            return "", leaf.exit_code
        if isinstance(leaf, StartupRefused):
            return leaf.message, EXIT_FOR_REFUSAL[leaf.refusal]
        if isinstance(leaf, OperationError):
            return leaf.message, exit_code_for(leaf)
    from engine.settings import Settings

    refused = explain(error, Settings())
    if refused is not None:
        return refused.message, EXIT_FOR_REFUSAL[refused.refusal]
    return None


def report(error: BaseException) -> NoReturn:
    """Tell the user about `error` in one line (with the traceback under `--debug`) and
    exit."""
    console = stderr()
    show_traceback(error)
    known = explain(error)
    if known is None:
        where = "" if OPTIONS.debug else " (run again with --debug for the traceback)"
        first = (str(error).strip().splitlines() or [""])[0]
        console.print(
            f"[red]error:[/red] internal error: {type(error).__name__}: {escape(first)}{where}"
        )
        sys.exit(ExitCode.FAILED)
    message, code = known
    if message:
        console.print(f"[red]error:[/red] {escape(message)}")
    sys.exit(code)


def fail(message: str, code: int = ExitCode.USAGE) -> typer.Exit:
    """Print `error: message` (one line) and return the `Exit` to raise. The message is text,
    never markup: it may quote what a user typed or a server answered (`[/x]`), which Rich
    would otherwise read as a tag, and fail on."""
    stderr().print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)
