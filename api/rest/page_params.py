"""The query parameters of a list read in pages (`GET /runs`, `GET /audit`): the `cursor`
that continues it and the `limit` of one page, declared once so the lists accept and document
them alike."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from engine.operations.pagination import MAX_LIMIT

Cursor = Annotated[
    str | None,
    Query(description="The `next` of the previous page.", max_length=2_000),
]


def page_limit(items: str) -> Any:
    """The `limit` of a page of `items` ("Runs"): `Annotated[int, page_limit(…)] = 50`."""
    return Query(
        ge=1,
        le=MAX_LIMIT,
        description=f"{items} in this page, at most {MAX_LIMIT}; `next` continues the list.",
    )
