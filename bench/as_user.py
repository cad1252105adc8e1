"""What the benchmarks do as users, through the operations layer (`engine.operations`), the
API every front door calls: publish workflows, submit runs, read a run and page its children.

Reads of engine internals that no operation exposes (a bare status poll that does not decode
a 50,000-item input, aggregate timestamps of child steps, bulk run creation for a load
generator) stay in the benchmark that needs them, each with the reason there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from engine.operations import Operations
from engine.operations.views import PublishResult, RunSummary
from schemas.definitions import Workflow

CHILD_PAGE = 500
"""Children read per page (the largest page `ops.runs.children` gives)."""
MAX_CHILD_PAGES = 10_000
"""Bound on the pages `children` reads: 5,000,000 children."""


def documents(workflows: Sequence[Workflow]) -> list[dict[str, Any]]:
    """The workflows as the documents a user publishes."""
    return [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in workflows]


async def publish(ops: Operations, workflows: Sequence[Workflow]) -> list[PublishResult]:
    """Publish `workflows` in one transaction (a SPAWNER's child may come after it)."""
    return await ops.workflows.publish(documents(workflows))


async def submit(
    ops: Operations, workflow: str, run_input: Any, *, tenant_id: str = "default"
) -> str:
    """Submit a run of the latest version of `workflow`; its id. Workers are woken by the
    submission itself."""
    return (await ops.runs.submit(workflow, run_input, tenant_id=tenant_id)).run.id


async def children(ops: Operations, run_id: str) -> AsyncIterator[RunSummary]:
    """Every child of the run in item order, a page of `CHILD_PAGE` at a time (bounded)."""
    cursor: str | None = None
    for _ in range(MAX_CHILD_PAGES):
        page = await ops.runs.children(run_id, limit=CHILD_PAGE, cursor=cursor)
        for child in page.items:
            yield child
        cursor = page.next
        if cursor is None:
            return
