"""The RUN and deployment ID arguments as people give them: a whole id, or a unique prefix of
one, such as the 8 characters the web monitor shows (`schemabridge runs show 3f2a9c1e`,
`schemabridge deployments show 5b0c7e2d`).

A prefix (8 to 35 characters of hex digits and hyphens: shorter than an id) is resolved
through the API (`GET /run-ids?prefix=`, scoped to the key's tenant like every read;
`GET /deployment-ids?prefix=`, admin keys only like every deployment route) before the
command acts: one id starts with it, that one; none, the usual "no run" / "no deployment"
(exit 1); several, one line listing a few of their ids (exit 2: a usage error, the same
command with more of the id works). Anything else is sent as it was given, so a whole id
costs no extra request and a typo is answered "no run" by the API itself; an argument that
reads as a prefix cut too short (`3f2a9c1`: hex digits, fewer than 8) and names nothing is
answered "no run" with the reason in the same line (at least 8 characters, as the monitor
shows).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import IdMatches

ID_CHARS = 36
"""A run's or a deployment's id: a UUID in its canonical text form."""
MIN_PREFIX_DIGITS = 8
"""The fewest hex digits the API resolves (engine.operations.id_prefixes; what the monitor
shows)."""
LISTED = 5
"""Ids an ambiguous prefix's line names at most."""
_PREFIX = re.compile(r"[0-9a-fA-F-]+")


def is_prefix(given: str) -> bool:
    """Whether `given` reads as a prefix of an id rather than a whole one."""
    digits = len(given) - given.count("-")
    return len(given) < ID_CHARS and digits >= MIN_PREFIX_DIGITS and bool(_PREFIX.fullmatch(given))


def is_short_prefix(given: str) -> bool:
    """Whether `given` reads as a prefix of an id cut too short to be resolved: hex digits
    (and hyphens), fewer than `MIN_PREFIX_DIGITS` of them."""
    digits = len(given) - given.count("-")
    return 0 < digits < MIN_PREFIX_DIGITS and bool(_PREFIX.fullmatch(given))


@dataclass(frozen=True)
class IdKind:
    """What an id names, and how the API is asked about it."""

    noun: str
    """`run`, `deployment`: in the messages and the failure codes (`run_not_found`,
    `ambiguous_run_id`)."""
    match: Callable[[str, int], Awaitable[IdMatches]]
    """The ids starting with a prefix, at most so many (`GET /run-ids`, `/deployment-ids`)."""
    get: Callable[[str], Awaitable[Any]]
    """The one with this whole id (404 `<noun>_not_found`)."""


async def full_id(kind: IdKind, given: str) -> str:
    """The id of the one run or deployment `given` names: itself, or the one its prefix
    belongs to. `ApiFailure` `<noun>_not_found` when none starts with it (or, for a prefix
    too short to be resolved, none has it as its id), `ambiguous_<noun>_id` when several
    do."""
    noun = kind.noun
    if is_short_prefix(given):
        try:
            await kind.get(given)
        except ApiFailure as failure:
            if failure.code != f"{noun}_not_found":
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
    found = await kind.match(given, LISTED)
    if len(found.ids) == 1 and not found.more:
        return found.ids[0]
    if not found.ids:
        raise ApiFailure(
            f"no {noun} {given!r} (no {noun} id starts with it)",
            ExitCode.FAILED,
            status=404,
            code=f"{noun}_not_found",
        )
    listed = ", ".join(found.ids) + (", …" if found.more else "")
    count = f"more than {len(found.ids)}" if found.more else str(len(found.ids))
    raise ApiFailure(
        f"{noun} id {given!r} is ambiguous: {count} {noun}s start with it ({listed}); "
        "give more of the id",
        ExitCode.USAGE,
        code=f"ambiguous_{noun}_id",
        details={f"{noun}Ids": found.ids},
    )


async def full_run_id(api: ApiClient, given: str) -> str:
    """The id of the one run `given` (a RUN argument) names (`full_id`)."""
    kind = IdKind(
        "run", lambda prefix, limit: api.runs.match_prefix(prefix, limit=limit), api.runs.get
    )
    return await full_id(kind, given)


async def full_deployment_id(api: ApiClient, given: str) -> str:
    """The id of the one deployment `given` (a deployment ID argument) names (`full_id`)."""
    kind = IdKind(
        "deployment",
        lambda prefix, limit: api.deployments.match_prefix(prefix, limit=limit),
        api.deployments.get,
    )
    return await full_id(kind, given)
