"""`Store`: every role of the durable store on one pair of database engines.

Each role is a class of its own module: `WorkQueue` (claims, leases, results: the worker's),
`FanoutStore` (child runs and payloads: the fan-out's), `RunCatalogue` (versions, runs, steps,
logs), `OperatorActionsStore` (retry, resolve, start over, reprocess, cancel),
`DeploymentStore` (serving versions, deployments), `OperatorSettingsStore` (caps, tenant
limits, quotas), `KeyStore` (API keys), `SecretStore` (encrypted secrets), `AuditStore` (the
audit trail of administrative changes, which their writers append to), `MonitorStore` (a
fan-out's long tail, the progress of listed runs), `RunRetentionStore` (the deletion of ended
run trees) and `ProbeStore` (health and schema checks).
Callers take the combined `Store`. Build with `Store.open`, end with `close`.
"""

from __future__ import annotations

from engine.store.actions_store import OperatorActionsStore
from engine.store.audit import AuditStore
from engine.store.catalogue import RunCatalogue
from engine.store.core import ClaimLost, UnknownWorkflow, definition_hash, stored_document
from engine.store.deployments import DeploymentStore
from engine.store.fanout import FanoutStore
from engine.store.keys import KeyStore
from engine.store.monitor import MonitorStore
from engine.store.probes import ProbeStore
from engine.store.queue import WorkQueue
from engine.store.retention_store import RunRetentionStore
from engine.store.secrets_store import SecretStore
from engine.store.settings_store import OperatorSettingsStore


class Store(
    DeploymentStore,
    RunCatalogue,
    OperatorActionsStore,
    WorkQueue,
    FanoutStore,
    OperatorSettingsStore,
    KeyStore,
    SecretStore,
    AuditStore,
    ProbeStore,
    MonitorStore,
    RunRetentionStore,
):
    """Async access to the durable state. Build with `Store.open`."""


__all__ = ["ClaimLost", "Store", "UnknownWorkflow", "definition_hash", "stored_document"]
