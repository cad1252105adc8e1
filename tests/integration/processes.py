"""Worker processes for tests: real `schemabridge worker` subprocesses on a test backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests import cli_forks
from tests.conftest import Backend

SCHEMABRIDGE = str(Path(sys.executable).with_name("schemabridge"))


def worker_env(backend: Backend, tmp_path: Path, **settings: str) -> dict[str, str]:
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = backend.database_url
    if backend.redis_url is not None:
        env["SCHEMABRIDGE_REDIS_URL"] = backend.redis_url
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(tmp_path / "health")
    # These tests are about claims and leases, not the tenant rate limit (1,000/min).
    env["SCHEMABRIDGE_TENANT_RATE_PER_MINUTE"] = "10000000"
    for name, value in settings.items():
        env[f"SCHEMABRIDGE_{name.upper()}"] = value
    return env


Process = subprocess.Popen[bytes] | cli_forks.ForkedProcess


def start_worker(env: dict[str, str], name: str, log_path: Path) -> Process:
    """`schemabridge worker --name NAME` in its own session, its output (both streams) appended
    to `log_path`; forked from the tests' fork server (`tests/cli_forks.py`)."""
    argv = [SCHEMABRIDGE, "worker", "--name", name, "--log-level", "warning"]
    if not cli_forks.scripted():
        return cli_forks.server().start(
            argv,
            env=env,
            cwd=Path.cwd(),
            stdin=Path(os.devnull),
            stdout=log_path,
            stderr=log_path,
            new_session=True,
        )
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_worker(process: Process, sig: int = signal.SIGTERM) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=60)
