"""A throwaway PgBouncer of a test's own: its ini in a directory of its own, a free loopback
port, `pool_mode = transaction`, every database of the test PostgreSQL (127.0.0.1:5432, user
postgres) behind it. Missing PgBouncer skips the test, or fails it in CI (`.ci/run` installs
Debian's `pgbouncer`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

START_TIMEOUT_S = 30.0


def pgbouncer_binary() -> str:
    """Where Debian's `pgbouncer` is (/usr/sbin is not on every PATH), or skip (fail in CI)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is not None:
        return found
    message = "pgbouncer is not installed: apt-get install pgbouncer"
    if IN_CI:
        pytest.fail(f"{message} (.ci/run installs it)")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(pool_size: int) -> Iterator[int]:
    """A PgBouncer in transaction mode with `pool_size` server connections per database;
    yields its port. Its log is shown when it fails to start."""
    binary = pgbouncer_binary()
    # Its own directory, readable by the user it drops to (PgBouncer refuses to run as root).
    workdir = Path(tempfile.mkdtemp(prefix="sb-pgbouncer-"))
    workdir.chmod(0o755)
    port = _free_port()
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        "* = host=127.0.0.1 port=5432 user=postgres\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 500\n",
        encoding="utf-8",
    )
    ini.chmod(0o644)
    log = workdir / "pgbouncer.log"
    command = [binary, str(ini)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "nobody"]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pgbouncer did not start: {log.read_text()}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def through(database_url: str, port: int) -> str:
    """`database_url` (the test PostgreSQL's) through the PgBouncer on `port`. Refuses a URL
    that does not name the PostgreSQL the PgBouncer fronts: the test would then run straight
    against PostgreSQL and prove nothing about the pooler."""
    assert "127.0.0.1:5432" in database_url, f"not the PgBouncer's PostgreSQL: {database_url}"
    return database_url.replace("127.0.0.1:5432", f"127.0.0.1:{port}")
