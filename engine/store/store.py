"""`Store`: every role of the durable store on one pair of database engines.

Each role is a class of its own module, and the rest of the engine depends on the role it uses:
the worker on `WorkQueue`, the vertices on `FanoutStore`, the operations layer on
`RunCatalogue`, `OperatorSettingsStore`, `KeyStore` (API keys) and `ProbeStore` (health and
schema checks). Build with `Store.open`, end with `close`.
"""

from __future__ import annotations

from engine.store.catalogue import RunCatalogue
from engine.store.core import ClaimLost, UnknownWorkflow, definition_hash
from engine.store.fanout import FanoutStore
from engine.store.keys import KeyStore
from engine.store.probes import ProbeStore
from engine.store.queue import WorkQueue
from engine.store.settings_store import OperatorSettingsStore


class Store(RunCatalogue, WorkQueue, FanoutStore, OperatorSettingsStore, KeyStore, ProbeStore):
    """Async access to the durable state. Build with `Store.open`."""


__all__ = ["ClaimLost", "Store", "UnknownWorkflow", "definition_hash"]
