"""The operations layer: the one API every front door calls (REST routes, CLI commands, tests and
benchmarks that act as users). Async, typed, and free of HTTP and CLI types: it takes and
returns plain values and the view models of `engine.operations.views`, and refuses with the
`OperationError` tree of `schemas.errors`.

    ops = Operations(runtime)
    (published,) = await ops.workflows.publish(document)
    run = (await ops.runs.submit("renewals", {"day": "2026-12-01"}, tenant_id="acme")).run
    await ops.actions.retry(run.id, actor="key:3f2a")

Each group lives in its own module: `workflows`, `runs`, `actions` (operator actions),
`deployments` (gradual deployments and serving versions),
`settings` (destination caps, tenant limits and quotas, services), `keys` (API keys),
`secrets` (encrypted values workflows reference),
`health` (database and Redis probes, schema revision), `metrics` (figures for monitoring) and
`destination_history` (the recent AIMD limit and in-flight calls of every destination, sampled
in this process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.operations.actions import OperatorActions
from engine.operations.deployments import DeploymentOperations
from engine.operations.destination_history import DestinationHistory
from engine.operations.health import HealthOperations
from engine.operations.keys import KeyOperations
from engine.operations.metrics import MetricsOperations
from engine.operations.runs import RunOperations
from engine.operations.secrets import SecretOperations
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
        self.deployments = DeploymentOperations(runtime)
        self.settings = SettingsOperations(runtime)
        self.keys = KeyOperations(runtime)
        self.secrets = SecretOperations(runtime)
        self.health = HealthOperations(runtime)
        self.metrics = MetricsOperations(runtime)
        self.destination_history = DestinationHistory(self.settings.destinations, runtime.clock)


__all__ = [
    "DeploymentOperations",
    "DestinationHistory",
    "HealthOperations",
    "KeyOperations",
    "MetricsOperations",
    "Operations",
    "OperatorActions",
    "RunOperations",
    "SecretOperations",
    "SettingsOperations",
    "WorkflowOperations",
]
