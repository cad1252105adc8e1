"""Redis on a Unix socket (`unix:///path/to/redis.sock?db=N`), as the docs offer it for a Redis
on the same machine: a worker runs a fan-out through it (admission scripts, wake-ups,
heartbeats), and the refusals that name a Redis database name this one's. redis-py refuses TCP
keepalive on a Unix socket, and every process failed at its first command with an internal
error (a TypeError) before."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.startup import StartupRefused, check_redis_url, open_runtime
from engine.settings import Settings
from schemas.errors import Refusal
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, fanout, items

SOCKET_DB = 3


@contextlib.contextmanager
def unix_redis() -> Iterator[Path]:
    """A `redis-server` of this test's own listening on a Unix socket only (no TCP port)."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed (apt-get install redis-server)"
    # A short directory: a socket's path is at most 107 bytes, and pytest's tmp_path can be long.
    with tempfile.TemporaryDirectory(prefix="sb-redis-", dir="/tmp") as directory:
        socket_path = Path(directory) / "redis.sock"
        args = ["--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"]
        process = subprocess.Popen(
            [binary, *args, "--save", "", "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(unix_socket_path=str(socket_path))
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        break
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
            client.close()
            yield socket_path
        finally:
            process.kill()
            process.wait(timeout=30)


async def test_a_worker_runs_a_fan_out_through_redis_on_a_unix_socket(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    with unix_redis() as socket_path:
        url = f"unix://{socket_path}?db={SOCKET_DB}"
        backend = Backend("unix", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", url)
        runtime = await open_runtime(settings_for(backend))
        try:
            ops = Operations(runtime)
            await ops.workflows.publish(fanout(downstream.url))
            async with running_worker(runtime):
                submitted = await ops.runs.submit("parent", {"items": items(12)})
                run = await ended(ops, submitted.run.id)
            assert run.status == "SUCCEEDED", run.error
            assert run.fanout is not None and run.fanout.succeeded == 12
        finally:
            await runtime.close()
        # The coordination state went to the database the URL names, not db 0.
        client = redis.Redis(unix_socket_path=str(socket_path), db=SOCKET_DB)
        try:
            assert client.dbsize() > 0
            assert redis.Redis(unix_socket_path=str(socket_path), db=0).dbsize() == 0
        finally:
            client.close()


async def test_a_unix_socket_redis_of_another_database_names_the_flush_that_frees_it(
    tmp_path: Path,
) -> None:
    """The refusal's fix is a `redis-cli` command for this socket and database; run as given,
    it lets the other database's processes start."""
    with unix_redis() as socket_path:
        url = f"unix://{socket_path}?db={SOCKET_DB}"
        first, other = (
            Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / name}", redis_url=url)
            for name in ("a.db", "b.db")
        )
        await (await open_runtime(first)).close()
        with pytest.raises(StartupRefused) as refused:
            await open_runtime(other)
        assert refused.value.code == "redis_of_another_database"
        command = f"redis-cli -s {socket_path} -n {SOCKET_DB} FLUSHDB"
        assert f"({command})" in refused.value.message, refused.value.message
        flushing = await asyncio.create_subprocess_exec(
            *command.split(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(flushing.communicate(), 30)
        assert out.decode().strip() == "OK", (out, err)
        await (await open_runtime(other)).close()


def test_a_unix_socket_database_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(StartupRefused) as refused:
        check_redis_url("unix:///run/redis.sock?db=three", "sqlite:///sb.db")
    assert refused.value.refusal is Refusal.INVALID
    assert "'three'" in refused.value.message, refused.value.message
    check_redis_url("unix:///run/redis.sock?db=3", "sqlite:///sb.db")
    check_redis_url("unix:///run/redis.sock", "sqlite:///sb.db")
