"""The exit codes every `schemabridge` command shares, in one place.

0 done; 1 the run or action failed (a FAILED or CANCELLED run, a refusal: not found, wrong
state, a limit); 2 usage or invalid input, settings included (bad JSON, an unreadable file, a
value refused, a missing or malformed encryption key); 3 still running at `--timeout`; 4 a
database, Redis or API that does not answer or refuses the key; 130 Ctrl-C.
"""

from __future__ import annotations

from enum import IntEnum

from schemas.errors import OperationError, Refusal


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    """The run FAILED or was CANCELLED, or the action was refused (not found, wrong state, a
    limit reached, the API's store unavailable)."""
    USAGE = 2
    """A usage error or invalid input: bad JSON, an unreadable file, a 400/413/422, a setting
    that is wrong."""
    STILL_RUNNING = 3
    """The run was still going when `--timeout` ran out (it goes on)."""
    UNREACHABLE = 4
    """The database, Redis or the API does not answer, or the API refused the key."""
    INTERRUPTED = 130
    """Ctrl-C, as shells report a process ended by SIGINT."""


EXIT_FOR_REFUSAL = {
    Refusal.NOT_FOUND: ExitCode.FAILED,
    Refusal.CONFLICT: ExitCode.FAILED,
    Refusal.INVALID: ExitCode.USAGE,
    Refusal.LIMITED: ExitCode.FAILED,
    Refusal.UNAVAILABLE: ExitCode.UNREACHABLE,
}

SETTINGS_CODES = frozenset({"secret_key_missing", "secret_key_invalid"})
"""Refusals that REST answers 503 (the server is misconfigured) but that a command on this
machine's settings must call a usage error: the fix is the user's environment, and nothing
failed to answer."""


def exit_code_for(error: OperationError) -> ExitCode:
    """The exit code of a command that an operation refused with `error`."""
    if error.code in SETTINGS_CODES:
        return ExitCode.USAGE
    return EXIT_FOR_REFUSAL[error.refusal]
