"""Runs: submit, read, list with keyset pagination, children, logs, wait for an end."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runtime import Runtime


class RunOperations:
    """Runs: submit, read, list with keyset pagination, children, logs, wait for an end."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
