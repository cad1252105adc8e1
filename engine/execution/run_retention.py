"""Run retention's pass, which every worker makes every minute when `run_retention_s` is set:
delete the root runs that ended more than that ago with their whole tree, a bounded batch per
transaction, a bounded number of batches per pass (docs/architecture.md, 'Run retention').
`schemabridge runs purge` deletes with the same batches (`purge_until_done`)."""

from __future__ import annotations

import asyncio
import logging

from engine.store.records import RunsPurged
from engine.store.retention_store import RunRetentionStore

logger = logging.getLogger(__name__)

RUN_PURGE_BATCH = 1000
"""Runs deleted per transaction, at most, with their steps, log lines and payload chunks (a
few thousand rows for runs of a few steps: a short transaction, on SQLite a short hold of the
write lock every claim and flush waits for)."""
RUN_PURGE_BATCHES = 10
"""Most batches one pass deletes while each comes back full: a backlog drains at up to
10,000 runs a minute per worker, without one long pass."""
RUN_PURGE_EVERY_S = 60.0
"""How often a worker makes a pass: retention counts in days, and a pass that finds nothing
is one indexed read."""


async def purge_pass(
    store: RunRetentionStore,
    retention_s: float,
    *,
    closing: asyncio.Event | None = None,
    batch: int = RUN_PURGE_BATCH,
    batches: int = RUN_PURGE_BATCHES,
) -> RunsPurged:
    """One worker's pass: up to `batches` batches of runs past `retention_s`, while batches
    come back full (a batch that did not may have left nothing); logged when it deleted
    something. Every worker makes it: two at once take different runs, or find them gone."""
    ended_before = store.cutoff(retention_s)
    purged = RunsPurged()
    for _ in range(batches):
        if closing is not None and closing.is_set():
            break
        deleted = await store.purge_ended_runs(ended_before, limit=batch, retention_s=retention_s)
        purged += deleted
        if deleted.runs < batch:
            break
    if purged.runs:
        logger.info(
            "run retention: deleted %s of runs ended over %g s ago",
            describe(purged),
            retention_s,
            extra={
                "event": "runs.purged",
                "roots": purged.roots,
                "children": purged.children,
                "steps": purged.steps,
                "log_lines": purged.log_lines,
                "payload_chunks": purged.payload_chunks,
            },
        )
    return purged


async def purge_until_done(
    store: RunRetentionStore, ended_before: float, *, batch: int = RUN_PURGE_BATCH
) -> RunsPurged:
    """Delete every tree due before `ended_before` now, batch after batch, until a batch
    finds nothing (an operator's purge: the same short transactions as the workers')."""
    purged = RunsPurged()
    while True:
        deleted = await store.purge_ended_runs(ended_before, limit=batch, retention_s=None)
        if not deleted.runs:
            return purged
        purged += deleted


def describe(purged: RunsPurged) -> str:
    """'1,204 runs (3 roots, 1,201 children), 2,410 steps, 1,300 log lines, 0 payload chunks'"""
    return (
        f"{_count(purged.runs, 'run')} ({_count(purged.roots, 'root')}, "
        f"{_count(purged.children, 'child', 'children')}), {_count(purged.steps, 'step')}, "
        f"{_count(purged.log_lines, 'log line')}, {_count(purged.payload_chunks, 'payload chunk')}"
    )


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"
