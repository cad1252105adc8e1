"""Chaos: a fan-out on PostgreSQL + Redis while workers are killed with SIGKILL and restarted.

    python -m bench.chaos --children 10000 --workers 3 --kill-every 3 --timeout 600

Three `schemabridge worker` processes (named `sbchaos-s<slot>`) run the bench/fanout.py
workflow (SPAWNER → N children, one GATEWAY POST each to the demo downstream in its own
subprocess → MERGE). From the moment the run is created, every `--kill-every` seconds one
worker chosen at random is killed with SIGKILL and a fresh one started in its slot, until the
parent run ends or `--timeout` passes (then the script gives up and says so). Leases are
`--lease-s` (default 5 s, so a killed worker's steps come back within seconds; the engine
default is 30 s).

Then it checks, straight from the database:

* every child run SUCCEEDED, and there are exactly N of them;
* no item index has two child runs (grouped by parent run, spawner vertex, item index) and the
  indexes are exactly 0..N-1;
* the MERGE step ran once: status SUCCEEDED, `attempts` (claims) — more than 1 means a worker
  died holding it and it was executed again, at-least-once, with one result recorded;
* the merge output counts N succeeded children and references N outputs;

and reports how much work was repeated (child steps claimed more than once, requests the
downstream saw beyond N, requeued leases and late results dropped). Prints one JSON line;
exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import create_async_engine

from bench import as_user
from bench.common import OUT, SCHEMABRIDGE, make_backend, stop_workers, worker_env
from bench.fanout import (
    PARENT,
    Downstream,
    child_step_times,
    code_version,
    downstream_process,
    downstream_requests,
    publish,
    run_input,
    run_status,
)
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings

TAG = "sbchaos"


@dataclass
class Fleet:
    """Worker processes by slot; a killed worker is replaced in its slot."""

    env: dict[str, str]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0
    kills: list[dict[str, Any]] = field(default_factory=list)

    def start(self, slot: int) -> None:
        name = f"{TAG}-s{slot}"
        OUT.mkdir(exist_ok=True)
        command = [SCHEMABRIDGE, "worker", "--name", name, "--log-level", "warning"]
        with (OUT / f"{name}.log").open("ab") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.procs[slot] = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.started += 1

    def kill_and_restart(self, slot: int, at_s: float) -> None:
        proc = self.procs[slot]
        alive = proc.poll() is None
        if alive:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.kills.append({"t": round(at_s, 1), "slot": slot, "pid": proc.pid, "was_alive": alive})
        self.start(slot)

    def stop(self) -> None:
        stop_workers(list(self.procs.values()))


# ── verification ───────────────────────────────────────────────────────────────────────────

DUPLICATES = """
    SELECT parent_vertex_id, item_index, COUNT(*) AS n FROM run
    WHERE parent_run_id = $1 GROUP BY parent_run_id, parent_vertex_id, item_index
    HAVING COUNT(*) > 1 LIMIT 20
"""
INDEXES = """
    SELECT COUNT(*) AS n, COUNT(DISTINCT item_index) AS distinct_n,
           MIN(item_index) AS lo, MAX(item_index) AS hi
    FROM run WHERE parent_run_id = $1
"""
BY_STATUS = "SELECT status, COUNT(*) AS n FROM run WHERE parent_run_id = $1 GROUP BY status"
STEP = "SELECT status, attempts, output FROM step WHERE run_id = $1 AND vertex_id = $2"
LOG_COUNT = "SELECT COUNT(*) FROM run_log WHERE message LIKE $1"
CHILD_ATTEMPTS = """
    SELECT s.attempts, COUNT(*) AS n FROM step s JOIN run r ON r.id = s.run_id
    WHERE r.parent_run_id = $1 GROUP BY s.attempts ORDER BY s.attempts
"""
PAYLOAD_ITEMS = """
    SELECT COUNT(*) AS items, COUNT(*) FILTER (WHERE e::text <> 'null') AS non_null
    FROM payload p, json_array_elements(p.data::json) AS e WHERE p.ref = $1
