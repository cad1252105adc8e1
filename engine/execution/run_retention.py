"""Run retention's pass, which every worker makes every minute when `run_retention_s` is set:
delete the root runs that ended more than that ago with their whole tree, a bounded batch per
transaction, batch after batch while they come back full, for most of the minute at most
(docs/architecture.md, 'Run retention').
`schemabridge runs purge` deletes with the same batches (`purge_until_done`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from engine.store.records import RunsPurged
from engine.store.retention_store import RunRetentionStore
from schemas.counts import plural

logger = logging.getLogger(__name__)

RUN_PURGE_BATCH = 1000
"""Runs deleted per transaction, at most, with their steps, log lines and payload chunks (a
few thousand rows for runs of a few steps: a short transaction, on SQLite a short hold of the
write lock every claim and flush waits for)."""
RUN_PURGE_PASS_S = 50.0
"""How long one pass goes on deleting while batches come back full, at most (it stops after
the batch that crossed it): most of the minute between two passes' starts, so that a backlog
(runs ending faster than a minute's batches delete: 500 submissions a second are 30,000 runs
a minute) drains at the rate the database deletes, and a pass still ends and says what it
deleted every minute or so."""
RUN_PURGE_MAX_BATCHES = 1000
"""Most batches one pass deletes (a million runs), whatever their pace: a bound that does
not depend on the clock."""
RUN_PURGE_REST = 0.25
"""After each full batch a pass rests for this share of the time the batch took: on SQLite,
where writers take turns at one lock, the claims and flushes that waited through the batch
get a window to take it (a pass holds the write lock at most about 80 % of the time)."""
RUN_PURGE_EVERY_S = 60.0
"""How often a worker starts a pass (start to start: a pass that took 50 s is followed by
the next 10 s later): retention counts in days, and a pass that finds nothing is one indexed
read."""


async def purge_pass(
    store: RunRetentionStore,
    retention_s: float,
    *,
    closing: asyncio.Event | None = None,
    batch: int = RUN_PURGE_BATCH,
    batches: int = RUN_PURGE_MAX_BATCHES,
    budget_s: float = RUN_PURGE_PASS_S,
    rest: float = RUN_PURGE_REST,
) -> RunsPurged:
    """One worker's pass: batches of runs past `retention_s` while they come back full (a
    batch that did not may have left nothing), until `budget_s` seconds have gone by (the
    batch that crosses it ends the pass) or `batches` batches, resting `rest` of each full
    batch's time before the next; logged when it deleted something. Every worker makes it:
    two at once take different runs, or find them gone."""
    ended_before = store.cutoff(retention_s)
    purged = RunsPurged()
    started = time.monotonic()
    for _ in range(batches):
        if closing is not None and closing.is_set():
            break
        began = time.monotonic()
        deleted = await store.purge_ended_runs(ended_before, limit=batch, retention_s=retention_s)
        purged += deleted
        ended = time.monotonic()
        if deleted.runs < batch or ended - started >= budget_s:
            break
        await _rest((ended - began) * rest, closing)
    if purged.runs:
        took = time.monotonic() - started
        logger.info(
            "run retention: deleted %s of runs ended over %g s ago in %.1f s",
            describe(purged),
            retention_s,
            took,
            extra={
                "event": "runs.purged",
                "roots": purged.roots,
                "children": purged.children,
                "steps": purged.steps,
                "log_lines": purged.log_lines,
                "payload_chunks": purged.payload_chunks,
                "seconds": round(took, 3),
            },
        )
    return purged


async def _rest(seconds: float, closing: asyncio.Event | None) -> None:
    """Sleep `seconds`, or less when the worker starts closing."""
    if closing is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await closing.wait()


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
        f"{plural(purged.runs, 'run')} ({plural(purged.roots, 'root')}, "
        f"{plural(purged.children, 'child', 'children')}), {plural(purged.steps, 'step')}, "
        f"{plural(purged.log_lines, 'log line')}, {plural(purged.payload_chunks, 'payload chunk')}"
    )
