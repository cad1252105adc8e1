"""`schemabridge keys` as an operator runs it (real subprocesses on a SQLite file): the secret
printed once and alone, the list without secrets, revocation, and every refusal's exit code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.e2e.rest_harness import SCHEMABRIDGE, process_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return process_env(
        Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None), tmp_path
    )


def sb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEMABRIDGE, "keys", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_create_list_revoke(env: dict[str, str]) -> None:
    # With no key yet, the list says how to make the first one (and JSON is an empty list).
    none = sb(env, "list")
    assert (none.returncode, none.stdout) == (0, "")
    assert "no keys yet: `schemabridge keys create --admin`" in none.stderr
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
    assert [(k["role"], k["tenant"], k["name"]) for k in keys] == [
        ("admin", None, "ops"),
        ("tenant", "acme", None),
    ]
    assert secret not in listed.stdout and tenant.stdout.strip() not in listed.stdout
    table = sb(env, "list")
    assert table.returncode == 0
    assert keys[0]["id"] in table.stdout and "tenant acme" in table.stdout
    assert secret not in table.stdout

    revoked = sb(env, "revoke", keys[0]["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked key {keys[0]['id']}" in revoked.stderr
    after = json.loads(sb(env, "list", "--json").stdout)
    assert [k["state"] for k in after] == ["revoked", "live"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["create"], "exactly one"),
        (["create", "--admin", "--tenant", "acme"], "exactly one"),
        (["create", "--admin", "--expires-in-days", "-1"], "expiresInDays"),
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
