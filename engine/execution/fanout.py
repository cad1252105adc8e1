"""The engine side of SPAWNER and MERGE: the `FanoutPort` over the store, and the merge's read
of its children (outputs too large for a row go to the payload store)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.execution import child_causes
from engine.store import Store, UnknownWorkflow, pins
from engine.store.children import CopiedChunk
from engine.store.records import ChildRow, ClaimedStep, VersionRecord
from schemas.definitions import MergeVertex, SpawnerConfig, Workflow
from schemas.errors import FailureKind, StepFailure
from vertices import merge
from vertices.spawner import ChildSpec

INLINE_OUTPUT_MAX_BYTES = 256 * 1024
"""A merge output larger than this is stored in the payload store and referenced."""
MERGE_PAGE = 5000
"""Children read per query by a merge (one payload chunk each once past the inline limit)."""
LAST_ITEM_INDEX = 2**31 - 1
"""The largest item index the store holds (a 32-bit column)."""
MERGE_COPIES_AT_ONCE = 4
"""Chunks PostgreSQL assembles at the same time for one merge (each on its own connection)."""


@dataclass
class StoreFanoutPort:
    """`vertices.spawner.FanoutPort` for one claimed spawner step."""

    store: Store
    step: ClaimedStep
    child: VersionRecord
    payload_high_water_bytes: int
    notify: Callable[[], Awaitable[None]] | None = None

    async def existing_children(self) -> int:
        return await self.store.existing_children(self.step.run_id, self.step.vertex_id)

    async def ready_depth(self) -> int:
        return await self.store.ready_depth()

    async def payload_pressure(self) -> bool:
        return await self.store.payload_bytes() > self.payload_high_water_bytes

    async def quota(self) -> tuple[int, int] | None:
        return await self.store.get_quota(self.step.tenant_id)

    async def create_children(self, total: int, batch: Sequence[ChildSpec]) -> int:
        rows = [ChildRow(spec.index, spec.input_json, spec.item) for spec in batch]
        created = await self.store.create_children(self.step, self.child, total, rows)
        if created and self.notify is not None:
            await self.notify()  # idle workers start the new children now, not at their poll
        return created


async def child_version(
    store: Store, config: SpawnerConfig, pinned: dict[str, int] | None
) -> VersionRecord:
    """The child workflow a spawner starts: `name@version` as written, else the version its
    run tree pinned when the root run was created (`pinned`, the run's `pinned_versions`),
    else its serving version (runs created before versions were pinned, and child workflows
    first published after the root run was created)."""
    name, version = pins.pinned_version(config, pinned)
    try:
        if version is None:
            return await store.serving_version(name)
        return await store.get_version(name, version)
    except UnknownWorkflow as exc:
        raise StepFailure(
            FailureKind.SPAWN_FAILED,
            f"cannot create children: {exc}; publish the child workflow first",
        ) from exc


async def run_merge(
    store: Store, step: ClaimedStep, workflow: Workflow, vertex: MergeVertex
) -> dict[str, Any]:
    """Evaluate the join of the spawner this MERGE depends on.

    The tolerance is decided on the spawner's counters alone. The children's outputs are then
    read a page at a time as JSON text and copied without being parsed: small fan-outs keep
    them inline; once they pass `INLINE_OUTPUT_MAX_BYTES` every page goes to the payload
    store as one chunk, so memory stays at one page however many children there are, and a
    100,000-child merge costs string joins, not a million JSON values decoded and encoded.
    """
    spawner_id = next(
        (d for d in vertex.depends_on if workflow.vertices[d].type.value == "SPAWNER"), None
    )
    if spawner_id is None:
        raise StepFailure(FailureKind.INVALID_CONFIG, "a MERGE must depend on one SPAWNER")
    counts: merge.ChildCounts = await store.spawner_counts(step.run_id, spawner_id)
    try:
        merge.check(vertex.config, counts)
    except StepFailure as failure:
        # Read only now, when the join fails: a join that holds pays nothing.
        cancelled = merge.intolerable_cancelled(vertex.config, counts)
        raise await child_causes.with_cause(
            store, failure, step.run_id, spawner_id, failed=counts.failed, cancelled=cancelled
        ) from None
    writer = _OutputsWriter(store, step.run_id)
    after = -1
    for _ in range(counts.total // MERGE_PAGE + 2):
        if writer.ref is not None and store.assembles_payloads:
            # Past the inline limit PostgreSQL assembles the other chunks itself: the
            # outputs never travel to this process.
            await _copy_in_database(
                store, step.run_id, spawner_id, writer, writer.ref, after=after, total=counts.total
            )
            break
        page = await store.children_outputs(
            step.run_id, spawner_id, after_index=after, limit=MERGE_PAGE
        )
        if not page:
            break
        # A child that did not succeed contributes null (its output, if any, is not a result).
        await writer.add([_result(status, raw) for _, status, raw in page])
        after = page[-1][0]
    return {"counts": counts.as_dict(), **await writer.finish()}


async def _copy_in_database(
    store: Store,
    run_id: str,
    spawner_id: str,
    writer: _OutputsWriter,
    ref: str,
    *,
    after: int,
    total: int,
) -> None:
    """Store the children after `after` as chunks of `ref` (the writer's payload), up to
    `MERGE_COPIES_AT_ONCE` at a time: one INSERT … SELECT per range of `MERGE_PAGE` item
    indexes (a spawner numbers its children 0 … total-1), then a last sweep for anything past
    `total`."""
    first_chunk = writer.chunks
    ranges = [(lo, min(lo + MERGE_PAGE, total) - 1) for lo in range(after + 1, total, MERGE_PAGE)]
    gate = asyncio.Semaphore(MERGE_COPIES_AT_ONCE)

    async def copy(number: int, lo: int, hi: int) -> CopiedChunk:
        async with gate:
            return await store.copy_children_outputs(
                run_id, spawner_id, ref=ref, chunk=first_chunk + number, after_index=lo - 1,
                last_index=hi, limit=MERGE_PAGE,
            )  # fmt: skip

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(copy(i, lo, hi)) for i, (lo, hi) in enumerate(ranges)]
    for task in tasks:
        if task.result().count:
            writer.copied(task.result().count, task.result().size_bytes)
    last = max(after, total - 1)
    for number in range(len(ranges), len(ranges) + 1_000):  # bounded; normally one empty pass
        sweep = await store.copy_children_outputs(
            run_id, spawner_id, ref=ref, chunk=first_chunk + number, after_index=last,
            last_index=LAST_ITEM_INDEX, limit=MERGE_PAGE,
        )  # fmt: skip
        if not sweep.count:
            return
        writer.copied(sweep.count, sweep.size_bytes)
        last = sweep.last_index


def _result(status: str, raw: str | None) -> str:
    return raw if status == "SUCCEEDED" and raw is not None else "null"


@dataclass
class _OutputsWriter:
    """Collects children's outputs (JSON texts) inline, then as payload chunks."""

    store: Store
    run_id: str
    inline: list[str] = field(default_factory=list)
    inline_bytes: int = 0
    ref: str | None = None
    chunks: int = 0
    count: int = 0
    total_bytes: int = 0

    async def add(self, outputs: list[str]) -> None:
        # Bytes of "[a,b,…]" in UTF-8 (what the payload store counts), commas and brackets too.
        size = sum(len(text.encode()) for text in outputs) + len(outputs) + 1
        self.count += len(outputs)
        self.total_bytes += size
        if self.ref is None and self.inline_bytes + size <= INLINE_OUTPUT_MAX_BYTES:
            self.inline.extend(outputs)
            self.inline_bytes += size
            return
        if self.ref is None:
            self.ref = str(uuid.uuid4())
        if self.inline:
            await self._chunk(self.ref, self.inline)
            self.inline = []
        await self._chunk(self.ref, outputs)

    def copied(self, count: int, size_bytes: int) -> None:
        """A chunk the store assembled itself was added."""
        self.count += count
        self.total_bytes += size_bytes
        self.chunks += 1

    async def _chunk(self, ref: str, outputs: list[str]) -> None:
        text = "[" + ",".join(outputs) + "]"
        await self.store.put_payload_json(self.run_id, text, ref=ref, chunk=self.chunks)
        self.chunks += 1

    async def finish(self) -> dict[str, Any]:
        if self.ref is None:
            return {"outputs": json.loads("[" + ",".join(self.inline) + "]")}
        ref = {"payloadRef": self.ref, "count": self.count, "chunks": self.chunks}
        return {"outputsRef": {**ref, "bytes": self.total_bytes}}
