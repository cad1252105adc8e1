"""What a running deployment's view (`GET /deployments/{id}`) spends on the reads that rarely
change: the parents that pin the workflow and whether a worker is alive.

    python -m bench.deploy_reads --backend postgresql --workflows 1000 --window 1000
    python -m bench.deploy_reads --backend sqlite --workflows 1000 --window 1000

A fresh database (PostgreSQL: one created and dropped here, as `bench.deploy_counts`; SQLite:
a file in a temporary directory) gets `--workflows` published workflows of `--vertices` GATEWAY
steps each (`--parents` of them with a SPAWNER of `orders` instead of their first step), `orders`
v1 and v2, a RUNNING deployment of v2 (no worker runs: it stays in stage 1) and `--window`
root runs of `orders` in its window (one in ten on the candidate, as `bench.deploy_counts`).
`--services` heartbeats are written to the Redis of `--redis` (the services set there is read
whole, whatever else it holds). Then, in a new runtime (a new process's empty caches):

* `cold` — the first `DeploymentOperations.get` and the first `Store.spawning_parents`;
* `get`, `parents`, `alive` — `--repeat` times, interleaved: the whole `get`, the
  `spawning_parents` read of its warning, the `workers_alive` read of its `holding`: wall ms
  p50/p99 and this process's CPU ms per call;
* `summary` — what the two reads, made alone, take of `get` (p50s, and CPU): their share of
  it where `get` makes them on every call (since the parents are kept under the routing rows'
  change token, `get` makes the `parents` read only after a routing row changed).

Prints one JSON line per series with the machine's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.common import percentile
from bench.deploy_counts import database, fill, load
from engine.coordination.heartbeat import Heartbeat
from engine.operations import Operations
from engine.operations.deployment_views import StageSpec
from engine.operations.worker_liveness import workers_alive
from engine.runtime import Runtime
from engine.settings import Settings

PUBLISH_BATCH = 100
"""Workflows per publish (one transaction each)."""


def document(index: int, vertices: int, parent: bool) -> dict[str, Any]:
    """Workflow `wf-<index>`: a chain of GATEWAY steps, the first a SPAWNER of `orders`
    when `parent`."""
    steps: dict[str, Any] = {}
    for number in range(vertices):
        step: dict[str, Any] = {
            "type": "GATEWAY",
            "config": {"url": f"http://127.0.0.1:9/wf-{index}/{number}"},
        }
        if number:
            step["dependsOn"] = [f"s{number - 1}"]
        steps[f"s{number}"] = step
    if parent:
        steps["s0"] = {"type": "SPAWNER", "config": {"items": "{{ input.items }}"}}
        steps["s0"]["config"]["workflow"] = "orders"
    return {"name": f"wf-{index}", "vertices": steps}


async def setup(args: argparse.Namespace, url: str) -> str:
    """Publish, start the deployment, fill its window; its id."""
    runtime = await Runtime.open(Settings(database_url=url, redis_url=args.redis))
    try:
        ops = Operations(runtime)
        every = max(1, args.workflows // max(1, args.parents))
        documents = [
            document(i, args.vertices, parent=i % every == 0 and i // every < args.parents)
            for i in range(args.workflows)
        ]
        for note in ("v1", "v2"):
            await ops.workflows.publish(
                {**document(0, args.vertices, False), "name": "orders", "description": note}
            )
        for first in range(0, len(documents), PUBLISH_BATCH):
            await ops.workflows.publish(documents[first : first + PUBLISH_BATCH])
        stages = [StageSpec(weight=10, min_runs=1_000_000), StageSpec(weight=100)]
        started = await ops.deployments.start("orders", 2, actor="bench", stages=stages)
        record = await runtime.store.deployment(started.id)
        assert record is not None
        filled = await fill(runtime, url, args.window, 0, record.created_at)
        for number in range(args.services):
            name = f"api-bench-{number}" if number == 0 else f"bench-worker-{number}"
            await Heartbeat(name, runtime.redis, runtime.clock, interval_s=1, ttl_s=30).beat()
        print(
            json.dumps(
                {
                    "series": "setup",
                    "backend": args.backend,
                    "workflows": args.workflows + 1,
                    "start_warnings": len(started.warnings),
                    "window": args.window,
                    "fill_s": round(filled, 1),
                    "load": load(),
                }
            ),
            flush=True,
        )
        return started.id
    finally:
        await runtime.close()


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    await call()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


async def measure(args: argparse.Namespace, url: str, deployment_id: str) -> None:
    runtime = await Runtime.open(Settings(database_url=url, redis_url=args.redis))
    try:
        ops = Operations(runtime)
        store = runtime.store
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "get": lambda: ops.deployments.get(deployment_id),
            "parents": lambda: store.spawning_parents("orders"),
            "alive": lambda: workers_alive(runtime),
        }
        first_get = await timed(calls["get"])
        cold = {"get_ms": round(first_get[0], 2)}
        await runtime.close()  # the first `spawning_parents` of a process, alone
        runtime = await Runtime.open(Settings(database_url=url, redis_url=args.redis))
        ops, store = Operations(runtime), runtime.store
        cold["parents_ms"] = round((await timed(calls["parents"]))[0], 2)
        row = {"backend": args.backend, "workflows": args.workflows + 1, "window": args.window}
        print(json.dumps({"series": "cold", **row, **cold, "load": load()}), flush=True)
        walls: dict[str, list[float]] = {name: [] for name in calls}
        cpus: dict[str, float] = dict.fromkeys(calls, 0.0)
        for _ in range(args.repeat):
            for name, call in calls.items():
                wall, cpu = await timed(call)
                walls[name].append(wall)
                cpus[name] += cpu
        p50 = {name: percentile(walls[name], 50) for name in calls}
        for name in calls:
            figures = {
                "p50_ms": round(p50[name], 3),
                "p99_ms": round(percentile(walls[name], 99), 3),
                "cpu_ms_per_call": round(cpus[name] / args.repeat, 3),
            }
            print(json.dumps({"series": name, **row, **figures, "load": load()}), flush=True)
        share = (p50["parents"] + p50["alive"]) / p50["get"]
        cpu_share = (cpus["parents"] + cpus["alive"]) / cpus["get"]
        summary = {"share_of_get_p50": round(share, 3), "share_of_get_cpu": round(cpu_share, 3)}
        print(json.dumps({"series": "summary", **row, **summary, "load": load()}), flush=True)
    finally:
        await runtime.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--workflows", type=int, default=1000, help="besides orders")
    parser.add_argument("--vertices", type=int, default=3, help="steps of each workflow")
    parser.add_argument("--parents", type=int, default=5, help="workflows spawning orders")
    parser.add_argument("--window", type=int, default=1000, help="runs in the window")
    parser.add_argument("--services", type=int, default=4, help="heartbeats written")
    parser.add_argument("--repeat", type=int, default=200, help="calls of each, interleaved")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14", help="Redis URL")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    print(json.dumps({"args": vars(args), "load": load()}), flush=True)
    async with database(args.backend) as url:
        deployment_id = await setup(args, url)
        await measure(args, url, deployment_id)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
