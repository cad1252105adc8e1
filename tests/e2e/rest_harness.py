"""Serving a REST app for a test: real uvicorn on a free loopback port, in the test's loop.

async with serving(create_app(settings, runtime_factory=borrowed_runtime(runtime))) as url:
    async with client(url) as http:
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from api.rest import ApiServer
from api.rest.middleware import ACCESS_LOGGER
from engine.settings import parse_trusted_proxies
from tests import cli_forks
from tests.conftest import Backend

READY_TIMEOUT_S = 20.0
SCHEMABRIDGE = str(Path(sys.executable).with_name("schemabridge"))
ROOT = Path(__file__).resolve().parents[2]
PROCESS_READY_TIMEOUT_S = 60.0
CLI_HERE = f"cli:{getpass.getuser()}@{socket.gethostname()}"
"""The actor a command on the database directly records, run by these tests' user here."""
"""Generous: a cold interpreter importing the whole stack on a loaded machine."""


@contextlib.asynccontextmanager
async def serving(app: FastAPI, *, trusted_proxies: str = "") -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) until the block ends; yields its URL.
    `trusted_proxies`: as `SCHEMABRIDGE_TRUSTED_PROXIES` says them (default none)."""
    proxies = parse_trusted_proxies(trusted_proxies)
    server = ApiServer("127.0.0.1", 0, grace_s=1.0, trusted_proxies=proxies)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(server.serve(app, stop), name="test-http")
        try:
            started = await asyncio.wait_for(server.wait_ready(), READY_TIMEOUT_S)
            assert started, "the app's lifespan failed to start"
            yield server.url
        finally:
            stop.set()


def client(url: str, key: str | None = None) -> httpx.AsyncClient:
    """An HTTP client for `url` (proxy settings of the environment ignored)."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(base_url=url, headers=headers, trust_env=False, timeout=30.0)


def access_lines(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    """The access-log lines among captured log records, parsed."""
    return [json.loads(r.getMessage()) for r in records if r.name == ACCESS_LOGGER]


# ── processes ───────────────────────────────────────────────────────────────────────────────


def schemabridge(
    env: dict[str, str],
    *args: str,
    stdin: str = "",
    timeout_s: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`schemabridge ARGS` run to its end (in `cwd`, default this one), `stdin` fed to it, its
    output captured."""
    return cli_forks.run([SCHEMABRIDGE, *args], env=env, cwd=cwd, stdin=stdin, timeout=timeout_s)


def upgraded(env: dict[str, str]) -> dict[str, str]:
    """`env`, after `schemabridge db upgrade` made its database: `keys` and `secrets` act on
    an existing database only (they refuse an SQLite file that does not exist)."""
    done = schemabridge(env, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    return env


def process_env(backend: Backend, tmp_path: Path, **settings: str) -> dict[str, str]:
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = backend.database_url
    env.pop("SCHEMABRIDGE_REDIS_URL", None)
    if backend.redis_url is not None:
        env["SCHEMABRIDGE_REDIS_URL"] = backend.redis_url
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(tmp_path / "health")
    for name, value in settings.items():
        env[f"SCHEMABRIDGE_{name.upper()}"] = value
    return env


class Service:
    """A `schemabridge` process (forked from the tests' fork server, `tests/cli_forks.py`) or
    another `program`'s subprocess (`python -m demo.downstream`); its stdout (where it prints
    its URL) and stderr go to files beside `log`."""

    def __init__(
        self, args: list[str], env: dict[str, str], log: Path, program: list[str] | None = None
    ) -> None:
        self.log = log
        self.out = log.with_suffix(".out")
        self.started_at = time.time()
        """About when the process started (epoch seconds): just before it is spawned."""
        self.process: subprocess.Popen[bytes] | cli_forks.ForkedProcess
        if program is None and not cli_forks.scripted():
            self.process = cli_forks.server().start(
                [SCHEMABRIDGE, *args],
                env=env,
                cwd=ROOT,
                stdin=Path(os.devnull),
                stdout=self.out,
                stderr=log,
                new_session=True,
            )
            return
        with log.open("ab") as stderr, self.out.open("ab") as stdout:  # the child keeps its own
            self.process = subprocess.Popen(
                [*(program or [SCHEMABRIDGE]), *args],
                env=env,
                cwd=ROOT,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )

    def wait_for_url(self, timeout_s: float = PROCESS_READY_TIMEOUT_S) -> str:
        """The URL of the first 'listening on URL' line; fails after `timeout_s` or when the
        process ends first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.out.read_text(encoding="utf-8").splitlines():
                if " listening on " in line:
                    return line.rsplit(" ", 1)[1]
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode}: {self.stderr()}")
            time.sleep(0.05)
        raise AssertionError(f"no URL within {timeout_s} s: {self.stderr()}")

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@contextlib.contextmanager
def service(
    args: list[str], env: dict[str, str], log: Path, program: list[str] | None = None
) -> Iterator[Service]:
    """A running `schemabridge` service, killed at the end if it is still running."""
    running = Service(args, env, log, program)
    try:
        yield running
    finally:
        running.kill()
