"""A tiny service for the lifecycle tests: health marker + heartbeat + tasks that drain.

    python -m tests.integration.scripts.service_main SERVICE HEALTH_DIR [--stuck] [--grace S]

Coordination uses `SCHEMABRIDGE_REDIS_URL` when set, else the embedded server. Protocol on
stdout, one JSON object per line: `{"event": "ready", "pid": …}` once the marker exists and the
first beat is written; `{"event": "stopping", "reason": …}` when a stop is requested (the marker
is already gone then); `{"event": "exited", …}` with what the shutdown did, just before exit.
`--stuck` adds a task that ignores the stop event, so only a second signal (or the grace
period) ends it: this script cancels what is left once `force_event` is set. The shutdown order
is the one docs/architecture.md, 'Graceful shutdown' describes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from engine import coordination
from engine.coordination import keys
from engine.coordination.heartbeat import Heartbeat
from engine.health import HealthMarker
from engine.lifecycle import ServiceLifecycle
from engine.settings import Settings
from schemas.clock import SystemClock


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


DRAINED: list[bool] = []


async def draining_work(stop: asyncio.Event) -> None:
    """An in-flight step: notices the stop, then finishes its work before returning."""
    await stop.wait()
    await asyncio.sleep(0.05)  # the rest of the step
    DRAINED.append(True)


async def stuck_work() -> None:
    """Ignores the stop event; only cancellation ends it."""
    await asyncio.Event().wait()


async def drain(
    tasks: dict[str, asyncio.Task[None]], grace_s: float, force: asyncio.Event
) -> list[str]:
    """Wait up to `grace_s` for the tasks to end (less once `force` is set), then cancel the
    rest; their names, sorted."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    forced = asyncio.ensure_future(force.wait())
    # Bounded by the deadline: each pass waits for the next task to end or for the force.
    while (remaining := deadline - loop.time()) > 0 and not force.is_set():
        running = {task for task in tasks.values() if not task.done()}
        if not running:
            break
        await asyncio.wait(
            {*running, forced}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
    forced.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await forced
    left = sorted(name for name, task in tasks.items() if not task.done())
    for name in left:
        tasks[name].cancel()
    if left:
        await asyncio.wait([tasks[name] for name in left], timeout=5.0)
    return left


async def serve(service: str, health_dir: Path, *, stuck: bool, grace_s: float) -> int:
    settings = Settings(
        health_dir=health_dir,
        heartbeat_interval_s=0.2,
        heartbeat_ttl_s=10,
        shutdown_grace_s=grace_s,
    )
    client = await coordination.open_redis(settings)
    heartbeat = Heartbeat.from_settings(service, client, SystemClock(), settings)
    life = ServiceLifecycle()
    try:
        with life, HealthMarker.from_settings(service, settings) as marker:
            life.on_stop(marker.remove)
            life.on_stop(lambda: emit("stopping", reason=life.reason, marker=marker.exists()))
            await heartbeat.beat()
            tasks = {
                "heartbeat": asyncio.create_task(heartbeat.run(life.stop_event)),
                "work": asyncio.create_task(draining_work(life.stop_event)),
            }
            if stuck:
                tasks["stuck"] = asyncio.create_task(stuck_work())
            emit("ready", pid=heartbeat.pid)

            await life.wait()
            await heartbeat.stop()
            cancelled = await drain(tasks, settings.shutdown_grace_s, life.force_event)
            failures = sorted(
                name
                for name, task in tasks.items()
                if task.done() and not task.cancelled() and task.exception() is not None
            )
    finally:
        key_left = await client.exists(keys.heartbeat(service))
        await coordination.close_redis(client)
    emit(
        "exited",
        cancelled=cancelled,
        failures=failures,
        forced=life.forced,
        drained=bool(DRAINED),
        heartbeat_key_left=bool(key_left),
    )
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("service")
    parser.add_argument("health_dir", type=Path)
    parser.add_argument("--stuck", action="store_true")
    parser.add_argument("--grace", type=float, default=20.0)
    args = parser.parse_args()
    return asyncio.run(serve(args.service, args.health_dir, stuck=args.stuck, grace_s=args.grace))


if __name__ == "__main__":
    sys.exit(main())
