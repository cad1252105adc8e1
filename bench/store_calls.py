"""The CPU a process spends in the store's two calls a submitted run costs most: creating it
and claiming it.

    python -m bench.store_calls
    bench/interleave.sh REF 3 out.jsonl -- -m bench.store_calls   # against commit REF

On a fresh PostgreSQL database (127.0.0.1, migrated, dropped at the end; Redis unused) with a
one-GATEWAY workflow, `--runs` times: `Store.create_run` (its tenant one of `--tenants`, in
turn), then `Store.claim(64)` (one step found: a short claim, as a worker's claim of a run
submitted alone), then `Store.complete` of that step; every tenth time also an empty claim (a
second worker woken for the same run). Prints one JSON line: the process's CPU time
(`time.thread_time`) and the wall time per create_run and per claim, in ms. Only this process
is measured: PostgreSQL's own CPU is not in the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from bench.claims import fresh_database
from engine.store import Store
from engine.store.records import StepSucceeded
from schemas.clock import SystemClock
from schemas.definitions import Workflow

WORKFLOW = Workflow.model_validate(
    {
        "name": "one",
        "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/"}}},
    }
)


class Meter:
    """CPU and wall seconds spent inside `measure` blocks, and how many."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.count = 0

    def add(self, cpu: float, wall: float) -> None:
        self.cpu += cpu
        self.wall += wall
        self.count += 1

    def per_call_ms(self) -> dict[str, float]:
        n = max(1, self.count)
        return {"cpu_ms": round(self.cpu / n * 1000, 3), "wall_ms": round(self.wall / n * 1000, 3)}


async def timed(meter: Meter, call: Any) -> Any:
    cpu, wall = time.thread_time(), time.perf_counter()
    result = await call
    meter.add(time.thread_time() - cpu, time.perf_counter() - wall)
    return result


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    async with fresh_database("sb_store_calls") as database:
        store = await Store.open(database.url, SystemClock())
        try:
            version = await store.publish(WORKFLOW)
            await store.claim(64, 30)  # warm: statements compiled, connections open
            creates, claims = Meter(), Meter()
            for n in range(args.runs):
                tenant = f"t{n % args.tenants}"
                await timed(creates, store.create_run(version, {"n": n}, tenant_id=tenant))
                (step,) = await timed(claims, store.claim(64, 30))
                await store.complete([StepSucceeded(step, {"ok": True})])
                if n % 10 == 0:
                    assert await timed(claims, store.claim(64, 30)) == []
        finally:
            await store.close()
    return {"runs": args.runs, "tenants": args.tenants, "create_run": creates.per_call_ms()} | {
        "claim": claims.per_call_ms()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1500)
    parser.add_argument("--tenants", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
