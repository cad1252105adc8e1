"""The monitor's attempts table of a step whose first execution was lost with its worker, in a
real browser against `serve --demo` on SQLite.

A tour killed a worker mid-call; its lease expired, the step was requeued and run again
(200). The table read "Execution 1 … 200": the second execution labelled first and the lost
one, whose call the downstream had had, not in it. The store here holds a real claim of
worker `w1` that the reaper requeued once its lease expired (on a clock set back, before the
server starts); `serve`'s own worker then runs the step against the demo downstream. The
table has the lost execution as a row of its own (no HTTP status, worker `w1`, what it means
under it) and the 200 as execution 2."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.clock import FakeClock
from tests.e2e.browser_harness import (
    FIT_JS,
    NARROW,
    DemoServer,
    assert_fits_a_phone,
    opened,
    serve_demo,
    server_env,
    shoot,
    stop,
)
from tests.e2e.rest_harness import schemabridge
from tests.e2e.test_cli_reconnect import free_port

pytestmark = pytest.mark.slow

LEASE_S = 30.0


async def _lost_first_execution(database_url: str, downstream: str) -> str:
    """A run whose step worker `w1` claimed two minutes ago and never finished: the reaper's
    requeue took it back once its lease expired. Its id."""
    clock = FakeClock(time.time() - 120)
    runtime = await Runtime.open(Settings(database_url=database_url), clock=clock)
    try:
        ops = Operations(runtime)
        call = {"type": "GATEWAY", "config": {"url": f"{downstream}/lost/charge"}}
        await ops.workflows.publish({"name": "ui-lost", "vertices": {"charge": call}})
        run_id = (await ops.runs.submit("ui-lost", {}, tenant_id="lost")).run.id
        (claimed,) = await runtime.store.claim(1, lease_s=LEASE_S, worker="w1")
        assert claimed.run_id == run_id
        clock.advance(LEASE_S + 1)
        assert len(await runtime.store.requeue_expired()) == 1
        return run_id
    finally:
        await runtime.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoServer, str]]:
    """The server, and the run whose first execution was lost (SUCCEEDED by `serve`); the
    module's `browser` (tests/e2e/conftest.py) comes after it."""
    workdir = tmp_path_factory.mktemp("ui-lost")
    database_url = f"sqlite+aiosqlite:///{Path(workdir) / 'sb.db'}"
    port = free_port()
    run_id = asyncio.run(_lost_first_execution(database_url, f"http://127.0.0.1:{port}"))
    running = serve_demo(workdir, server_env(workdir, database_url), "--demo-port", str(port))
    try:
        assert running.wait_status(run_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        yield running, run_id
    finally:
        stop(running)


def test_the_attempts_table_shows_the_execution_lost_with_its_worker(
    server: tuple[DemoServer, str], browser: Any
) -> None:
    running, run_id = server
    (step,) = running.call(f"/runs/{run_id}")["steps"]
    history = [(a["execution"], a["attempt"], a["httpStatus"], a["lost"]) for a in step["history"]]
    assert history == [(1, 1, None, "lease_expired"), (2, 1, 200, None)], step["history"]
    assert step["history"][0]["worker"] == "w1"
    with opened(browser, f"{running.ui}#/runs/{run_id}") as (page, _):
        page.locator("table.attempts tbody tr").nth(2).wait_for()
        rows = page.locator("table.attempts tbody tr").all_inner_texts()
        lost, why, called = rows[0], rows[1], rows[2]
        assert lost.split()[:3] == ["1", "w1", "1"], lost
        assert "lost: lease expired" in lost and "200" not in lost, lost
        assert why.strip().startswith("⚠ Execution 1 ended without a result: its worker w1"), why
        assert "its call may have been sent" in why, why
        assert called.split()[0] == "2" and "200" in called, called
        assert page.locator("table.attempts .row-lost").count() == 1
        shoot(page, "run-attempts-lost")
        page.set_viewport_size(NARROW)
        assert_fits_a_phone(page.evaluate(FIT_JS, ["table.attempts", "th, td"]))


def test_runs_show_says_the_execution_lost_with_its_worker(server: tuple[DemoServer, str]) -> None:
    """`runs show` of the same run (the real command, over HTTP): ATTEMPTS counts the lost
    execution, DETAIL says which, whose worker, and that its call may have been sent."""
    running, run_id = server
    shown = schemabridge(dict(os.environ), "runs", "show", run_id, "--api-url", running.url)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())  # the table may wrap its cells
    assert "1 attempt in 2 executions, 1 lost" in text, shown.stdout
    assert "execution 1 lost (lease expired): its worker w1 stopped without a result" in text, (
        shown.stdout
    )
    assert "its call may have been sent" in text, shown.stdout
