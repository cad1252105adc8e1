"""Separate `worker` and `api` processes (real subprocesses): a refusal to listen names the
option of the command that was run."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.conftest import Backend
from tests.e2e.test_cli_errors import one_line
from tests.e2e.test_cli_run import run_cli


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
