"""The RUN argument as people give it: a whole id, or a unique prefix of one, such as the 8
characters the web monitor shows (`schemabridge runs show 3f2a9c1e`).

A prefix (8 to 35 characters of hex digits and hyphens: shorter than an id) is resolved
through the API (`GET /run-ids?prefix=`, scoped to the key's tenant like every read) before
the command acts: one run starts with it, that run; none, the usual "no run" (exit 1);
several, one line listing a few of their ids (exit 2: a usage error, the same command with
more of the id works). Anything else is sent as it was given, so a whole id costs no extra
request and a typo is answered "no run" by the API itself; a RUN that reads as a prefix cut
too short (`3f2a9c1`: hex digits, fewer than 8) and names no run is answered "no run" with
the reason in the same line (at least 8 characters, as the monitor shows).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from api.cli.client import ApiClient

ID_CHARS = 36
"""A run id: a UUID in its canonical text form."""
MIN_PREFIX_DIGITS = 8
"""The fewest hex digits the API resolves (engine.operations.run_ids; what the monitor shows)."""
LISTED = 5
"""Ids an ambiguous prefix's line names at most."""
_PREFIX = re.compile(r"[0-9a-fA-F-]+")


def is_prefix(given: str) -> bool:
    """Whether `given` reads as a prefix of a run id rather than a whole one."""
    digits = len(given) - given.count("-")
    return len(given) < ID_CHARS and digits >= MIN_PREFIX_DIGITS and bool(_PREFIX.fullmatch(given))


def is_short_prefix(given: str) -> bool:
    """Whether `given` reads as a prefix of a run id cut too short to be resolved: hex digits
    (and hyphens), fewer than `MIN_PREFIX_DIGITS` of them."""
    digits = len(given) - given.count("-")
    return 0 < digits < MIN_PREFIX_DIGITS and bool(_PREFIX.fullmatch(given))


async def full_run_id(api: ApiClient, given: str) -> str:
    """The id of the one run `given` names: itself, or the run its prefix belongs to.
    `ApiFailure` `run_not_found` when no run starts with it (or, for a prefix too short to be
    resolved, no run has it as its id), `ambiguous_run_id` when several do."""
    if is_short_prefix(given):
        try:
            await api.runs.get(given)
        except ApiFailure as failure:
            if failure.code != "run_not_found":
                raise
            raise ApiFailure(
                f"{failure.message} (a short id needs at least {MIN_PREFIX_DIGITS} "
                "characters, as the monitor shows)",
                failure.exit_code,
                status=failure.status,
                code=failure.code,
                details=failure.details,
            ) from None
        return given
    if not is_prefix(given):
        return given
    found = await api.runs.match_prefix(given, limit=LISTED)
    if len(found.ids) == 1 and not found.more:
        return found.ids[0]
    if not found.ids:
        raise ApiFailure(
            f"no run {given!r} (no run id starts with it)",
            ExitCode.FAILED,
            status=404,
            code="run_not_found",
        )
    listed = ", ".join(found.ids) + (", …" if found.more else "")
    count = f"more than {len(found.ids)}" if found.more else str(len(found.ids))
    raise ApiFailure(
        f"run id {given!r} is ambiguous: {count} runs start with it ({listed}); "
        "give more of the id",
        ExitCode.USAGE,
        code="ambiguous_run_id",
        details={"runIds": found.ids},
    )
