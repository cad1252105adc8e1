"""Workflows: publish, validate, list, read versions, and the graph of a version."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runtime import Runtime


class WorkflowOperations:
    """Workflows: publish, validate, list, read versions, and the graph of a version."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
