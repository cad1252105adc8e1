"""Worker processes for tests: real `schemabridge worker` subprocesses on a test backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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


def start_worker(env: dict[str, str], name: str, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [SCHEMABRIDGE, "worker", "--name", name, "--log-level", "warning"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_worker(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=60)
