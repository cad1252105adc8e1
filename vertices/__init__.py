"""Vertex implementations: one module per vertex type plus the shared contract.

Vertices decide; the engine records. None of them touches the store or imports the engine
(docs/architecture.md, 'Packages and the dependency direction').

The public names are loaded on first use (PEP 562 `__getattr__`): the gateway brings in
aiohttp, which a process that only reads the egress policy (`engine.settings`, every CLI
command) should not pay for at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vertices.contract import (
        AwaitingChildren,
        Parked,
        StepContext,
        Succeeded,
        TimeoutTier,
        VertexOutcome,
    )
    from vertices.fanout_limits import FanoutLimits
    from vertices.gateway import CallGuard, GatewayTimeouts
    from vertices.merge import ChildCounts, JoinState
    from vertices.spawner import ChildSpec, FanoutPort

_HOME = {
    "AwaitingChildren": "contract",
    "Parked": "contract",
    "StepContext": "contract",
    "Succeeded": "contract",
    "TimeoutTier": "contract",
    "VertexOutcome": "contract",
    "CallGuard": "gateway",
    "GatewayTimeouts": "gateway",
    "ChildCounts": "merge",
    "JoinState": "merge",
    "ChildSpec": "spawner",
    "FanoutLimits": "fanout_limits",
    "FanoutPort": "spawner",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'vertices' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vertices.{home}"), name)


__all__ = [
    "AwaitingChildren",
    "CallGuard",
    "ChildCounts",
    "ChildSpec",
    "FanoutLimits",
    "FanoutPort",
    "GatewayTimeouts",
    "JoinState",
    "Parked",
    "StepContext",
    "Succeeded",
    "TimeoutTier",
    "VertexOutcome",
]
