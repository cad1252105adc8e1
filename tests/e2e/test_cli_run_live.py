"""`schemabridge run` while the run goes on, as a user runs it (real subprocesses): it says why
work waits, stops at `--timeout` or Ctrl-C with one line (the claims given back at once), and
rides out a Redis restart and PostgreSQL cut for 10 s, each with one warning, no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from demo.downstream import RunningDownstream
from tests.conftest import Backend
from tests.e2e.rest_harness import SCHEMABRIDGE, process_env
from tests.e2e.test_cli_errors import free_port
from tests.e2e.test_cli_run import ROOT
from tests.e2e.test_rest_faults import fan_out, proxied, throwaway_redis

STEP_TIMEOUT_S = 120.0


def write(tmp_path: Path, documents: list[dict[str, Any]]) -> list[str]:
    paths = []
    for document in documents:
        path = tmp_path / f"{document['name']}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    return paths


def env_for(tmp_path: Path, database: str, redis: str | None = None) -> dict[str, str]:
    return process_env(Backend("cli", database, redis), tmp_path)


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SCHEMABRIDGE, *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(check: Any, what: str, timeout_s: float = STEP_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(sqlite3.Error):
            found = check()
            if found:
                return found
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout_s} s")


async def test_run_says_why_it_waits_and_stops_at_its_timeout(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    files = write(tmp_path, fan_out(downstream.url))
    env = env_for(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    args = ["run", *files, "--input", json.dumps({"items": list(range(8))})]
    process = start([*args, "--tenant-rate", "2", "--timeout", "8"], env)
    _, stderr = await asyncio.to_thread(process.communicate, timeout=STEP_TIMEOUT_S)
    assert process.returncode == 3, stderr
    assert "Traceback" not in stderr
    assert "waiting: 6 children: tenant default is at its rate limit (2/2" in stderr, stderr
    assert "or rerun with --tenant-rate N" in stderr and "(next try in " in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("still running at --timeout: run ")
    run_id = last.split("run ", 1)[1].split(" ", 1)[0]
    assert f"schemabridge runs watch {run_id}" in last


def test_ctrl_c_says_the_run_goes_on_and_gives_the_claims_back(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    slow = {
        "name": "slow",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{downstream.url}/slow",
                    "headers": {"X-Demo-Sleep-Ms": "60000"},
                    "timeoutMs": 120000,
                },
            }
        },
    }
    database = tmp_path / "sb.db"
    process = start(
        ["run", *write(tmp_path, [slow])], env_for(tmp_path, f"sqlite+aiosqlite:///{database}")
    )

    def running() -> bool:
        with sqlite3.connect(database) as conn:
            return conn.execute("SELECT status FROM step").fetchone() == ("RUNNING",)

    wait_until(running, "the step running")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)  # not the 60 s call, nor a 30 s lease
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: run ") and "goes on" in last
    with sqlite3.connect(database) as conn:
        step = conn.execute("SELECT status, claim_token, lease_expires_at FROM step").fetchone()
        given = conn.execute("SELECT data FROM run_log WHERE message LIKE 'claim given back%'")
        assert step == ("READY", None, None)
        (data,) = given.fetchall()
    # The execution cut short with its call on the wire is its step history's lost entry.
    lost = json.loads(data[0])
    assert (lost["lost"], lost["execution"]) == ("worker_stopped", 1), lost


async def test_run_and_a_worker_ride_out_a_redis_restart_with_one_warning(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    port, items = free_port(), 300
    env = env_for(
        tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", f"redis://127.0.0.1:{port}/0"
    )
    files = write(tmp_path, fan_out(downstream.url))
    with throwaway_redis(port, tmp_path) as redis_process:
        upgrade = [SCHEMABRIDGE, "db", "upgrade"]
        assert (await asyncio.to_thread(subprocess.run, upgrade, env=env)).returncode == 0
        worker = start(["worker", "--name", "w1"], env)
        assert worker.stdout is not None
        ready = await asyncio.to_thread(worker.stdout.readline)
        assert ready.startswith(f"w1 ready: pid {worker.pid}, database sqlite+aiosqlite:///")
        assert ready.rstrip().endswith(f"redis redis://127.0.0.1:{port}/0"), ready
        run = start(["run", *files, "--input", json.dumps({"items": list(range(items))})], env)
        try:
            database = tmp_path / "sb.db"

            def some_done() -> bool:
                with sqlite3.connect(database) as conn:
                    done = conn.execute("SELECT count(*) FROM run WHERE status = 'SUCCEEDED'")
                    return int(done.fetchone()[0]) >= 20

            await asyncio.to_thread(wait_until, some_done, "the first children")
            redis_process.kill()
            redis_process.wait(timeout=30)
            await asyncio.sleep(2)  # the outage itself, not a wait for a state
            with throwaway_redis(port, tmp_path):
                stdout, run_err = await asyncio.to_thread(run.communicate, timeout=300)
        finally:
            worker.send_signal(signal.SIGTERM)
            _, worker_err = await asyncio.to_thread(worker.communicate, timeout=60)
    assert run.returncode == 0, run_err
    assert stdout.startswith("SUCCEEDED run ") and f"{items} succeeded" in stdout
    for stderr in (run_err, worker_err):
        assert "Traceback" not in stderr
        assert stderr.count("redis unreachable") <= 1, stderr
    assert worker_err.count("redis unreachable") + run_err.count("redis unreachable") >= 1
    assert "WorkerStats" not in worker_err
    assert "service w1 stopped: " in worker_err


async def test_run_rides_out_postgresql_cut_for_ten_seconds(
    pg_database_url: str, tmp_path: Path, downstream: RunningDownstream
) -> None:
    async with proxied(pg_database_url) as (proxy, through):
        env = env_for(tmp_path, through)
        files = write(tmp_path, fan_out(downstream.url))
        process = await asyncio.create_subprocess_exec(
            SCHEMABRIDGE,
            "run",
            *files,
            "--input",
            json.dumps({"items": list(range(200))}),
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), STEP_TIMEOUT_S)
        assert line.startswith(b"run "), line
        await asyncio.sleep(1)  # into the fan-out: the fault's moment, not a wait for state
        await proxy.cut()
        await asyncio.sleep(10)  # the outage
        await proxy.start()
        stdout, stderr = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 0, stderr
    assert stdout.decode().startswith("SUCCEEDED run "), stdout
    assert b"Traceback" not in stderr
    assert stderr.count(b"database unreachable") <= 1, stderr
