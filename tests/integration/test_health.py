"""engine.health: the `.healthy/<service>` marker on a real filesystem, and the graceful
shutdown of a real service process (marker, heartbeat, signals) on both coordination backends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.coordination import keys
from engine.health import HealthMarker
from engine.settings import Settings
from tests.integration.scripts.helpers import open_client, unique

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_SCRIPT = "tests.integration.scripts.service_main"
EVENT_TIMEOUT_S = 15.0
"""Generous: a cold interpreter importing the engine on a loaded CI machine."""


def test_marker_exists_only_inside_the_context(tmp_path: Path) -> None:
    health_dir = tmp_path / ".healthy"
    marker = HealthMarker("worker", health_dir)
    assert not marker.exists()
    with marker as entered:
        assert entered is marker
        assert (health_dir / "worker").is_file()
        assert (health_dir / "worker").read_text(encoding="utf-8") == f"{os.getpid()}\n"
    assert not (health_dir / "worker").exists()
    assert list(health_dir.iterdir()) == [], "no temporary file is left behind"


def test_marker_is_removed_when_the_service_body_fails(tmp_path: Path) -> None:
    marker = HealthMarker("api", tmp_path)
    with pytest.raises(RuntimeError, match="boom"), marker:
        raise RuntimeError("boom")
    assert not marker.exists()


def test_create_and_remove_are_idempotent(tmp_path: Path) -> None:
    marker = HealthMarker("api", tmp_path / "nested" / "dir")
    marker.create()
    marker.create()
    assert marker.exists()
    marker.remove()
    marker.remove()
    assert not marker.exists()


def test_removal_before_exit_is_fine(tmp_path: Path) -> None:
    # Graceful shutdown removes the marker first (on the signal) and again on exit.
    with HealthMarker("api", tmp_path) as marker:
        marker.remove()
        assert not marker.exists()
    assert not marker.exists()


def test_from_settings_uses_health_dir(tmp_path: Path) -> None:
    marker = HealthMarker.from_settings("monitor", Settings(health_dir=tmp_path / "h"))
    assert marker.path == tmp_path / "h" / "monitor"


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "x" * 129, "sp ace"])
def test_names_that_are_not_plain_file_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="health marker"):
        HealthMarker(name, tmp_path)


# ── graceful shutdown of a real process ─────────────────────────────────────────────────────


@asynccontextmanager
async def service_process(
    service: str, health_dir: Path, redis_url: str | None, *args: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run tests/integration/scripts/service_main.py; killed if the test leaves it running."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"SCHEMABRIDGE_REDIS_URL", "REDIS_URL"}
    }
    if redis_url is not None:
        env["SCHEMABRIDGE_REDIS_URL"] = redis_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "error",
        "-m",
        SERVICE_SCRIPT,
        service,
        str(health_dir),
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()


async def next_event(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), EVENT_TIMEOUT_S)
    if not line:
        _, stderr = await asyncio.wait_for(process.communicate(), EVENT_TIMEOUT_S)
        pytest.fail(f"the service exited early: {stderr.decode(errors='replace')}")
    event: dict[str, Any] = json.loads(line)
    return event


async def finish(process: asyncio.subprocess.Process, timeout_s: float) -> dict[str, Any]:
    """Wait for the exit; return the final `exited` event."""
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    assert b"Warning:" not in stderr, stderr.decode(errors="replace")
    event: dict[str, Any] = json.loads(stdout.splitlines()[-1])
    assert event["event"] == "exited"
    return event


async def test_sigterm_removes_the_marker_deletes_the_heartbeat_and_exits_0(
    tmp_path: Path, coord_url: str | None
) -> None:
    service = unique("svc")
    marker = tmp_path / service
    async with service_process(service, tmp_path, coord_url) as process:
        ready = await next_event(process)
        assert ready == {"event": "ready", "pid": process.pid}
        assert marker.is_file()
        if coord_url is not None:
            async with open_client(coord_url) as client:
                raw = await client.get(keys.heartbeat(service))
                assert raw is not None and json.loads(raw)["pid"] == process.pid

        process.send_signal(signal.SIGTERM)
        stopping = await next_event(process)
        assert stopping == {"event": "stopping", "reason": "received SIGTERM", "marker": False}
        exited = await finish(process, EVENT_TIMEOUT_S)

    assert exited["drained"], "in-flight work finished"
    assert exited["cancelled"] == []
    assert not exited["forced"]
    assert not exited["heartbeat_key_left"]
    assert not marker.exists()
    if coord_url is not None:
        async with open_client(coord_url) as client:
            assert await client.exists(keys.heartbeat(service)) == 0


async def test_sigint_stops_the_same_way(tmp_path: Path) -> None:
    async with service_process("ctrl-c", tmp_path, None) as process:
        await next_event(process)
        process.send_signal(signal.SIGINT)
        assert (await next_event(process))["reason"] == "received SIGINT"
        exited = await finish(process, EVENT_TIMEOUT_S)
    assert not exited["heartbeat_key_left"]
    assert not (tmp_path / "ctrl-c").exists()


async def test_a_second_signal_cancels_stuck_work_at_once(
    tmp_path: Path, coord_url: str | None
) -> None:
    service = unique("stuck")
    async with service_process(service, tmp_path, coord_url, "--stuck", "--grace", "60") as process:
        await next_event(process)
        process.send_signal(signal.SIGTERM)
        await next_event(process)  # stopping: the stuck task now holds the exit for 60 s
        process.send_signal(signal.SIGTERM)
        exited = await finish(process, EVENT_TIMEOUT_S)  # far less than the grace period

    assert exited["forced"]
    assert "stuck" in exited["cancelled"]
    assert not exited["heartbeat_key_left"]
    assert not (tmp_path / service).exists()
    if coord_url is not None:
        async with open_client(coord_url) as client:
            assert await client.exists(keys.heartbeat(service)) == 0
