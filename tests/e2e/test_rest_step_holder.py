"""Who holds a RUNNING step, as `GET /runs/{id}` says it, on both backends: a real
`schemabridge worker` subprocess claims a step and is killed with SIGKILL mid-call; the step's
view names that worker (for an admin key; a tenant key is told a worker holds it, not which)
and says it is presumed dead while its lease still runs; once the lease ends the reaper's
requeue takes the step back and clears the holder; a live worker (a named service in this
process, beating as `schemabridge worker` does) that claims it next reads as alive, and the
step's history has the killed worker's execution as lost before the survivor's 200.

On the embedded backend each process has its own Redis, so the killed worker's heartbeat was
never visible here: its liveness reads `unknown` (a holder this Redis never heard of is not
known dead), with no `lastSeen`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.downstream import RunningDownstream
from engine.coordination.heartbeat import ServiceRole, read_named_services
from engine.runtime import run_service
from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on
from tests.integration.processes import start_worker, stop_worker, worker_env

pytestmark = pytest.mark.slow

HEARTBEAT = {"heartbeat_ttl_s": "2", "heartbeat_interval_s": "0.5"}
"""Short heartbeats, in the API's process and the worker's: a killed worker reads as
presumed dead 2 s after its last beat, well before its 8 s lease ends."""
DOOMED_LEASE_S = "8"
"""Room for the presumed-dead reads on a loaded host; the test then waits it out for the
requeue (15 s waited 7 s more for nothing)."""
CALL_SLEEP_MS = "4000"


def _workflow(base: str) -> dict[str, Any]:
    call = {
        "type": "GATEWAY",
        "config": {
            "url": f"{base}/held",
            "method": "POST",
            "headers": {"X-Demo-Sleep-Ms": CALL_SLEEP_MS},
            "retry": {"maxAttempts": 1},
        },
    }
    return {"name": "held", "vertices": {"call": call}}


@contextlib.asynccontextmanager
async def _service(api: Api, name: str) -> AsyncIterator[None]:
    """A worker running as the named service `name` in this process, heartbeat and all."""
    stop = asyncio.Event()
    working = run_service(api.runtime, name, stop, role=ServiceRole.WORKER)
    task = asyncio.create_task(working, name=name)
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task


async def _step(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    answer = await http.get(f"/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    (step,) = answer.json()["steps"]
    return dict(step)


async def _until(
    read: Callable[[], Awaitable[dict[str, Any]]], done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The first read `done` accepts (bounded: 60 s)."""
    async with asyncio.timeout(60):
        while not done(step := await read()):
            await asyncio.sleep(0.1)
    return step


async def _killed_mid_call(backend: Backend, downstream: RunningDownstream, tmp_path: Path) -> None:
    """A `schemabridge worker` named `doomed` claims the step, calls, and is SIGKILLed."""
    env = worker_env(backend, tmp_path, lease_s=DOOMED_LEASE_S, **HEARTBEAT)
    doomed = start_worker(env, "doomed", tmp_path / "doomed.log")
    try:
        async with asyncio.timeout(60):
            while downstream.stats.total < 1:  # the call is under way
                await asyncio.sleep(0.05)
    finally:
        killed = await asyncio.to_thread(stop_worker, doomed, signal.SIGKILL)
    assert killed == -signal.SIGKILL


ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "RESOLVED"}


def _held_as(state: str) -> Callable[[dict[str, Any]], bool]:
    """Its holder reads as `state`, or it ended (then the caller's assertions say so)."""

    def found(step: dict[str, Any]) -> bool:
        holder = step["holder"] or {}
        return step["status"] in ENDED or (
            step["status"] == "RUNNING" and holder.get("state") == state
        )

    return found


def _ended(step: dict[str, Any]) -> bool:
    return step["status"] in ENDED


