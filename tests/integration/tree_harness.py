"""Plant run trees straight into a test's database (rows as the engine writes them: runs, two
steps and a log line each, a payload chunk on the root), for run-retention tests that need
thousands of ended children without running them; and count what is left of them."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, insert, select

from engine.runtime import Runtime
from engine.store import run_purge
from engine.store.models import Payload, Run, RunLog, Step

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]
payloads = Payload.__table__  # type: ignore[attr-defined]


def _run(run_id: str, status: str, at: float, ended_at: float | None, **kw: Any) -> dict[str, Any]:
    return {
        "id": run_id,
        "workflow_name": kw.pop("workflow_name", "planted"),
        "workflow_version": 1,
        "definition_hash": "0" * 64,
        "tenant_id": "default",
        "status": status,
        "timeout_tier": "standard",
        "steps_remaining": 0,
        "created_at": at,
        "ended_at": ended_at,
        "parent_run_id": None,
        "parent_vertex_id": None,
        "item_index": None,
        "root_run_id": run_id,
        "restarted_from": None,
        **kw,
    }


def _rows_of(run_id: str, at: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    step_rows = [
        {
            "run_id": run_id,
            "vertex_id": vertex,
            "tenant_id": "default",
            "status": "SUCCEEDED",
            "deps_pending": 0,
            "attempts": 1,
            "auto_retries": 0,
            "not_before": at,
            "created_at": at,
        }
        for vertex in ("a", "b")
    ]
    log_rows = [{"run_id": run_id, "at": at, "level": "info", "message": "done"}]
    return step_rows, log_rows


async def plant_tree(
    runtime: Runtime,
    *,
    at: float,
    ended_at: float | None,
    status: str = "SUCCEEDED",
    children: int = 0,
    child_status: str = "SUCCEEDED",
    grandchildren: int = 0,
    **root: Any,
) -> str:
    """A root created at `at` and ended at `ended_at`, with `children` children (each with
    `grandchildren` of its own, a nested fan-out), every run with its steps and log line."""
    root_id = str(uuid.uuid4())
    run_rows = [_run(root_id, status, at, ended_at, **root)]
    for index in range(children):
        child_id = str(uuid.uuid4())
        parent = {"parent_vertex_id": "each", "root_run_id": root_id}
        run_rows.append(
            _run(
                child_id,
                child_status,
                at,
                ended_at,
                parent_run_id=root_id,
                item_index=index,
                **parent,
            )
        )
        for sub in range(grandchildren):
            run_rows.append(
                _run(
                    str(uuid.uuid4()),
                    child_status,
                    at,
                    ended_at,
                    parent_run_id=child_id,
                    item_index=sub,
                    **parent,
                )
            )
    step_rows: list[dict[str, Any]] = []
    log_rows: list[dict[str, Any]] = []
    for row in run_rows:
        more_steps, more_logs = _rows_of(row["id"], at)
        step_rows += more_steps
        log_rows += more_logs
    chunk = {
        "run_id": root_id,
        "ref": str(uuid.uuid4()),
        "chunk": 0,
        "size_bytes": 2,
        "data": [],
        "created_at": at,
    }
    async with runtime.store._engines.write.begin() as conn:
        for start in range(0, len(run_rows), 1000):
            await conn.execute(insert(runs), run_rows[start : start + 1000])
        for start in range(0, len(step_rows), 1000):
            await conn.execute(insert(steps), step_rows[start : start + 1000])
        for start in range(0, len(log_rows), 1000):
            await conn.execute(insert(logs), log_rows[start : start + 1000])
        await conn.execute(insert(payloads), [chunk])
    return root_id


async def rows_left(runtime: Runtime, root_id: str) -> dict[str, int]:
    """How many runs of `root_id`'s tree (itself included) are left, and their steps, log
    lines and payload chunks."""
    async with runtime.store._engines.read.connect() as conn:
        ids = [
            r
            for (r,) in await conn.execute(
                select(runs.c.id).where((runs.c.root_run_id == root_id) | (runs.c.id == root_id))
            )
        ]

        async def count(table: Any) -> int:
            query = select(func.count()).where(table.c.run_id.in_(ids)) if ids else None
            return 0 if query is None else int((await conn.execute(query)).scalar_one())

        return {
            "runs": len(ids),
            "steps": await count(steps),
            "log_lines": await count(logs),
            "payload_chunks": await count(payloads),
        }


async def status_of(runtime: Runtime, run_id: str) -> str | None:
    """The run's status; None when it is gone."""
    async with runtime.store._engines.read.connect() as conn:
        query = select(runs.c.status).where(runs.c.id == run_id)
        return (await conn.execute(query)).scalar()


_root_row = select(runs.c.id, runs.c.purge_started_at)


async def take_tree(
    runtime: Runtime, root_id: str, *, ended_before: float, retention_s: float | None
) -> bool:
    """What a purge's first batch on `root_id`'s tree commits before it deletes anything:
    the root locked and marked as being deleted (`run_purge._take_roots`), by a worker's pass
    of `retention_s` or (None) an operator's purge. Whether it was marked."""
    mark = run_purge.PurgeMark(runtime.store._clock.now(), retention_s)
    async with runtime.store._engines.write.begin() as conn:
        due = (await conn.execute(_root_row.where(runs.c.id == root_id))).all()
        taken = await run_purge._take_roots(conn, due, ended_before, mark)
    return taken == [root_id]


async def purge_mark(runtime: Runtime, root_id: str) -> tuple[float | None, float | None]:
    """(`purge_started_at`, `purge_retention_s`) of a root."""
    async with runtime.store._engines.read.connect() as conn:
        query = select(runs.c.purge_started_at, runs.c.purge_retention_s)
        row = (await conn.execute(query.where(runs.c.id == root_id))).one()
    return row.purge_started_at, row.purge_retention_s
