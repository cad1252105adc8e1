"""The operations layer: the one API every front door calls (REST routes, CLI commands, tests and
benchmarks that act as users). Async, typed, and free of HTTP and CLI types: it takes and
returns plain values and the view models of `engine.operations.views`, and refuses with the
`OperationError` tree of `schemas.errors`.

    ops = Operations(runtime)
    (published,) = await ops.workflows.publish(document)
    run = (await ops.runs.submit("renewals", {"day": "2026-12-01"}, tenant_id="acme")).run
    await ops.actions.retry(run.id, actor="key:3f2a")

Each group lives in its own module: `workflows`, `runs`, `actions` (operator actions) and
`settings` (destination caps, tenant limits and quotas, services).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.operations.actions import OperatorActions
from engine.operations.runs import RunOperations
from engine.operations.settings import SettingsOperations
from engine.operations.workflows import WorkflowOperations

if TYPE_CHECKING:
    from engine.runtime import Runtime


class Operations:
    """Every operation, grouped. Build one per process from its `Runtime`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.workflows = WorkflowOperations(runtime)
        self.runs = RunOperations(runtime)
        self.actions = OperatorActions(runtime, runs=self.runs)
        self.settings = SettingsOperations(runtime)


__all__ = [
    "Operations",
    "OperatorActions",
    "RunOperations",
    "SettingsOperations",
    "WorkflowOperations",
]
