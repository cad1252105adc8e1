"""Operator actions on runs: retry, resolve, start over, batch retry, reprocess, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runtime import Runtime


class OperatorActions:
    """Operator actions on runs: retry, resolve, start over, batch retry, reprocess, cancel."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
