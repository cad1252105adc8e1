"""The durable store: every SQL statement SchemaBridge runs lives in this package.

`Store` is the one object that holds the database engines; it combines the store's roles, one
class per module (see `engine.store.store`).
"""

from engine.store.store import (
    ClaimLost,
    Store,
    UnknownWorkflow,
    definition_hash,
    stored_document,
)

__all__ = ["ClaimLost", "Store", "UnknownWorkflow", "definition_hash", "stored_document"]