async def test_a_killed_workers_step_names_it_presumed_dead_until_taken_back(
    backend: Backend, downstream: RunningDownstream, tmp_path: Path
) -> None:
    async with api_on(backend, worker=False, **HEARTBEAT) as api:
        admin, tenant = api.http(api.admin), api.http(api.acme)
        async with admin, tenant:
            published = await admin.post("/workflows", json=_workflow(downstream.url))
            assert published.status_code == 201, published.text
            created = await tenant.post("/workflows/held/runs", json={"input": {}})
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            await _killed_mid_call(backend, downstream, tmp_path)

            # Its beats were visible here only with a shared Redis.
            dead = "presumed_dead" if backend.redis_url is not None else "unknown"
            seen = await _until(lambda: _step(admin, run_id), _held_as(dead))
            assert seen["status"] == "RUNNING", seen
            assert seen["holder"]["worker"] == "doomed"
            assert seen["leaseExpiresAt"] is not None
            if backend.redis_url is not None:
                assert seen["holder"]["lastSeen"] is not None
                assert seen["holder"]["silentS"] >= 0
            else:
                assert seen["holder"]["lastSeen"] is None
            told = await _step(tenant, run_id)
            assert told["holder"]["worker"] is None  # operational data: not for a tenant
            assert told["holder"]["state"] == dead
            assert told["leaseExpiresAt"] == seen["leaseExpiresAt"]
            (row,) = await api.runtime.store.get_steps(run_id)
            assert row.claimed_by == "doomed"

            # The reaper's requeue (bounded by the lease, 8 s) takes it back.
            async with asyncio.timeout(60):
                while not await api.runtime.store.requeue_expired():
                    await asyncio.sleep(0.2)
            back = await _step(admin, run_id)
            assert back["status"] == "READY"
            assert back["holder"] is None and back["leaseExpiresAt"] is None
            (row,) = await api.runtime.store.get_steps(run_id)
            assert row.claimed_by is None and row.claim_token is None

            async with _service(api, "survivor"):
                held = await _until(lambda: _step(admin, run_id), _held_as("alive"))
                assert held["status"] == "RUNNING", held
                assert held["holder"]["worker"] == "survivor"
                assert held["holder"]["lastSeen"] is not None
                ended = await _until(lambda: _step(admin, run_id), _ended)
            assert ended["status"] == "SUCCEEDED"
            assert ended["holder"] is None and ended["leaseExpiresAt"] is None
            # The killed worker's execution is in the history, lost with no status read
            # (its call reached the downstream), and the 200 is the second execution's.
            assert downstream.stats.total == 2
            history = [
                (a["execution"], a["attempt"], a["httpStatus"], a["lost"], a["worker"])
                for a in ended["history"]
            ]
            assert history == [
                (1, 1, None, "lease_expired", "doomed"),
                (2, 1, 200, None, "survivor"),
            ], ended["history"]
            told = (await _step(tenant, run_id))["history"]
            assert [(a["lost"], a["worker"]) for a in told] == [
                ("lease_expired", None),
                (None, None),
            ]
            (row,) = await api.runtime.store.get_steps(run_id)
            assert row.claimed_by is None


async def test_the_step_view_is_documented(backend: Backend) -> None:
    async with api_on(backend, worker=False) as api, api.http(api.admin) as http:
        schema = (await http.get("/openapi.json")).json()["components"]["schemas"]
    assert {"leaseExpiresAt", "holder"} <= set(schema["StepView"]["properties"])
    assert {"worker", "state", "lastSeen", "silentS"} <= set(schema["HolderView"]["properties"])
    assert schema["HolderView"]["properties"]["state"]["enum"] == [
        "alive",
        "presumed_dead",
        "unknown",
    ]


async def test_a_worker_restarted_at_once_under_its_name_leaves_its_step_presumed_dead(
    redis_url: str, pg_database_url: str, downstream: RunningDownstream, tmp_path: Path
) -> None:
    """The README's restart: kill -9, then the same name at once. The live beat under the name
    is the new process's, which never held the step: the step's holder is presumed dead,
    not alive, while the dead one's lease runs."""
    backend = Backend("server", pg_database_url, redis_url)
    async with (
        api_on(backend, worker=False, lease_s=DOOMED_LEASE_S, **HEARTBEAT) as api,
        api.http(api.admin) as admin,
    ):
        published = await admin.post("/workflows", json=_workflow(downstream.url))
        assert published.status_code == 201, published.text
        created = await admin.post("/workflows/held/runs", json={"input": {}})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        await _killed_mid_call(backend, downstream, tmp_path)
        env = worker_env(backend, tmp_path, lease_s=DOOMED_LEASE_S, **HEARTBEAT)
        again = start_worker(env, "doomed", tmp_path / "again.log")
        try:
            async with asyncio.timeout(60):  # until the new process beats under the name
                while True:
                    statuses = await read_named_services(
                        api.runtime.redis, api.runtime.clock, ["doomed"], ttl_s=2
                    )
                    if statuses["doomed"].up and statuses["doomed"].pid == again.pid:
                        break
                    await asyncio.sleep(0.1)
            step = await _step(admin, run_id)
            assert step["status"] == "RUNNING", step
            assert step["holder"]["worker"] == "doomed"
            assert step["holder"]["state"] == "presumed_dead", step
        finally:
            assert await asyncio.to_thread(stop_worker, again) == 0
