"""Separate `worker` and `api` processes and the Redis they coordinate through (real
subprocesses): on PostgreSQL, which other processes share by nature, one without
`SCHEMABRIDGE_REDIS_URL` is refused, as its embedded Redis would be its alone; on SQLite it
starts, saying so; a refusal to listen names the option of the command that was run; and a
name is one live worker's: a second one under it is refused, a restart after a crash is not."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path

import pytest
import redis.asyncio as redis

from engine.coordination.heartbeat import read_services
from schemas.clock import SystemClock
from tests.conftest import Backend
from tests.e2e.rest_harness import PROCESS_READY_TIMEOUT_S, Service, process_env, service
from tests.e2e.test_cli_errors import free_port, one_line
from tests.e2e.test_cli_run import run_cli


@pytest.mark.parametrize("command", [["worker"], ["api", "--port", "0"]], ids=["worker", "api"])
def test_a_separate_process_on_postgresql_needs_the_shared_redis(command: list[str]) -> None:
    # Refused before anything is opened: the database need not even answer.
    database = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    result = run_cli((*command, "--database", database), {})
    line = one_line(result, 2, "SCHEMABRIDGE_REDIS_URL", "embedded Redis", "schemabridge serve")
    assert f"a separate {command[0]} process on PostgreSQL" in line
    assert result.stdout == ""


def test_a_worker_on_postgresql_is_not_told_to_use_the_embedded_redis() -> None:
    # It would refuse it (above): the advice is the shared Redis. Redis is probed first, so
    # the database need not answer.
    database = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/sb"
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    result = run_cli(("worker", "--database", database), {"SCHEMABRIDGE_REDIS_URL": dead_redis})
    line = one_line(result, 4, f"cannot reach Redis at {dead_redis}")
    assert "embedded" not in line and "unset" not in line, line
    assert "the Redis every process of this database shares" in line, line


def test_a_worker_on_sqlite_with_the_embedded_redis_says_it_coordinates_with_nothing(
    tmp_path: Path,
) -> None:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    env = process_env(backend, tmp_path)
    args = ["worker", "--name", "alone", "--health-port", "0"]
    with service(args, env, tmp_path / "worker.log") as worker:
        worker.wait_for_url()
        assert worker.stop(signal.SIGTERM) == 0
    warnings = [line for line in worker.stderr().splitlines() if " WARNING " in line]
    assert len(warnings) == 1, worker.stderr()
    assert "redis embedded: this worker's caps" in warnings[0]
    assert "SCHEMABRIDGE_REDIS_URL" in warnings[0]
    assert "redis embedded" in worker.stdout()  # the ready line says it too


def test_a_health_port_in_use_names_the_workers_option(tmp_path: Path) -> None:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_cli(
            ("worker", "--name", "w", "--health-port", str(port)),
            {"SCHEMABRIDGE_DATABASE_URL": backend.database_url},
        )
    line = one_line(result, 1, f"cannot listen on 127.0.0.1:{port}")
    assert line.endswith("pick another with --health-port (0: a free one)"), line


def test_a_worker_refuses_to_start_with_the_exit_code_its_help_documents(
    tmp_path: Path,
) -> None:
    """1 a health port another process holds, 4 a Redis that does not answer (a closed
    loopback port), 2 a Redis URL that cannot work, as `worker --help` says; and the port,
    checked before anything connects, is what a worker given both a taken port and a dead
    Redis says."""
    database = {"SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"}
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    down = {**database, "SCHEMABRIDGE_REDIS_URL": dead_redis}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        in_use = run_cli(("worker", "--health-port", str(port)), database)
        both = run_cli(("worker", "--health-port", str(port)), down)
    for refused in (in_use, both):
        one_line(refused, 1, f"cannot listen on 127.0.0.1:{port}", "--health-port")
    one_line(run_cli(("worker",), down), 4, f"cannot reach Redis at {dead_redis}")
    malformed = {**database, "SCHEMABRIDGE_REDIS_URL": "http://127.0.0.1:6379/0"}
    one_line(run_cli(("worker",), malformed), 2, "does not start with redis://")
    # A database number the server does not have is a setting to fix, not an outage.
    no_such_db = {**database, "SCHEMABRIDGE_REDIS_URL": "redis://127.0.0.1:6379/99"}
    one_line(run_cli(("worker",), no_such_db), 2, "the server has no database 99")
    documented = " ".join(run_cli(("worker", "--help"), {}).stdout.split())
    assert "1 refused to start: its port, or its --name, in use" in documented, documented
    assert "4 the database or Redis does not answer" in documented, documented


def _wait_beating(worker: Service, redis_url: str, name: str = "w1") -> None:
    """Until the worker printed its `ready` line (it serves no URL without --health-port) and
    its first heartbeat, which follows, reads as up."""
    deadline = time.monotonic() + PROCESS_READY_TIMEOUT_S
    while " ready: " not in worker.stdout() or not _services(redis_url).get(name):
        assert worker.process.poll() is None, worker.stderr()
        assert time.monotonic() < deadline, f"not ready: {worker.stderr()}"
        time.sleep(0.05)


def _services(redis_url: str) -> dict[str, bool]:
    """Whether each service is up, as `schemabridge services` reads it (`read_services`)."""

    async def read() -> dict[str, bool]:
        client = redis.Redis.from_url(redis_url)
        try:
            return {s.name: s.up for s in await read_services(client, SystemClock())}
        finally:
            await client.aclose()

    return asyncio.run(read())


def _cli_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("SCHEMABRIDGE_")}


def test_a_second_worker_under_a_live_ones_name_is_refused(tmp_path: Path, redis_url: str) -> None:
    """Two workers named alike on one machine look like one, and the first to stop hid the
    other; the second is refused in one line, and the first stays up."""
    backend = Backend("shared", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", redis_url)
    env = process_env(backend, tmp_path)
    assert run_cli(("db", "upgrade"), _cli_env(env)).returncode == 0
    with service(["worker", "--name", "w1"], env, tmp_path / "first.log") as first:
        _wait_beating(first, redis_url)
        second = run_cli(("worker", "--name", "w1"), _cli_env(env))
        line = one_line(second, 1, "a worker named w1 is running here already")
        assert f"pid {first.process.pid}" in line and "another --name" in line, line
        assert _services(redis_url)["w1"], "the live worker still reads as up"
        assert first.stop(signal.SIGTERM) == 0
    assert not _services(redis_url)["w1"]


def test_of_two_workers_started_at_once_under_one_name_one_is_refused(
    tmp_path: Path, redis_url: str
) -> None:
    """Started in the same moment (a unit started twice, a supervisor told to run two),
    each read the name as free before either beat, and both ran under it: one is refused
    in the line a later second one gets, the other runs."""
    backend = Backend("shared", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", redis_url)
    env = process_env(backend, tmp_path)
    assert run_cli(("db", "upgrade"), _cli_env(env)).returncode == 0
    args = ["worker", "--name", "w1"]
    with (
        service(args, env, tmp_path / "a.log") as one,
        service(args, env, tmp_path / "b.log") as other,
    ):
        deadline = time.monotonic() + PROCESS_READY_TIMEOUT_S
        while one.process.poll() is None and other.process.poll() is None:
            assert time.monotonic() < deadline, "both workers run under one name"
            time.sleep(0.05)
        refused, kept = (one, other) if one.process.poll() is not None else (other, one)
        assert refused.process.returncode == 1, refused.stderr()
        assert "a worker named w1 is running here already" in refused.stderr()
        _wait_beating(kept, redis_url)
        assert kept.stop(signal.SIGTERM) == 0


def test_a_worker_restarted_at_once_after_a_crash_takes_its_name_back(
    tmp_path: Path, redis_url: str
) -> None:
    """The README's restart: kill -9, then the same name at once, while the dead one's beat
    lives on up to the TTL: it starts, says it takes the name over, and reads as up."""
    backend = Backend("shared", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", redis_url)
    env = process_env(backend, tmp_path)
    assert run_cli(("db", "upgrade"), _cli_env(env)).returncode == 0
    with service(["worker", "--name", "w1"], env, tmp_path / "dead.log") as dead:
        _wait_beating(dead, redis_url)
        dead.kill()
    with service(["worker", "--name", "w1"], env, tmp_path / "again.log") as again:
        _wait_beating(again, redis_url)
        assert "taking over the name from pid" in again.stderr(), again.stderr()
        assert _services(redis_url)["w1"]
        assert again.stop(signal.SIGTERM) == 0


def test_a_process_of_another_database_is_refused_on_a_bound_redis(
    tmp_path: Path, redis_url: str
) -> None:
    """A worker given the Redis of another database's processes ran beside them unseen (its
    own admission slots, breakers, rate limits), and a database made anew read the Redis
    state of the one before it: the first process to start binds Redis to its database, and
    a process of another database is refused in one line that says the fix; an emptied Redis
    binds again to whichever database starts first."""
    first = process_env(
        Backend("first", f"sqlite+aiosqlite:///{tmp_path / 'a.db'}", redis_url), tmp_path
    )
    other = process_env(
        Backend("other", f"sqlite+aiosqlite:///{tmp_path / 'b.db'}", redis_url), tmp_path
    )
    for env in (first, other):
        assert run_cli(("db", "upgrade"), _cli_env(env)).returncode == 0
    with service(["worker", "--name", "w1"], first, tmp_path / "first.log") as worker:
        _wait_beating(worker, redis_url)
        refused = run_cli(("worker", "--name", "w2"), _cli_env(other))
        line = one_line(refused, 2, f"Redis at {redis_url} coordinates the processes of another")
        database = redis_url.rsplit("/", 1)[1]
        assert f"redis-cli -h 127.0.0.1 -p 6379 -n {database} FLUSHDB" in line, line
        assert "w2" not in _services(redis_url), "the refused worker never beat"
        # The same database's processes share it, before and after one of them restarted.
        again = run_cli(("worker", "--name", "w1"), _cli_env(first))
        one_line(again, 1, "a worker named w1 is running here already")
        assert worker.stop(signal.SIGTERM) == 0
    asyncio.run(_flush(redis_url))
    with service(["worker", "--name", "w2"], other, tmp_path / "other.log") as worker:
        _wait_beating(worker, redis_url, "w2")
        assert worker.stop(signal.SIGTERM) == 0


async def _flush(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()
