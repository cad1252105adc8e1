"""A run with a very large fan-out, made quickly for the monitor's tests and benchmarks.

    run_id = await build_large_fanout(database_url, children=100_000)

The parent workflow is published and its run submitted through the operations layer; the
children are then inserted in bulk straight into the store's tables (what a spawner writes,
without executing 100,000 child runs): most SUCCEEDED, some FAILED (dead letters), the last
ones still RUNNING, with durations that have a long tail (2 % of the children take 20 to
40 s). The spawner step is left PARKED with its counters set, so the run is RUNNING and its
page is live; no step is READY, so a worker started on the database has nothing to execute.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, update

from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from engine.store.models import Run, Step

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]

PARENT = "ui-large-fanout"
CHILD = "ui-large-child"
SPAWNER = "each"
CHUNK = 5_000
CHILD_NAMESPACE = uuid.UUID("0c3f1c9e-6a43-4f41-9a0b-6f1f55b0e5d1")


def documents() -> list[dict[str, Any]]:
    never = "http://127.0.0.1:9/never-called"
    return [
        {
            "name": PARENT,
            "description": "A fan-out made in bulk for the monitor's tests and benchmarks.",
            "vertices": {
                "collect": {"type": "GATEWAY", "config": {"url": never}},
                SPAWNER: {
                    "type": "SPAWNER",
                    "dependsOn": ["collect"],
                    "config": {"items": "{{ vertices.collect.output.body }}", "workflow": CHILD},
                },
                "join": {
                    "type": "MERGE",
                    "dependsOn": [SPAWNER],
                    "config": {"tolerateChildFailures": ["FAILED"]},
                },
            },
        },
        {"name": CHILD, "vertices": {"call": {"type": "GATEWAY", "config": {"url": never}}}},
    ]


@dataclass(frozen=True)
class Shape:
    """How the children of a large fan-out are spread."""

    children: int
    failed_every: int = 499
    """Every n-th child FAILED."""
    running: int = 300
    """The last children, still RUNNING."""

    def status(self, index: int) -> str:
        if index >= self.children - self.running:
            return "RUNNING"
        return "FAILED" if index % self.failed_every == self.failed_every - 1 else "SUCCEEDED"

    @staticmethod
    def duration_s(index: int) -> float:
        """1 to 3 s, and 20 to 40 s for 2 % of the children (the long tail)."""
        if index % 50 == 37:
            return 20.0 + (index * 7919 % 1000) / 50
        return 1.0 + (index * 7919 % 1000) / 500

    def counts(self) -> tuple[int, int]:
        """(succeeded, failed)."""
        statuses = [self.status(i) for i in range(self.children)]
        return statuses.count("SUCCEEDED"), statuses.count("FAILED")


def _child_row(parent: Any, child: Any, shape: Shape, index: int, t0: float) -> dict[str, Any]:
    status = shape.status(index)
    started = t0 + index * 0.01
    ended = None if status == "RUNNING" else started + shape.duration_s(index)
    key = f"{parent.id}/{SPAWNER}/{index}"
    error = None
    if status == "FAILED":
        error = {
            "kind": "http_error",
            "message": f"POST http://127.0.0.1:9/never-called: 500 (item {index})",
            "vertexId": "call",
            "http": {"status": 500, "bodyExcerpt": '{"error": "boom"}', "attempts": 4},
        }
    return {
        "id": str(uuid.uuid5(CHILD_NAMESPACE, key)),
        "workflow_name": child.name,
        "workflow_version": child.version,
        "definition_hash": child.definition_hash,
        "tenant_id": parent.tenant_id,
        "status": status,
        "timeout_tier": "process",
        "input": {"i": index},
        "item": None,
        "output": {"status": 200} if status == "SUCCEEDED" else None,
        "error": error,
        "steps_remaining": 0 if status == "SUCCEEDED" else 1,
        "created_at": started,
        "started_at": started,
        "ended_at": ended,
        "idempotency_key": key,
        "parent_run_id": parent.id,
        "parent_vertex_id": SPAWNER,
        "item_index": index,
        "root_run_id": parent.id,
        "restarted_from": None,
        "dlq_at": ended if status == "FAILED" else None,
        "pinned_versions": None,
    }


async def build_large_fanout(
    database_url: str, *, children: int = 100_000, redis_url: str | None = None
) -> str:
    """Publish the workflows, submit the parent run and insert its `children`; the run's id.
    Migrates the database first."""
    settings = Settings.model_validate({"database_url": database_url, "redis_url": redis_url})
    runtime = await Runtime.open(settings)
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(documents())
        submitted = await ops.runs.submit(PARENT, {}, tenant_id="bulk")
        parent = await runtime.store.get_run(submitted.run.id)
        if parent is None:
            raise RuntimeError("the parent run vanished")
        child = await runtime.store.get_version(CHILD)
        shape = Shape(children)
        succeeded, failed = shape.counts()
        # The children started one after the other over the last `children / 100` seconds.
        t0 = parent.created_at - children * 0.01 - 60
        engines = runtime.store._engines
        async with engines.write.begin() as conn:
            await conn.execute(
                update(steps)
                .where(steps.c.run_id == parent.id, steps.c.vertex_id == "collect")
                .values(status="SUCCEEDED", output={"status": 200}, started_at=t0 - 1, ended_at=t0)
            )
            await conn.execute(
                update(steps)
                .where(steps.c.run_id == parent.id, steps.c.vertex_id == SPAWNER)
                .values(
                    status="PARKED",
                    attempts=1,
                    deps_pending=0,
                    started_at=t0,
                    children_total=children,
                    children_succeeded=succeeded,
                    children_failed=failed,
                )
            )
            await conn.execute(
                update(runs)
                .where(runs.c.id == parent.id)
                .values(steps_remaining=2, created_at=t0 - 1, started_at=t0 - 1)
            )
        for start in range(0, children, CHUNK):
            rows = [
                _child_row(parent, child, shape, i, t0)
                for i in range(start, min(children, start + CHUNK))
            ]
            async with engines.write.begin() as conn:
                await conn.execute(insert(runs), rows)
        await runtime.store.analyze()
        return parent.id
    finally:
        await runtime.close()
