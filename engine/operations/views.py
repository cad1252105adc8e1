"""What operations take and return: filters, pages and the views of workflows, runs and steps.

Views are pydantic models serialised with camelCase names (the workflow documents' own style),
so a REST route can return one as it is and a CLI can print it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class View(BaseModel):
    """Base of every view: immutable, camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


T = TypeVar("T")


class Page(View, Generic[T]):
    """One page of a keyset-paginated list. `next` is the opaque cursor of the following page
    (None on the last one)."""

    items: list[T]
    next: str | None = None


@dataclass(frozen=True)
class RunFilter:
    """Which runs a list (or a batch action) covers. Every field is optional; set fields are
    combined with AND. `created_after`/`created_before` are epoch seconds (inclusive/exclusive)."""

    workflow: str | None = None
    version: int | None = None
    status: str | None = None
    tenant: str | None = None
    parent: str | None = None
    """Only the children of this run."""
    created_after: float | None = None
    created_before: float | None = None
    roots_only: bool = False
    """Only runs that no spawner started (ignored when `parent` is set)."""