"""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def verify(dsn: str, run_id: str, children: int) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        by_status = {r["status"]: r["n"] for r in await conn.fetch(BY_STATUS, run_id)}
        duplicates = [dict(r) for r in await conn.fetch(DUPLICATES, run_id)]
        indexes = dict(await conn.fetchrow(INDEXES, run_id) or {})
        merge = await conn.fetchrow(STEP, run_id, "merge")
        spawner = await conn.fetchrow(STEP, run_id, "fan")
        attempts = {r["attempts"]: r["n"] for r in await conn.fetch(CHILD_ATTEMPTS, run_id)}
        requeued = await conn.fetchval(LOG_COUNT, "lease expired%")
        dropped = await conn.fetchval(LOG_COUNT, "late result dropped%")
        merge_output = _json(merge["output"]) if merge is not None else None
        ref = (merge_output or {}).get("outputsRef") or {}
        inline = (merge_output or {}).get("outputs") or []
        stored = {"items": len(inline), "non_null": sum(o is not None for o in inline)}
        if ref.get("payloadRef"):
            stored = dict(await conn.fetchrow(PAYLOAD_ITEMS, ref["payloadRef"]) or {})
    finally:
        await conn.close()
    counts = (merge_output or {}).get("counts", {})
    outputs_count = ref.get("count", len(inline))
    checks = {
        "all_children_succeeded": by_status == {"SUCCEEDED": children},
        "no_item_twice": not duplicates and indexes.get("n") == indexes.get("distinct_n"),
        "items_exactly_0_to_n_minus_1": indexes.get("distinct_n") == children
        and indexes.get("lo") == 0
        and indexes.get("hi") == children - 1,
        "merge_succeeded_once": merge is not None and merge["status"] == "SUCCEEDED",
        "merge_counts_n": counts.get("succeeded") == children and counts.get("total") == children,
        "merge_outputs_n": outputs_count == children
        and stored.get("items") == children
        and stored.get("non_null") == children,
    }
    return {
        "checks": checks,
        "children_by_status": by_status,
        "duplicate_items": duplicates,
        "item_indexes": indexes,
        "merge_attempts": merge["attempts"] if merge is not None else None,
        "spawner_attempts": spawner["attempts"] if spawner is not None else None,
        "merge_counts": counts,
        "merge_outputs_count": outputs_count,
        "merge_outputs_stored": stored,
        "merge_outputs_ref": ref,
        "child_step_attempts": attempts,
        "leases_requeued": requeued,
        "late_results_dropped": dropped,
    }


# ── the run ────────────────────────────────────────────────────────────────────────────────


async def chaos_loop(
    args: argparse.Namespace, fleet: Fleet, runtime: Runtime, run_id: str, started: float
) -> str | None:
    """Kill and restart a random worker every `kill_every` s until the run ends or time out.
    Returns the run's final status (None at the timeout)."""
    rng = random.Random(args.seed)
    poller = create_async_engine(runtime.settings.database_url)
    next_kill = started + args.kill_every
    try:
        while (elapsed := time.perf_counter() - started) < args.timeout:
            status = await run_status(poller, run_id)
            if status is not None and status != "RUNNING":
                return status
            if time.perf_counter() >= next_kill:
                slot = rng.randrange(args.workers)
                await asyncio.to_thread(fleet.kill_and_restart, slot, elapsed)
                next_kill += args.kill_every
            await asyncio.sleep(0.1)
        return None
    finally:
        await poller.dispose()


async def run(args: argparse.Namespace, downstream: Downstream) -> dict[str, Any]:
    backend = await make_backend("postgres")
    settings = Settings(database_url=backend.database_url, redis_url=backend.redis_url)
    runtime = await Runtime.open(settings)
    env = worker_env(
        backend,
        worker_concurrency=str(args.concurrency),
        lease_s=str(args.lease_s),
        admission_enabled=str(args.admission == "on").lower(),
    )
    fleet = Fleet(env)
    commit = code_version()  # what the first workers load; restarts load the tree as it is then
    try:
        ops = Operations(runtime)
        await publish(ops, downstream.url, "small")
        for slot in range(args.workers):
            fleet.start(slot)
        await asyncio.sleep(3)  # let the first workers come up before the first kill
        started = time.perf_counter()
        parent_id = await as_user.submit(ops, PARENT, run_input(args.children))
        status = await chaos_loop(args, fleet, runtime, parent_id, started)
        wall = time.perf_counter() - started
        await asyncio.to_thread(fleet.stop)
        dsn = backend.database_url.replace("postgresql+asyncpg://", "postgresql://")
        result: dict[str, Any] = {
            "commit": commit,
            "children": args.children,
            "workers": args.workers,
            "kill_every_s": args.kill_every,
            "lease_s": args.lease_s,
            "admission": args.admission,
            "final_status": status or "TIMEOUT",
            "wall_s": round(wall, 1),
            "kills": len(fleet.kills),
            "workers_started": fleet.started,
            "downstream_requests": await downstream_requests(downstream.url),
        }
        result |= await verify(dsn, parent_id, args.children)
        again = (await child_step_times(backend.database_url, parent_id)).again
        result["child_steps_claimed_again"] = int(again or 0)
        result["ok"] = status == "SUCCEEDED" and all(result["checks"].values())
        return result
    finally:
        await asyncio.to_thread(fleet.stop)
        await runtime.close()
        await backend.drop()


async def main(args: argparse.Namespace) -> int:
    async with downstream_process(args.latency_ms) as downstream:
        result = await run(args, downstream)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--admission", choices=["on", "off"], default="on")
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
