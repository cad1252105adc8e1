"""API keys as an operator lives with them, on both backends, with a real `api` process: a
key revoked by the CLI (another process) is refused by the running API on the very next
request; a key's secret is printed once, by `keys create`, and is nowhere else: not in the
database (only its SHA-256 is), not in `keys list`, not in the API's access log (which names
the key's id)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.e2e.rest_harness import process_env, schemabridge, service, upgraded
from tests.integration.dump_harness import dump_database, hits


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = schemabridge(env, "keys", *args)
    assert done.returncode == 0, done.stderr
    return done


def key_id(env: dict[str, str], name: str) -> str:
    listed = json.loads(cli(env, "list", "--json").stdout)
    assert json.loads(cli(env, "list", "-o", "json").stdout) == listed  # as every command says it
    return str(next(key["id"] for key in listed if key["name"] == name))


async def test_revocation_holds_at_once_and_secrets_are_shown_once(
    backend: Backend, tmp_path: Path
) -> None:
    env = upgraded(process_env(backend, tmp_path))
    created = cli(env, "create", "--tenant", "acme", "--name", "acme-ci")
    secret = created.stdout.strip()
    admin = cli(env, "create", "--admin", "--name", "ops").stdout.strip()
    identifier = key_id(env, "acme-ci")

    with service(["api", "--port", "0"], env, tmp_path / "api.log") as api:
        url = api.wait_for_url()
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
            auth = {"Authorization": f"Bearer {secret}"}
            assert (await http.get("/runs", headers=auth)).status_code == 200
            await asyncio.to_thread(cli, env, "revoke", identifier)
            refused = await http.get("/runs", headers=auth)
            assert refused.status_code == 401, refused.text
            assert refused.json()["code"] == "unauthorized"
            assert (await http.get("/keys", headers={"X-API-Key": admin})).status_code == 200
        assert api.stop() == 0
        printed = api.stdout() + api.stderr()

    table = cli(env, "list").stdout
    listed = cli(env, "list", "--json").stdout + table
    # Whether each key works now is a column of its own, as REST's `state`.
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert "STATE" in rows["ID"]
    assert rows[identifier][rows["ID"].index("STATE") + 1] == "revoked"  # ROLE is two words
    dump = await dump_database(backend.database_url)
    for key in (secret, admin):
        assert hits(dump, key) == []
        assert hits(dump, hashlib.sha256(key.encode()).hexdigest()) != []
        assert key not in listed and key not in printed
    assert f'"key_id": "{identifier}"' in printed  # the access log names the key
    assert created.stdout.count(secret) == 1 and secret not in created.stderr


def test_a_key_created_with_an_expiry_says_its_time_in_utc(tmp_path: Path) -> None:
    """`keys create --expires-in-days` said "expires 2027-03-07 06:37", no zone, where every
    other time the CLI prints says UTC: it says the moment as the revocation does."""
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}"
    env.pop("SCHEMABRIDGE_REDIS_URL", None)
    before = time.time()
    created = cli(upgraded(env), "create", "--tenant", "acme", "--expires-in-days", "90")
    after = time.time()
    expires = re.search(r", expires (\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ)$", created.stderr, re.M)
    assert expires is not None, created.stderr
    moment = datetime.strptime(expires.group(1), "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=UTC)
    assert before - 1 <= moment.timestamp() - 90 * 86_400 <= after, created.stderr
