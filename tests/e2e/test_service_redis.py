"""Separate `worker` and `api` processes and the Redis they coordinate through (real
subprocesses): on PostgreSQL, which other processes share by nature, one without
`SCHEMABRIDGE_REDIS_URL` is refused, as its embedded Redis would be its alone; on SQLite it
starts, saying so; and a refusal to listen names the option of the command that was run."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.e2e.rest_harness import process_env, service
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
