"""The engine side of SPAWNER and MERGE: the `FanoutPort` over the store, and the merge's read
of its children (outputs too large for a row go to the payload store)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.records import ChildRow, ClaimedStep, VersionRecord
from engine.store import Store, UnknownWorkflow
from schemas.definitions import MergeVertex, SpawnerConfig, Workflow
from schemas.errors import FailureKind, StepFailure
from vertices import merge
from vertices.spawner import ChildSpec

INLINE_OUTPUT_MAX_BYTES = 256 * 1024
"""A merge output larger than this is stored in the payload store and referenced."""


@dataclass
class StoreFanoutPort:
    """`vertices.spawner.FanoutPort` for one claimed spawner step."""

    store: Store
    step: ClaimedStep
    child: VersionRecord
    payload_high_water_bytes: int

    async def existing_children(self) -> int:
        return await self.store.existing_children(self.step.run_id, self.step.vertex_id)

    async def ready_depth(self) -> int:
        return await self.store.ready_depth()

    async def payload_pressure(self) -> bool:
        return await self.store.payload_bytes() > self.payload_high_water_bytes

    async def quota_left(self) -> int | None:
        return await self.store.quota_left(self.step.tenant_id)

    async def create_children(self, total: int, batch: Sequence[ChildSpec]) -> int:
        rows = [ChildRow(spec.index, spec.input, spec.item) for spec in batch]
        return await self.store.create_children(self.step, self.child, total, rows)


async def child_version(store: Store, config: SpawnerConfig) -> VersionRecord:
    """The child workflow a spawner starts: `name` (latest version) or `name@version`."""
    name, _, version = config.workflow.partition("@")
    try:
        return await store.get_version(name, int(version) if version else None)
    except UnknownWorkflow as exc:
        raise StepFailure(
            FailureKind.SPAWN_FAILED,
            f"cannot create children: {exc}; publish the child workflow first",
        ) from exc


async def run_merge(
    store: Store, step: ClaimedStep, workflow: Workflow, vertex: MergeVertex
) -> dict[str, Any]:
    """Evaluate the join of the spawner this MERGE depends on."""
    spawner_id = next(
        (d for d in vertex.depends_on if workflow.vertices[d].type.value == "SPAWNER"), None
    )
    if spawner_id is None:
        raise StepFailure(FailureKind.INVALID_CONFIG, "a MERGE must depend on one SPAWNER")
    counts: merge.ChildCounts = await store.spawner_counts(step.run_id, spawner_id)
    children = await store.children_outputs(step.run_id, spawner_id)
    outputs = [output if status == "SUCCEEDED" else None for _, status, output in children]
    result = merge.evaluate(vertex.config, counts, outputs)
    size = len(json.dumps(result["outputs"], separators=(",", ":")))
    if size <= INLINE_OUTPUT_MAX_BYTES:
        return result
    payload_id = await store.put_payload(step.run_id, result["outputs"])
    return {
        "counts": result["counts"],
        "outputsRef": {"payloadId": payload_id, "count": len(outputs), "bytes": size},
    }
