"""`schemabridge keys` as an operator runs it (real subprocesses on a SQLite file): the secret
printed once and alone, the list without secrets, revocation, and every refusal's exit code."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.e2e.rest_harness import CLI_HERE, process_env, schemabridge, upgraded
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    return upgraded(process_env(backend, tmp_path))


def sb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`schemabridge keys ARGS`, forked from the test process's server (`tests/cli_forks.py`):
    the console script's own start adds nothing here but a second of imports."""
    return schemabridge(env, "keys", *args)


def test_create_list_revoke(env: dict[str, str]) -> None:
    # With no key yet, the list says how to make the first one (and JSON is an empty list).
    none = sb(env, "list")
    assert (none.returncode, none.stdout) == (0, "")
    database = env["SCHEMABRIDGE_DATABASE_URL"]  # named, in case it is not the one meant
    assert f"no keys yet in {database}: `schemabridge keys create --admin`" in none.stderr
    assert json.loads(sb(env, "list", "--json").stdout) == []
    admin = sb(env, "create", "--admin", "--name", "ops")
    assert admin.returncode == 0, admin.stderr
    secret = admin.stdout.strip()
    assert secret.startswith("sbk_") and "\n" not in secret, "the key alone on stdout"
    assert "only time the key is shown" in admin.stderr

    tenant = sb(env, "create", "--tenant", "acme", "--expires-in-days", "7")
    assert tenant.returncode == 0, tenant.stderr
    assert "tenant acme" in tenant.stderr and "expires" in tenant.stderr

    listed = sb(env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    keys = json.loads(listed.stdout)
    assert [(k["role"], k["tenantId"], k["name"]) for k in keys] == [
        ("admin", None, "ops"),
        ("tenant", "acme", None),
    ]
    assert secret not in listed.stdout and tenant.stdout.strip() not in listed.stdout
    text = sb(env, "list")  # piped: plain columns, as every list prints
    header, *rows = text.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "ROLE"] and len(rows) == 2
    expected = [[keys[0]["id"], "ops", "admin"], [keys[1]["id"], "-", "tenant"]]
    assert [row.split()[:3] for row in rows] == expected
    table = sb(env, "list")
    assert table.returncode == 0
    assert keys[0]["id"] in table.stdout and "tenant acme" in table.stdout
    assert secret not in table.stdout

    revoked = sb(env, "revoke", keys[0]["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked key {keys[0]['id']}" in revoked.stderr
    # No Redis here: API processes that keep keys with one (even on this SQLite file) were
    # not told, which the command says.
    assert "SCHEMABRIDGE_REDIS_URL is not set here" in revoked.stderr
    after = json.loads(sb(env, "list", "--json").stdout)
    assert [k["state"] for k in after] == ["revoked", "live"]

    # Again: nothing to do, said plainly (when, by whom), exit 0 as for a cancelled run.
    again = sb(env, "revoke", keys[0]["id"])
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip().startswith(f"key {keys[0]['id']} was already revoked at ")
    assert again.stderr.strip().endswith(f" by {CLI_HERE}: nothing to do")
    assert "revoked key" not in again.stderr and "note:" not in again.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["create"], "exactly one"),
        (["create", "--admin", "--tenant", "acme"], "exactly one"),
        (["create", "--admin", "--expires-in-days", "-1"], "a key expires after more than 0"),
        (["create", "--tenant", " acme"], "tenant id"),
    ],
)
def test_create_refusals_are_usage_errors(
    env: dict[str, str], args: list[str], needle: str
) -> None:
    result = sb(env, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert json.loads(sb(env, "list", "--json").stdout) == []


def test_revoking_an_unknown_key_fails(env: dict[str, str]) -> None:
    result = sb(env, "revoke", "0123456789ab")
    assert result.returncode == 1
    assert "no API key with id '0123456789ab'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_revocation_that_cannot_reach_the_api_processes_says_so(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    # PostgreSQL is shared by API processes, which keep keys in memory with their Redis; this
    # shell has none configured, so the revocation reaches them only by their copies' age.
    env = upgraded(process_env(Backend("server", pg_database_url, None), tmp_path))
    created = sb(env, "create", "--admin")
    assert created.returncode == 0, created.stderr
    key_id = json.loads(sb(env, "list", "--json").stdout)[0]["id"]
    revoked = sb(env, "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert "SCHEMABRIDGE_REDIS_URL is not set here" in revoked.stderr
    assert "keep keys in memory for up to 5 s" in revoked.stderr
    assert sb(env, "create", "--admin").returncode == 0
    other_id = json.loads(sb(env, "list", "--json").stdout)[1]["id"]
    told = sb({**env, "SCHEMABRIDGE_REDIS_URL": redis_url}, "revoke", other_id)
    assert told.returncode == 0 and "note:" not in told.stderr
    assert f"revoked key {other_id}" in told.stderr


def test_a_revocation_redis_does_not_take_waits_and_says_why(env: dict[str, str]) -> None:
    # API processes with that Redis may hold the key: the command returns once their copies
    # have expired, in two lines, without the coordination listeners' complaints.
    created = sb(env, "create", "--admin")
    assert created.returncode == 0, created.stderr
    key_id = json.loads(sb(env, "list", "--json").stdout)[0]["id"]
    started = time.monotonic()
    revoked = sb({**env, "SCHEMABRIDGE_REDIS_URL": UNREACHABLE_REDIS_URL}, "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert time.monotonic() - started >= 5.0
    lines = [line for line in revoked.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, revoked.stderr
    assert "Redis did not answer, so API processes may still hold it: waiting 5 s" in lines[0]
    assert lines[1].startswith(f"revoked key {key_id} at ")
