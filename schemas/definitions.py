"""Typed, immutable workflow definitions parsed from an authoring document.

These pydantic models mirror `workflow.schema.json` (the schema is the published contract and
is checked first; these models give the rest of the code typed access). Field names are the
document's camelCase via aliases; Python code uses snake_case.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


GRADUAL_DEPLOY = "gradual_deploy"
"""The system workflow a deployment runs (docs/architecture.md, 'Versions and deployments')."""
RESERVED_WORKFLOWS = frozenset({GRADUAL_DEPLOY})
"""Workflow names only the engine publishes and starts: no document may use them."""


class VertexType(StrEnum):
    """A vertex's type."""

    GATEWAY = "GATEWAY"
    SPAWNER = "SPAWNER"
    MERGE = "MERGE"
    DEPLOY_STAGE = "DEPLOY_STAGE"
    """A system vertex: one stage of a `gradual_deploy` run. Not in workflow.schema.json, so
    no authored document can hold one; only the engine's own system workflow does."""


class RetryPolicy(_Model):
    """In-process HTTP retries of a GATEWAY call (5xx, 429, I/O errors)."""

    max_attempts: int = Field(default=4, ge=1, le=10)
    """Total attempts including the first. Default 4 (waits 1 s, 2 s, 4 s)."""
    base_delay_ms: int = Field(default=1000, ge=0, le=60_000)
    """Wait before retry n is `base * 2^(n-1)` ms. Default 1000."""
    jitter: Literal["none", "full"] = "none"
    """`full`: each wait is uniform in [0, computed wait]. Default none."""


MIN_TIMEOUT_MS = 100
"""The smallest `timeoutMs` a workflow may be published with (workflow.schema.json's
`minimum`). One attempt's timeout covers the DNS lookup, the TCP and TLS handshakes (several
round trips to a destination that is, by the egress policy, a public address) and reading the
whole answer; below 100 ms even a nearby service misses it on ordinary jitter, and a timeout
is overload to admission: it cuts the destination's limit and feeds its breakers for every
workflow calling it. 100 ms still lets a fast service in the same region answer (peers set
coarser floors: AWS Step Functions' TimeoutSeconds starts at 1 s), and stays below the
300 ms the tests give a call that must time out."""

MAX_TIMEOUT_MS = 600_000
"""The largest `timeoutMs` (10 minutes), and of the timeout tiers' settings."""

LOADED_MIN_TIMEOUT_MS = 1
"""The smallest `timeoutMs` the model accepts: versions published before `MIN_TIMEOUT_MS`
existed are stored with it and must still load and run; only publication holds the floor."""


class GatewayConfig(_Model):
    """One outbound HTTP call. String values may hold `{{ }}` expressions."""

    url: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    headers: dict[str, Any] = Field(default_factory=dict)
    query: dict[str, Any] = Field(default_factory=dict)
    body: Any = None
    timeout_ms: int | None = Field(default=None, ge=LOADED_MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS)
    """Per-vertex timeout; default: the run's timeout tier (collect 60 s, process 30 s)."""
    destination: str | None = None
    """Admission key; default: the URL's scheme://host:port."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    success_codes: list[int] | None = None
    """Statuses that count as success; default any 2xx."""


class SpawnerConfig(_Model):
    """Fan-out: one durable child run of `workflow` per element of `items`."""

    items: Any
    """An expression (usually `{{ … }}`) that evaluates to a list."""
    workflow: str
    """The child workflow's name, optionally `name@version`."""
    input: Any = None
    """Child input; may use `item` and `index`. Default: the item itself."""


class FailureTolerance(_Model):
    max_failure_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    max_failures: int | None = Field(default=None, ge=0)


class MergeConfig(_Model):
    """The join of one SPAWNER's children."""

    tolerate_child_failures: list[Literal["FAILED", "CANCELLED"]] = Field(default_factory=list)
    """Child statuses the join may tolerate. Default none: any failed child fails the join."""
    failure_tolerance: FailureTolerance | None = None
    fail_fast: bool = False
    """Close the join as soon as the tolerance is certainly exceeded."""


class _VertexBase(_Model):
    depends_on: list[str] = Field(default_factory=list)
    max_auto_retries: int = Field(default=3, ge=0, le=100)
    """Redispatches after an `external_overload`; 0 = never. Default 3."""


class GatewayVertex(_VertexBase):
    type: Literal[VertexType.GATEWAY]
    config: GatewayConfig


class SpawnerVertex(_VertexBase):
    type: Literal[VertexType.SPAWNER]
    config: SpawnerConfig


class MergeVertex(_VertexBase):
    type: Literal[VertexType.MERGE]
    config: MergeConfig = Field(default_factory=MergeConfig)


class DeployStageConfig(_Model):
    """Which stage of its deployment a DEPLOY_STAGE step holds (the stage's weight, minimum
    runs and duration are the deployment's, read when the step executes)."""

    stage: int = Field(ge=1)
    """1-based, in the deployment's order."""


class DeployStageVertex(_VertexBase):
    """A system vertex (see `VertexType.DEPLOY_STAGE`); the engine executes it."""

    type: Literal[VertexType.DEPLOY_STAGE]
    config: DeployStageConfig


Vertex = Annotated[
    GatewayVertex | SpawnerVertex | MergeVertex | DeployStageVertex, Field(discriminator="type")
]


class Workflow(_Model):
    """One workflow document."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    vertices: dict[str, Vertex]

    def roots(self) -> list[str]:
        """Vertices with no dependencies, in document order."""
        return [vid for vid, v in self.vertices.items() if not v.depends_on]

    def dependants(self, vertex_id: str) -> list[str]:
        """Vertices that list `vertex_id` in `dependsOn`, in document order."""
        return [vid for vid, v in self.vertices.items() if vertex_id in v.depends_on]
