"""Vertex implementations: one module per vertex type plus the shared contract.

Vertices decide; the engine records. None of them touches the store or imports the engine
(docs/architecture.md, 'Packages and the dependency direction').
"""

from vertices.contract import AwaitChildren, Outcome, Parked, StepContext, Succeeded, TimeoutTier
from vertices.gateway import CallGuard, GatewayTimeouts
from vertices.merge import ChildCounts, JoinState
from vertices.spawner import ChildSpec, FanoutLimits, FanoutPort

__all__ = [
    "AwaitChildren",
    "CallGuard",
    "ChildCounts",
    "ChildSpec",
    "FanoutLimits",
    "FanoutPort",
    "GatewayTimeouts",
    "JoinState",
    "Outcome",
    "Parked",
    "StepContext",
    "Succeeded",
    "TimeoutTier",
]
