"""The fan-out role of the store: children, spawner counters, payloads, reprocess."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from engine.store import children as fanout
from engine.store import recovery
from engine.store import results as results_
from engine.store.core import (
    ClaimLost,
    StoreCore,
    step_rows,
)
from engine.store.records import (
    ChildRow,
    ClaimedStep,
    LogLine,
    VersionRecord,
)
from schemas.definitions import Workflow


class FanoutStore(StoreCore):
    """What SPAWNER and MERGE need: create children in batches, read counters and children's
    outputs, store payloads, and revive dead letters."""

    async def existing_children(self, run_id: str, vertex_id: str) -> int:
        async with self._engines.read.connect() as conn:
            return await fanout.existing_children(conn, run_id, vertex_id)

    async def create_children(
        self, step: ClaimedStep, child: VersionRecord, total: int, batch: Sequence[ChildRow]
    ) -> int:
        """Create, in one transaction, the children in `batch` that do not exist yet.

        Raises ClaimLost when the spawner's claim is no longer live (its lease expired and
        another worker took it over), so a stale spawner stops creating children.
        """
        now = self._clock.now()
        workflow = child.workflow
        async with self._engines.write.begin() as conn:
            created = await fanout.insert_children(
                conn,
                parent=step,
                child=child,
                batch=batch,
                step_rows=lambda run_id: step_rows(run_id, step.tenant_id, workflow, now),
                now=now,
            )
            # Checked last, so this transaction locks child runs before the spawner step, in
            # the same order as a flush that ends children (child runs, then the spawner's
            # counters): the two cannot deadlock. A lost claim rolls the batch back.
            if not await fanout.claim_is_live(conn, step, total):
                raise ClaimLost(f"spawner {step.run_id}/{step.vertex_id} lost its claim")
        await self._grew(created * (1 + len(workflow.vertices)))
        return created

    async def spawner_counts(self, run_id: str, vertex_id: str) -> Any:
        async with self._engines.read.connect() as conn:
            return fanout.counts_of(await fanout.read_counters(conn, run_id, vertex_id))

    async def failed_children_errors(self, run_id: str, vertex_id: str, *, limit: int) -> list[Any]:
        """The errors (as stored) of a spawner's first `limit` FAILED children."""
        async with self._engines.read.connect() as conn:
            return await fanout.failed_children_errors(conn, run_id, vertex_id, limit=limit)

    async def children_outputs(
        self, run_id: str, vertex_id: str, *, after_index: int = -1, limit: int = 1000
    ) -> list[tuple[int, str, str | None]]:
        """A page of (item index, status, output as JSON text) of a spawner's children, in
        item order."""
        async with self._engines.read.connect() as conn:
            return await fanout.children_outputs(
                conn, run_id, vertex_id, after_index=after_index, limit=limit
            )

    @property
    def assembles_payloads(self) -> bool:
        """Whether `copy_children_outputs` works here (PostgreSQL)."""
        return self.dialect.assembles_json

    async def copy_children_outputs(
        self,
        run_id: str,
        vertex_id: str,
        *,
        ref: str,
        chunk: int,
        after_index: int,
        last_index: int,
        limit: int,
    ) -> fanout.CopiedChunk:
        """Store the outputs of the children with item indexes in (after_index, last_index]
        (at most `limit`) as payload chunk `chunk` of `ref`, assembled by the database (only
        where `assembles_payloads`; elsewhere read `children_outputs` and store them)."""
        if not self.assembles_payloads:
            raise NotImplementedError("payload chunks are assembled in PostgreSQL only")
        async with self._engines.write.begin() as conn:
            return await fanout.copy_children_outputs(
                conn,
                run_id,
                vertex_id,
                ref=ref,
                chunk=chunk,
                after_index=after_index,
                last_index=last_index,
                limit=limit,
                now=self._clock.now(),
            )

    async def reprocess(self, run_id: str) -> int:
        """Re-run the dead-lettered (FAILED) children of `run_id` as new attempts of the same
        child runs (keys unchanged), with those of a nested fan-out under them; the joins
        re-evaluate, up to the root (see `engine.store.recovery`). Returns how many child runs
        were revived."""
        now = self._clock.now()
        async with self._engines.write.begin() as conn:

            async def workflow_of(run: str) -> Workflow:
                return await self._workflow_of_run(conn, run)

            async def version_of(name: str, version: int) -> Workflow:
                return (await self.get_version(name, version)).workflow

            revived = (await recovery.reprocess(conn, run_id, now, workflow_of, version_of)).revived
            if revived:
                message = f"reprocess: {recovery.revived_words(revived)} again"
                await results_.insert_logs(conn, [LogLine(run_id, "info", message)], now)
        return revived

    async def put_payload(
        self, run_id: str, data: Any, *, ref: str | None = None, chunk: int = 0
    ) -> str:
        """Store `data` (or one chunk of a large list) under `ref` (new if None)."""
        ref = ref or str(uuid.uuid4())
        async with self._engines.write.begin() as conn:
            await fanout.put_payload(
                conn, run_id, ref=ref, chunk=chunk, data=data, now=self._clock.now()
            )
        return ref

    async def put_payload_json(self, run_id: str, text: str, *, ref: str, chunk: int) -> None:
        """Store one chunk of a payload already encoded as JSON text (see `put_payload`)."""
        async with self._engines.write.begin() as conn:
            await fanout.put_payload_json(
                conn,
                run_id,
                ref=ref,
                chunk=chunk,
                text=text,
                now=self._clock.now(),
            )

    async def get_payload(self, ref: str) -> Any:
        async with self._engines.read.connect() as conn:
            return await fanout.get_payload(conn, ref)

    async def delete_payload(self, ref: str) -> None:
        async with self._engines.write.begin() as conn:
            await fanout.delete_payload(conn, ref)

    async def delete_expired_payloads(
        self, retention_s: float, *, limit: int, max_bytes: int
    ) -> tuple[int, int]:
        """Delete the oldest payload chunks of runs that ended more than `retention_s` ago by
        the store's clock, at most `limit` chunks and (past the first) `max_bytes`, in one
        short transaction; returns (chunks, bytes) deleted. A read first, so a call with
        nothing to delete writes nothing. Safe to call from every worker at once (see
        `children.choose_expired_payloads`, `delete_expired`)."""
        ended_before = self._clock.now() - retention_s
        async with self._engines.read.connect() as conn:
            if not await fanout.any_expired_payload(conn, ended_before):
                return 0, 0
        async with self._engines.write.begin() as conn:
            ids = await fanout.choose_expired_payloads(conn, ended_before, limit, max_bytes)
            return await fanout.delete_expired(conn, ids, ended_before)

    async def payload_bytes(self) -> int:
        async with self._engines.read.connect() as conn:
            return await fanout.payload_bytes(conn)
