"""Faults under the REST API, with real processes on loopback (PostgreSQL + Redis, `schemabridge
api` and `schemabridge worker` subprocesses), each bounded in time:

- an `api` killed (SIGKILL) while a client submits with an Idempotency-Key: the same request
  sent to another `api` makes exactly one run;
- Redis restarted (a throwaway `redis-server` on a free port, never the shared one) during a
  fan-out submitted through the API: the run completes, no child lost or doubled;
- PostgreSQL unreachable for 10 s (a TCP proxy this test controls is cut, the shared server is
  never stopped): `/health` answers 503 naming the database, submissions 503 with a `code`,
  and everything recovers by itself once it is back.

Authentication is off (`SCHEMABRIDGE_AUTH=off`): these tests are about faults, not keys.
The run routes come from another branch; until they are in, the tests are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.rest import create_app
from demo.downstream import RunningDownstream
from tests.conftest import Backend
from tests.e2e.outage_harness import fan_out, proxied, throwaway_redis
from tests.e2e.rest_harness import Service, process_env, service
from tests.integration.operations_harness import single

SUBMIT_ROUTE = "/workflows/{name}/runs"
pytestmark = pytest.mark.skipif(
    SUBMIT_ROUTE not in create_app().openapi()["paths"],
    reason="needs the run routes (POST /workflows/{name}/runs)",
)

STEP_TIMEOUT_S = 90.0
"""Any one wait of these tests: generous, for a loaded machine."""
OUTAGE_S = 10.0


def _sb(*args: str, env: dict[str, str]) -> None:
    from tests.e2e.rest_harness import SCHEMABRIDGE

    done = subprocess.run(
        [SCHEMABRIDGE, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _http(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, trust_env=False, timeout=30.0)


async def _eventually(check: Any, what: str, timeout_s: float = STEP_TIMEOUT_S) -> Any:
    """Poll the async `check` until it answers something truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = await check()
            if last:
                return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s} s (last: {last!r})")


def one_call(base: str) -> dict[str, Any]:
    return single("one-call", f"{base}/one")


async def _publish(url: str, documents: Any) -> None:
    async with _http(url) as http:
        answer = await http.post("/workflows", json=documents)
    assert answer.status_code in (200, 201), answer.text


