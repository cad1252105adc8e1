"""`schemabridge services` says what kind of process each service is (real `schemabridge api`
and `worker` processes on loopback, beating into the test's Redis database): a worker's name is its
operator's to choose, so the role comes from its heartbeat, not from its name."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

from tests.conftest import Backend
from tests.e2e.cli_harness import Stack, _admin_key
from tests.e2e.outage_harness import wait_until
from tests.e2e.rest_harness import process_env, service, upgraded


def by_name(stack: Stack) -> dict[str, Any]:
    return {item["name"]: item for item in stack.json("services")["items"]}


def test_services_show_each_process_role(tmp_path: Path, redis_url: str) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    # One Redis for both: each process's heartbeat in the same `sb:services`.
    env = process_env(Backend("sqlite+redis", database, redis_url), tmp_path)
    key = _admin_key(upgraded(env))
    worker = f"serve-like-{uuid.uuid4().hex[:8]}"  # named like a serve: the beat tells
    with (
        service(["worker", "--name", worker], env, tmp_path / "worker.log"),
        service(["api", "--port", "0", "--no-access-log"], env, tmp_path / "api.log") as api,
    ):
        url = api.wait_for_url()
        stack = Stack("roles", url, key, env, "", tmp_path)
        api_name = f"api-{socket.gethostname()}-{url.rsplit(':', 1)[1]}"
        wait_until(lambda: bool(by_name(stack).get(worker, {}).get("up")), "its heartbeat")
        listed = by_name(stack)
        assert listed[worker]["role"] == "worker", listed[worker]
        assert (listed[api_name]["role"], listed[api_name]["up"]) == ("api", True)
        header, *rows = stack.ok("services").stdout.splitlines()
    assert header.split()[:3] == ["SERVICE", "STATE", "ROLE"]
    roles = {row.split()[0]: row.split()[2] for row in rows}
    assert (roles[worker], roles[api_name]) == ("worker", "api"), rows
