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
`secrets` (encrypted values workflows reference), `retention` (deleting ended runs now),
`audit` (who changed what: the audit trail),
`health` (database and Redis probes, schema revision), `metrics` (figures for monitoring) and
`destination_history` (the recent AIMD limit and in-flight calls of every destination, sampled
in this process).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.operations.actions import OperatorActions
    from engine.operations.audit import AuditOperations
    from engine.operations.deployments import DeploymentOperations
    from engine.operations.destination_history import DestinationHistory
    from engine.operations.health import HealthOperations
    from engine.operations.keys import KeyOperations
    from engine.operations.metrics import MetricsOperations
    from engine.operations.retention import RetentionOperations
    from engine.operations.runs import RunOperations
    from engine.operations.secrets import SecretOperations
    from engine.operations.settings import SettingsOperations
    from engine.operations.workflows import WorkflowOperations
    from engine.runtime import Runtime


class Operations:
    """Every operation, grouped. Build one per process from its `Runtime`.

    Each group is built (and its module imported) the first time it is used: a command that
    needs one group (`schemabridge keys list`) does not import the validator, networkx and the
    run views the others need, which take most of a second."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @cached_property
    def workflows(self) -> WorkflowOperations:
        from engine.operations.workflows import WorkflowOperations

        return WorkflowOperations(self.runtime)

    @cached_property
    def runs(self) -> RunOperations:
        from engine.operations.runs import RunOperations

        return RunOperations(self.runtime)

    @cached_property
    def actions(self) -> OperatorActions:
        from engine.operations.actions import OperatorActions

        return OperatorActions(self.runtime, runs=self.runs)

    @cached_property
    def deployments(self) -> DeploymentOperations:
        from engine.operations.deployments import DeploymentOperations

        return DeploymentOperations(self.runtime)

    @cached_property
    def settings(self) -> SettingsOperations:
        from engine.operations.settings import SettingsOperations

        return SettingsOperations(self.runtime)

    @cached_property
    def keys(self) -> KeyOperations:
        from engine.operations.keys import KeyOperations

        return KeyOperations(self.runtime)

    @cached_property
    def secrets(self) -> SecretOperations:
        from engine.operations.secrets import SecretOperations

        return SecretOperations(self.runtime)

    @cached_property
    def retention(self) -> RetentionOperations:
        from engine.operations.retention import RetentionOperations

        return RetentionOperations(self.runtime)

    @cached_property
    def audit(self) -> AuditOperations:
        from engine.operations.audit import AuditOperations

        return AuditOperations(self.runtime)

    @cached_property
    def health(self) -> HealthOperations:
        from engine.operations.health import HealthOperations

        return HealthOperations(self.runtime)

    @cached_property
    def metrics(self) -> MetricsOperations:
        from engine.operations.metrics import MetricsOperations

        return MetricsOperations(self.runtime)

    @cached_property
    def destination_history(self) -> DestinationHistory:
        from engine.operations.destination_history import DestinationHistory

        return DestinationHistory(self.settings.destinations, self.runtime.clock)


__all__ = ["Operations"]
