"""Operator settings: destination caps, tenant rate limits and run quotas, services."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runtime import Runtime


class SettingsOperations:
    """Operator settings: destination caps, tenant rate limits and run quotas, services."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
