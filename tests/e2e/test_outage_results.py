"""A worker keeps the results of calls it finished while PostgreSQL is unreachable, and
records them once it is back, for as long as the steps' leases allow: the downstream sees each
call once. Real processes on loopback: `schemabridge api` on the database directly, one
`schemabridge worker` through a TCP proxy the test cuts (the shared server is never stopped),
Redis on the test's database.

The outage (10 s) is longer than the worker's old give-up (five tries, about 3 s) and shorter
than the lease (30 s): a worker that gave the results up would leave the steps to their leases
and call each again after them.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Backend
from tests.e2e.outage_harness import gate, proxied, until
from tests.e2e.rest_harness import process_env, schemabridge, service

RUNS = 8
"""Fewer than admission's initial limit of a destination's slots (10): all are under way at once."""
OUTAGE_S = 10.0


def held(gate_url: str) -> dict[str, Any]:
    return {
        "name": "held",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": gate_url + "/hold/{{ input.n }}"}}
        },
    }


async def _outage_under_a_worker(
    pg_database_url: str, redis_url: str, tmp_path: Path, **worker_settings: str
) -> tuple[dict[str, int], str]:
    """`RUNS` runs whose calls the worker has sent when the database goes away for
    `OUTAGE_S`, and that end meanwhile; answers the calls per path once every run ended
    `SUCCEEDED`, and the worker's log."""
    direct = Backend("direct", pg_database_url, redis_url)
    env = process_env(direct, tmp_path, auth="off")
    assert schemabridge(env, "db", "upgrade").returncode == 0
    with gate() as downstream:
        async with proxied(pg_database_url) as (proxy, through):
            proxied_backend = Backend("proxied", through, redis_url)
            worker_env = process_env(proxied_backend, tmp_path, **worker_settings)
            worker_log = tmp_path / "worker.log"
            with (
                service(["api", "--port", "0"], env, tmp_path / "api.log") as api,
                service(["worker"], worker_env, worker_log),
            ):
                url = await asyncio.to_thread(api.wait_for_url)
                async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
                    published = await http.post("/workflows", json=held(downstream.url))
                    assert published.status_code in (200, 201), published.text
                    ids = []
                    for n in range(RUNS):
                        answer = await http.post("/workflows/held/runs", json={"input": {"n": n}})
                        assert answer.status_code == 201, answer.text
                        ids.append(answer.json()["id"])

                    async def all_called() -> bool:
                        return len(downstream.calls) == RUNS

                    await until(all_called, f"the worker calling {RUNS} held requests")
                    await proxy.cut()
                    cut_at = time.monotonic()
                    for n in range(RUNS):  # the calls end while the database is away
                        downstream.open(str(n))
                    await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - cut_at)))
                    await proxy.start()

                    async def all_ended() -> list[str] | None:
                        runs = [(await http.get(f"/runs/{run_id}")).json() for run_id in ids]
                        statuses = [run["status"] for run in runs]
                        return statuses if "RUNNING" not in statuses else None

                    assert await until(all_ended, "every run ending") == ["SUCCEEDED"] * RUNS

                    async def said_back() -> bool:
                        return "database works again after" in worker_log.read_text("utf-8")

                    # As an api says it: the worker said the outage began, it says it ended.
                    await until(said_back, "the worker saying the database works again")
    return dict(downstream.calls), worker_log.read_text(encoding="utf-8")


async def test_results_finished_during_an_outage_are_recorded_once_it_ends(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    calls, log = await _outage_under_a_worker(pg_database_url, redis_url, tmp_path)
    assert calls == {f"/hold/{n}": 1 for n in range(RUNS)}
    assert "database unreachable" in log, log  # the outage was seen...
    assert re.search(r"recorded \d+ results after \d+ failed tries", log), log
    assert "gave up recording" not in log and "requeued" not in log, log
    recovered = [line for line in log.splitlines() if "database works again after" in line]
    assert len(recovered) == 1 and " INFO " in recovered[0], log
    # ...as one warning line per outage, never a traceback (a claim failing as well).
    assert "Traceback" not in log and " ERROR " not in log, log


async def test_results_are_given_up_when_the_outage_outlasts_their_leases(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A 6 s lease under the 10 s outage: the worker stops keeping the results a second
    before the leases end and says so; the steps are requeued and called again (at least
    once), and every run still succeeds."""
    calls, log = await _outage_under_a_worker(pg_database_url, redis_url, tmp_path, lease_s="6")
    assert calls == {f"/hold/{n}": 2 for n in range(RUNS)}
    assert re.search(r"gave up recording \d+ results after \d+ tries", log), log
    assert "once they do, the steps run again (their calls are sent again)" in log, log
    assert re.search(r"requeued \d+ steps? whose lease expired", log), log
    assert "Traceback" not in log and " ERROR " not in log, log