async def _run(url: str, run_id: str) -> dict[str, Any]:
    async with _http(url) as http:
        answer = await http.get(f"/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _ended(url: str, run_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        run = await _run(url, run_id)
        return run if run["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"} else None

    ended: dict[str, Any] = await _eventually(check, f"run {run_id} ending")
    return ended


@pytest.fixture
def server(pg_database_url: str, redis_url: str) -> Backend:
    return Backend("server", pg_database_url, redis_url)


def _api(env: dict[str, str], log: Path) -> contextlib.AbstractContextManager[Service]:
    return service(["api", "--port", "0"], env, log)


# ── an api killed mid-submission ───────────────────────────────────────────────────────────


async def test_a_submission_resent_to_another_api_after_a_kill_makes_one_run(
    server: Backend, tmp_path: Path, downstream: RunningDownstream
) -> None:
    env = process_env(server, tmp_path, auth="off")
    _sb("db", "upgrade", env=env)
    with _api(env, tmp_path / "b.log") as other, service(["worker"], env, tmp_path / "w.log"):
        other_url = other.wait_for_url()
        await _publish(other_url, one_call(downstream.url))
        # Kill at several moments of the submission: before, during and after its commit.
        for round_, delay_s in enumerate((0.0, 0.005, 0.02, 0.1)):
            key = f"kill-{round_}"
            with _api(env, tmp_path / f"a{round_}.log") as doomed:
                doomed_url = doomed.wait_for_url()
                async with _http(doomed_url) as http:
                    sent = asyncio.create_task(
                        http.post(
                            "/workflows/one-call/runs",
                            json={"input": {"round": round_}},
                            headers={"Idempotency-Key": key},
                        )
                    )
                    await asyncio.sleep(delay_s)  # the fault's moment, not a wait for state
                    doomed.process.send_signal(signal.SIGKILL)
                    doomed.process.wait(timeout=30)
                    with contextlib.suppress(httpx.HTTPError):
                        await sent
            async with _http(other_url) as http:
                again = await http.post(
                    "/workflows/one-call/runs",
                    json={"input": {"round": round_}},
                    headers={"Idempotency-Key": key},
                )
                assert again.status_code in (200, 201), again.text
                run_id = again.json()["id"]
                listed = await http.get("/runs", params={"workflow": "one-call", "limit": 100})
            ids = [r["id"] for r in listed.json()["items"]]
            assert len(ids) == round_ + 1 and ids.count(run_id) == 1, (delay_s, ids)
            assert (await _ended(other_url, run_id))["status"] == "SUCCEEDED"


# ── Redis restarted during a fan-out ───────────────────────────────────────────────────────


async def test_a_fan_out_survives_a_redis_restart(
    pg_database_url: str, tmp_path: Path, downstream: RunningDownstream
) -> None:
    port, items = _free_port(), 40
    backend = Backend("throwaway", pg_database_url, f"redis://127.0.0.1:{port}/0")
    env = process_env(backend, tmp_path, auth="off", worker_concurrency="8")
    _sb("db", "upgrade", env=env)
    with (
        throwaway_redis(port, tmp_path) as redis_process,
        _api(env, tmp_path / "api.log") as api,
        service(["worker"], env, tmp_path / "w.log"),
    ):
        url = api.wait_for_url()
        await _publish(url, fan_out(downstream.url))
        async with _http(url) as http:
            submitted = await http.post(
                "/workflows/fan/runs", json={"input": {"items": list(range(items))}}
            )
        assert submitted.status_code == 201, submitted.text
        run_id = submitted.json()["id"]

        async def some_children_done() -> bool:
            async with _http(url) as http:
                page = await http.get(
                    "/runs", params={"parent": run_id, "status": "SUCCEEDED", "limit": 5}
                )
            return page.status_code == 200 and len(page.json()["items"]) >= 3

        await _eventually(some_children_done, "the first children succeeding")
        # Restart Redis under the running processes: every coordination key is lost.
        redis_process.kill()
        redis_process.wait(timeout=30)
        with throwaway_redis(port, tmp_path):
            run = await _ended(url, run_id)
            assert run["status"] == "SUCCEEDED", run
            async with _http(url) as http:
                children = await http.get("/runs", params={"parent": run_id, "limit": 200})
    listed = children.json()["items"]
    assert len(listed) == items
    assert {c["status"] for c in listed} == {"SUCCEEDED"}
    assert sorted(c["itemIndex"] for c in listed) == list(range(items))


# ── PostgreSQL unreachable ─────────────────────────────────────────────────────────────────


async def test_postgresql_unreachable_for_ten_seconds_then_back(
    server: Backend, tmp_path: Path, downstream: RunningDownstream
) -> None:
    _sb("db", "upgrade", env=process_env(server, tmp_path))
    async with proxied(server.database_url) as (proxy, through):
        backend = Backend("proxied", through, server.redis_url)
        env = process_env(backend, tmp_path, auth="off")
        with _api(env, tmp_path / "api.log") as api, service(["worker"], env, tmp_path / "w.log"):
            # In a thread: this loop serves the proxy the api connects through meanwhile.
            url = await asyncio.to_thread(api.wait_for_url)
            await _publish(url, one_call(downstream.url))
            async with _http(url) as http:
                assert (await http.get("/health")).status_code == 200
                # A run before the outage proves the worker is up (it opens its runtime on
                # its own schedule; cut while it starts, it would exit and nothing could
                # recover).
                before = await http.post("/workflows/one-call/runs", json={"input": {}})
                assert before.status_code == 201, before.text
                assert (await _ended(url, before.json()["id"]))["status"] == "SUCCEEDED"
                await proxy.cut()
                cut_at = time.monotonic()
                health = await http.get("/health")
                assert health.status_code == 503, health.text
                assert "database" in health.json()["failing"], health.json()
                assert "redis" not in health.json()["failing"]
                refused = await http.post("/workflows/one-call/runs", json={"input": {}})
                assert refused.status_code == 503, refused.text
                assert refused.json()["code"] == "store_unavailable", refused.json()
                await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - cut_at)))  # outage
                await proxy.start()

                async def healthy() -> bool:
                    return (await http.get("/health")).status_code == 200

                await _eventually(healthy, "/health answering 200 again")
                submitted = await http.post("/workflows/one-call/runs", json={"input": {}})
                assert submitted.status_code == 201, submitted.text
            run = await _ended(url, submitted.json()["id"])
            assert run["status"] == "SUCCEEDED", run
