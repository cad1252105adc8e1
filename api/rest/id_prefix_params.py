"""The query parameters of `GET /run-ids` and `GET /deployment-ids`: one prefix of an id and
how many matches to list, declared once so both routes accept and document the same thing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from api.rest.errors import in_words
from engine.operations.id_prefixes import ID_DIGITS, MAX_MATCHES, MIN_PREFIX_DIGITS, PREFIX_PATTERN


def prefix_query(noun: str) -> Any:
    """The `prefix` parameter of the lookup of `noun` ids: `Annotated[str, prefix_query(…)]`."""
    return Query(
        min_length=MIN_PREFIX_DIGITS,
        # the 32 digits of an id and its 4 hyphens
        max_length=ID_DIGITS + 4,
        # In the schema, so that what it accepts the operation accepts (hyphens anywhere: the
        # operation drops them before it reads the digits).
        pattern=in_words(
            PREFIX_PATTERN,
            f"{MIN_PREFIX_DIGITS} to {ID_DIGITS} hex digits of an id (0-9, a-f), hyphens allowed",
        ),
        description=f"{MIN_PREFIX_DIGITS} to {ID_DIGITS} hex digits of a {noun} id, any case, "
        "with or without its hyphens (`3f2a9c1e`, as the monitor shows it).",
    )


MatchLimit = Annotated[
    int,
    Query(
        ge=1,
        le=MAX_MATCHES,
        description=f"How many of the matching ids to list, at most {MAX_MATCHES}; `more` says "
        "whether there are others (give more digits).",
    ),
]
"""The `limit` of an id lookup: how many of the matching ids to list."""
