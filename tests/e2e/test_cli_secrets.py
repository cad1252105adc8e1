"""`schemabridge secrets` as an operator runs it (real subprocesses on a SQLite file): set from
stdin and from a file (never argv), list, delete, rotate to a new key, and every refusal's one
line and exit code. No output ever shows the value."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from engine.secret_cipher import MAKE_KEY, key_id
from tests.conftest import Backend
from tests.e2e.rest_harness import CLI_HERE, process_env, schemabridge, upgraded

VALUE = "cli-canary-0c4e+/=x"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    return upgraded(process_env(backend, tmp_path, secret_keys=Fernet.generate_key().decode()))


def sb(
    env: dict[str, str], *args: str, stdin: str = "", keys: str | None = None
) -> subprocess.CompletedProcess[str]:
    run_env = dict(env)
    if keys is not None:
        run_env["SCHEMABRIDGE_SECRET_KEYS"] = keys
    return schemabridge(run_env, "secrets", *args, stdin=stdin)


def _shown(*done: subprocess.CompletedProcess[str]) -> str:
    return "".join(d.stdout + d.stderr for d in done)


def test_set_list_delete(env: dict[str, str], tmp_path: Path) -> None:
    from_stdin = sb(env, "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE + "\n")
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert "created secret CRM_TOKEN of tenant acme" in from_stdin.stderr
    value_file = tmp_path / "value.txt"
    value_file.write_text(VALUE + "-2\n", encoding="utf-8")
    from_file = sb(env, "set", "CRM_TOKEN", "--tenant", "acme", "--from-file", str(value_file))
    assert from_file.returncode == 0, from_file.stderr
    assert "replaced the value of secret CRM_TOKEN" in from_file.stderr
    listed = sb(env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)
    assert (item["tenantId"], item["name"], item["updatedBy"]) == ("acme", "CRM_TOKEN", CLI_HERE)
    table = sb(env, "list")
    header, row = table.stdout.splitlines()  # piped: plain columns, as every list prints
    assert header.split() == [
        "TENANT",
        "NAME",
        "CREATED",
        "(UTC)",
        "UPDATED",
        "(UTC)",
        "UPDATED",
        "BY",
    ]
    assert row.split()[:2] == ["acme", "CRM_TOKEN"] and row.split()[-1] == CLI_HERE
    deleted = sb(env, "delete", "CRM_TOKEN", "--tenant", "acme")
    assert deleted.returncode == 0 and "deleted secret CRM_TOKEN" in deleted.stderr
    missing = sb(env, "delete", "CRM_TOKEN", "--tenant", "acme")
    assert missing.returncode == 1 and "has no secret 'CRM_TOKEN'" in missing.stderr
    assert VALUE not in _shown(from_stdin, from_file, listed, table, deleted, missing)


def test_the_value_never_comes_from_the_command_line(env: dict[str, str]) -> None:
    refused = sb(env, "set", "CRM_TOKEN", VALUE, "--tenant", "acme", stdin=VALUE)
    assert refused.returncode == 2
    assert json.loads(sb(env, "list", "--json").stdout) == []
    assert json.loads(sb(env, "list", "--output", "json").stdout) == []


@pytest.mark.parametrize(
    ("args", "stdin", "code", "says"),
    [
        (["set", "CRM_TOKEN", "--tenant", "acme"], "", 2, "stdin is empty"),
        (["set", "CRM_TOKEN", "--tenant", "acme"], "\n", 2, "stdin is empty"),
        (["set", "CRM_TOKEN", "--tenant", "acme"], "short\n", 2, "at least 8 characters"),
        (["set", "crm-token", "--tenant", "acme"], VALUE, 2, "is not a secret name"),
        (["set", "T", "--tenant", "acme", "--from-file", "/nonexistent/v"], "", 2, "cannot read"),
    ],
)
def test_refusals_are_one_line(
    env: dict[str, str], args: list[str], stdin: str, code: int, says: str
) -> None:
    done = sb(env, *args, stdin=stdin)
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert VALUE not in _shown(done)


def test_without_a_key_set_and_rotate_say_how_to_make_one(env: dict[str, str]) -> None:
    for args in (["set", "CRM_TOKEN", "--tenant", "acme"], ["rotate"]):
        done = sb(env, *args, stdin=VALUE, keys="")
        assert done.returncode == 2, done.stderr
        assert MAKE_KEY in done.stderr and "Traceback" not in done.stderr
    invalid = sb(env, "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE, keys="nope")
    assert invalid.returncode == 2 and "1st key" in invalid.stderr


def test_a_malformed_key_is_refused_by_every_command_and_no_key_lists(env: dict[str, str]) -> None:
    assert sb(env, "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE).returncode == 0
    for args in (["list"], ["list", "--json"], ["delete", "CRM_TOKEN", "--tenant", "acme"]):
        done = sb(env, *args, keys="notakey")
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert "1st key in SCHEMABRIDGE_SECRET_KEYS is not a Fernet key" in done.stderr
        assert "notakey" not in done.stderr and "Traceback" not in done.stderr
    # No key at all: a key that was lost. The names are still listed (and may be deleted).
    listed = sb(env, "list", "--json", keys="")
    assert listed.returncode == 0, listed.stderr
    assert [item["name"] for item in json.loads(listed.stdout)] == ["CRM_TOKEN"]


def test_rotate_to_a_new_key(env: dict[str, str]) -> None:
    old = env["SCHEMABRIDGE_SECRET_KEYS"]
    new = Fernet.generate_key().decode()
    for tenant in ("acme", "globex"):
        assert sb(env, "set", "CRM_TOKEN", "--tenant", tenant, stdin=VALUE).returncode == 0
    rotated = sb(env, "rotate", keys=f"{new},{old}")
    assert rotated.returncode == 0, rotated.stderr
    assert "re-encrypted 2 secrets under the first key (id " in rotated.stderr
    # With the old key gone, a rotation finds every secret readable under the new one alone;
    # under the old key alone, none is.
    assert "re-encrypted 2 secrets" in sb(env, "rotate", keys=new).stderr
    stale = sb(env, "rotate", keys=old)
    assert stale.returncode == 1
    assert "no configured key decrypts 2 secrets" in stale.stderr
    # The key they need, by the id their tokens carry (an SRE's upgrade tour: not named).
    assert f"add the key they were encrypted with, id {key_id(new)}, after" in stale.stderr
    assert "acme/CRM_TOKEN, globex/CRM_TOKEN" in stale.stderr


def test_rotate_counts_one_secret_in_the_singular(env: dict[str, str]) -> None:
    old = env["SCHEMABRIDGE_SECRET_KEYS"]
    new = Fernet.generate_key().decode()
    assert sb(env, "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE).returncode == 0
    rotated = sb(env, "rotate", keys=f"{new},{old}")
    assert rotated.returncode == 0, rotated.stderr
    assert "re-encrypted 1 secret under the first key (id " in rotated.stderr
    stale = sb(env, "rotate", keys=old)
    assert stale.returncode == 1
    assert "no configured key decrypts 1 secret, left unchanged: acme/CRM_TOKEN" in stale.stderr
    assert "add the key it was encrypted with" in stale.stderr


@pytest.mark.parametrize("command", [["worker"], ["api", "--port", "0"], ["serve", "--port", "0"]])
def test_services_refuse_to_start_with_a_malformed_key(
    env: dict[str, str], command: list[str]
) -> None:
    good = env["SCHEMABRIDGE_SECRET_KEYS"]
    done = schemabridge({**env, "SCHEMABRIDGE_SECRET_KEYS": f"{good},not-a-fernet-key"}, *command)
    assert done.returncode == 2, done.stderr  # a setting that cannot work
    assert "2nd key in SCHEMABRIDGE_SECRET_KEYS is not a Fernet key" in done.stderr
    assert MAKE_KEY.split(";")[0] in done.stderr and "Traceback" not in done.stderr
    assert "not-a-fernet-key" not in done.stderr


@pytest.mark.parametrize(
    ("command", "process"),
    [
        (["worker", "--name", "w-keys", "--health-port", "0"], "worker w-keys"),
        # serve runs a worker: restarted with another key, it said nothing either.
        (["serve", "--port", "0"], "serve-"),
    ],
)
def test_a_worker_lacking_the_key_of_stored_secrets_says_so_at_start(
    env: dict[str, str], tmp_path: Path, command: list[str], process: str
) -> None:
    """A worker given another SCHEMABRIDGE_SECRET_KEYS than the CLI and api that set the
    secrets started without a word; the first sign was runs failing secret_unreadable on it
    alone, their message naming "this process" and no worker. It says so once it is ready,
    naming the key it lacks; one that holds it says nothing. So does `serve`, whose worker
    is in the same process."""
    from tests.e2e.rest_harness import service

    setting = env["SCHEMABRIDGE_SECRET_KEYS"]
    assert sb(env, "set", "CRM_TOKEN", "--tenant", "acme", stdin=VALUE).returncode == 0
    assert sb(env, "set", "ERP_TOKEN", "--tenant", "acme", stdin=VALUE).returncode == 0
    other = Fernet.generate_key().decode()
    for round, (keys, told) in enumerate([(other, True), (f"{other},{setting}", False)]):
        worker_env = {**env, "SCHEMABRIDGE_SECRET_KEYS": keys}
        with service(command, worker_env, tmp_path / f"worker-{round}.log") as worker:
            worker.wait_for_url()
            assert worker.stop() == 0
        lines = [line for line in worker.stderr().splitlines() if "secret_unreadable" in line]
        if not told:
            assert not lines, worker.stderr()
            continue
        assert len(lines) == 1, worker.stderr()
        assert process in lines[0], lines[0]
        assert f": 2 secrets in the database are encrypted with key {key_id(setting)}" in lines[0]
        assert f"(it holds {key_id(other)})" in lines[0] and "restart it" in lines[0]
        assert VALUE not in worker.stderr() and setting not in worker.stderr()
