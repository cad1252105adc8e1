"""The command line against a real REST API, as an operator runs it: a `Stack` is
`schemabridge serve` (embedded SQLite and Redis) or `schemabridge api` with two
`schemabridge worker` processes (PostgreSQL + Redis), on free loopback ports, with an admin
key and the demo downstream (its own process, on a free port). `Stack.cli(...)` runs the real
`schemabridge` binary against it.

Module-scoped: starting the processes costs seconds, so a test module shares one stack (its
tests keep to their own runs, tenants and destinations).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests import cli_forks
from tests.conftest import (
    REDIS_TEST_URL,
    Backend,
    _create_pg_database,
    _drop_pg_database,
    require_service,
)
from tests.e2e.rest_harness import ROOT, SCHEMABRIDGE, Service, process_env, service, upgraded

DEMO_PORT_IN_EXAMPLES = "http://127.0.0.1:8765"
CLI_TIMEOUT_S = 180.0
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
HOLDING = ["--min-runs", "1000", "--min-duration", "1h"]
"""`deployments start` options of a stage that holds for the whole test: the deployment stays
where it started."""


@dataclass
class Stack:
    name: str
    url: str
    admin_key: str
    env: dict[str, str]
    """The services' environment (their database and Redis): for `keys` and `db`."""
    downstream: str
    tmp: Path
    services: dict[str, Service] = field(default_factory=dict)
    """The stack's processes by name (`api`, each worker's), for a test that stops one."""

    def cli(
        self,
        *args: str,
        key: str | None = None,
        api_url: str | None = None,
        timeout: float = CLI_TIMEOUT_S,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`schemabridge ARGS` against this stack's API (the admin key unless `key`; "" for
        none), stdout and stderr captured as text (neither is a terminal); `env`: more
        environment for this command."""
        env = {**self.env, **(env or {})}
        env["SCHEMABRIDGE_API_URL"] = api_url or self.url
        env["SCHEMABRIDGE_API_KEY"] = self.admin_key if key is None else key
        return cli_forks.run([SCHEMABRIDGE, *args], env=env, cwd=ROOT, timeout=timeout)

    def ok(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`cli`, which must exit 0 without a traceback."""
        result = self.cli(*args, **kwargs)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        return result

    def json(self, *args: str, **kwargs: Any) -> Any:
        """`cli ARGS --output json`, parsed."""
        return json.loads(self.ok(*args, "--output", "json", **kwargs).stdout)

    def publish(self, document: dict[str, Any], note: str) -> subprocess.CompletedProcess[str]:
        """`workflows publish` of `document` from a file named by its name and `note`."""
        path = self.tmp / f"{document['name']}-{note}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return self.ok("workflows", "publish", str(path))

    def downstream_script(self, path: str, responses: list[Any]) -> None:
        """Queue answers for one path of the demo downstream (`POST /_script`)."""
        with httpx.Client(trust_env=False, timeout=10) as http:
            answer = http.post(
                f"{self.downstream}/_script", json={"path": path, "responses": responses}
            )
            answer.raise_for_status()


def assert_refused(result: subprocess.CompletedProcess[str], exit_code: int, *needles: str) -> str:
    """The command failed as the CLI promises: `exit_code`, one `error:` line on stderr (a
    422 may list its problems on the lines after), nothing on stdout, no traceback."""
    assert result.returncode == exit_code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), result.stderr
    assert all(line.startswith("  ") for line in lines[1:]), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    return result.stderr


def started_id(stdout: str) -> str:
    """The id of the deployment `deployments start` said it started."""
    found = re.search(rf"^deployment ({UUID}) started: ", stdout, re.M)
    assert found, stdout
    return found.group(1)


def wait_for_deployment(
    stack: Stack, deployment_id: str, status: str, timeout_s: float = 60
) -> Any:
    """`deployments show --output json` once the deployment has `status`."""
    deadline = time.monotonic() + timeout_s
    shown = stack.json("deployments", "show", deployment_id)
    while shown["status"] != status and time.monotonic() < deadline:
        time.sleep(0.2)
        shown = stack.json("deployments", "show", deployment_id)
    assert shown["status"] == status, shown
    return shown


def write_examples(directory: Path, downstream: str) -> list[Path]:
    """The shipped example workflows (not their inputs), pointed at `downstream` instead of
    the demo's default port."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted((ROOT / "examples").glob("*.json")):
        if path.name.endswith(".input.json"):
            continue
        target = directory / path.name
        text = path.read_text(encoding="utf-8").replace(DEMO_PORT_IN_EXAMPLES, downstream)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def _admin_key(env: dict[str, str]) -> str:
    created = subprocess.run(
        [SCHEMABRIDGE, "keys", "create", "--admin", "--name", "e2e"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


@contextlib.contextmanager
def _downstream(tmp: Path) -> Iterator[str]:
    program = [sys.executable, "-m", "demo.downstream"]
    env = dict(os.environ)
    with service(["--port", "0"], env, tmp / "downstream.log", program) as running:
        yield running.wait_for_url()


def _stopped(services: list[Service]) -> None:
    for running in services:
        running.stop()
    for running in services:
        assert "Traceback" not in running.stderr(), running.stderr()


@contextlib.contextmanager
def serve_stack(tmp: Path) -> Iterator[Stack]:
    """`schemabridge serve` on a SQLite file, authentication on."""
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp / 'sb.db'}", None)
    env = upgraded(process_env(backend, tmp))
    key = _admin_key(env)
    with (
        _downstream(tmp) as downstream,
        service(["serve", "--port", "0", "--no-access-log"], env, tmp / "serve.log") as serve,
    ):
        url = serve.wait_for_url()
        yield Stack("serve", url, key, env, downstream, tmp)
        _stopped([serve])


@contextlib.contextmanager
def cluster_stack(tmp: Path, workers: tuple[str, ...] = ("w1", "w2")) -> Iterator[Stack]:
    """`schemabridge api` and `workers` (two by default) on a fresh PostgreSQL database and
    Redis."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    import redis

    coordination = redis.Redis.from_url(REDIS_TEST_URL)
    coordination.flushdb()
    name = asyncio.run(_create_pg_database())
    try:
        database = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
        env = process_env(Backend("server", database, REDIS_TEST_URL), tmp)
        upgraded = subprocess.run(
            [SCHEMABRIDGE, "db", "upgrade"], env=env, capture_output=True, text=True, check=False
        )
        assert upgraded.returncode == 0, upgraded.stderr
        key = _admin_key(env)
        worker = ["worker", "--log-level", "warning", "--name"]
        with contextlib.ExitStack() as running:
            downstream = running.enter_context(_downstream(tmp))
            api_args = ["api", "--port", "0", "--no-access-log"]
            api = running.enter_context(service(api_args, env, tmp / "api.log"))
            started = {"api": api}
            for name in workers:
                started[name] = running.enter_context(
                    service([*worker, name], env, tmp / f"{name}.log")
                )
            url = api.wait_for_url()
            yield Stack("cluster", url, key, env, downstream, tmp, started)
            _stopped(list(started.values()))
    finally:
        asyncio.run(_drop_pg_database(name))
        coordination.flushdb()
        coordination.close()


@contextlib.contextmanager
def stack_of(kind: str, tmp: Path) -> Iterator[Stack]:
    """`serve` or `cluster`."""
    builder = serve_stack if kind == "serve" else cluster_stack
    with builder(tmp) as stack:
        yield stack
