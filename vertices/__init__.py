"""Vertex implementations: one module per vertex type plus the shared contract.

Vertices decide; the engine records. None of them touches the store or imports the engine
(docs/architecture.md, 'Packages and the dependency direction').
"""

from vertices.contract import (
    AwaitingChildren,
    Parked,
    StepContext,
    Succeeded,
    TimeoutTier,
    VertexOutcome,
)
from vertices.gateway import CallGuard, GatewayTimeouts
from vertices.merge import ChildCounts, JoinState
from vertices.spawner import ChildSpec, FanoutLimits, FanoutPort

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
