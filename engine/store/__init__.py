"""The durable store: every SQL statement SchemaBridge runs lives in this package.

`Store` is the one object that holds the database engines; it combines the store's roles, one
class per module (see `engine.store.store`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.store.store import (
        ClaimLost,
        Store,
        UnknownWorkflow,
        definition_hash,
        stored_document,
    )


def __getattr__(name: str) -> Any:
    """The names below, imported on first use: a module of the package (`engine.store.db`,
    which `schemabridge db upgrade` needs) imports without every role of the `Store`."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("engine.store.store"), name)


__all__ = ["ClaimLost", "Store", "UnknownWorkflow", "definition_hash", "stored_document"]
