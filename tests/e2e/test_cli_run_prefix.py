"""Every `runs` command takes the short id the web monitor shows (the first 8 characters) or
any longer prefix of a run's id, as real subprocesses against `schemabridge serve`: one run
starts with it, the command acts on that run; none, "no run" (exit 1); several, one line
naming them (exit 2); another tenant's run, never (api/cli/id_prefixes.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from engine.runtime import Runtime
from engine.settings import Settings
from tests.e2e.cli_harness import SCHEMABRIDGE, Stack, assert_refused

WORKFLOW = "cli-prefix-lookup"
TWINS = ("abcdef01-0000-4000-8000-000000000001", "abcdef01-8000-4000-8000-000000000002")
"""Two runs whose ids share their first 8 characters (made in the store: uuid4 ids meet
once in 4 billion)."""


@pytest.fixture(scope="module")
def failed(serve_api: Stack) -> str:
    """The id of a FAILED run (the downstream answers 404) of a one-step workflow."""
    path = serve_api.tmp / "prefix-lookup.json"
    document = {
        "name": WORKFLOW,
        "vertices": {
            "get": {
                "type": "GATEWAY",
                "config": {"url": serve_api.downstream + "/customers/{{ input.id }}"},
            }
        },
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    serve_api.ok("workflows", "publish", str(path))
    result = serve_api.cli(
        "runs", "submit", WORKFLOW, "--input", '{"id": "x?status=404"}', "--wait", "-o", "json"
    )
    assert result.returncode == 1, result.stderr
    run = json.loads(result.stdout)
    assert run["status"] == "FAILED"
    return str(run["id"])


def test_the_monitors_short_id_reads_the_run(serve_api: Stack, failed: str) -> None:
    short = failed[:8]
    assert serve_api.json("runs", "show", short)["id"] == failed
    assert serve_api.json("runs", "show", failed[:13].upper())["id"] == failed
    assert serve_api.ok("runs", "logs", short).stdout
    assert serve_api.ok("runs", "children", short).stderr.startswith(f"run {short} has no")
    watched = serve_api.cli("runs", "watch", short)
    assert watched.returncode == 1, watched.stderr  # it FAILED
    assert f"run {failed} has already ended" in watched.stdout


def test_the_actions_take_the_short_id(serve_api: Stack, failed: str) -> None:
    short = failed[:8]
    retried = serve_api.ok("runs", "retry", short)
    assert retried.stdout.startswith(f"run {failed}: "), retried.stdout
    watched = serve_api.cli("runs", "watch", short)  # it fails again: the same 404
    assert watched.returncode == 1, watched.stderr
    resolved = serve_api.ok("runs", "resolve", short, "get", "--output", '{"status": 200}')
    assert resolved.stdout.startswith(f"run {failed}: "), resolved.stdout
    assert serve_api.json("runs", "show", short)["status"] == "SUCCEEDED"
    again = serve_api.ok("runs", "start-over", short)
    assert again.stdout.startswith(f"run {failed}: "), again.stdout
    assert serve_api.ok("runs", "reprocess", short).stdout.startswith(f"run {failed}: ")
    # The run has ended: the refusal is about the run itself, not "no run".
    assert_refused(serve_api.cli("runs", "cancel", short), 1, failed, "SUCCEEDED")
    batch = serve_api.cli("runs", "retry", short, failed[:9])
    assert batch.returncode == 1, batch.stderr  # both name the run, which is not FAILED
    assert f"  {failed}  " in batch.stdout, batch.stdout


async def _twins(stack: Stack) -> None:
    settings = Settings.model_validate({"database_url": stack.env["SCHEMABRIDGE_DATABASE_URL"]})
    runtime = await Runtime.open(settings)
    try:
        version = await runtime.store.get_version(WORKFLOW, None)
        for run_id in TWINS:
            await runtime.store.create_run(version, {"id": "1"}, run_id=run_id)
    finally:
        await runtime.close()


def test_an_ambiguous_prefix_names_the_runs_it_starts(serve_api: Stack, failed: str) -> None:
    asyncio.run(_twins(serve_api))
    ambiguous = serve_api.cli("runs", "show", "abcdef01")
    assert_refused(
        ambiguous,
        2,
        f"run id 'abcdef01' is ambiguous: 2 runs start with it ({TWINS[0]}, {TWINS[1]}); "
        "give more of the id",
    )
    assert len(ambiguous.stderr.splitlines()) == 1
    assert_refused(serve_api.cli("runs", "cancel", "abcdef01"), 2, "ambiguous")
    assert serve_api.json("runs", "show", "abcdef01-8")["id"] == TWINS[1]


def test_a_prefix_no_run_has_is_not_found(serve_api: Stack, failed: str) -> None:
    missing = "0123abcd" if not failed.startswith("0123abcd") else "4567abcd"
    for command in (["runs", "show"], ["runs", "retry"], ["runs", "cancel"]):
        refused = serve_api.cli(*command, missing)
        assert_refused(refused, 1, f"no run '{missing}'", "`schemabridge runs list` shows")
        assert len(refused.stderr.splitlines()) == 1


def test_a_prefix_too_short_says_how_long_one_is(serve_api: Stack, failed: str) -> None:
    short = failed[:7]
    for command in (["runs", "show"], ["runs", "retry"], ["runs", "logs"]):
        refused = serve_api.cli(*command, short)
        assert_refused(
            refused,
            1,
            f"no run '{short}' (a short id needs at least 8 characters, as the monitor shows); "
            "`schemabridge runs list` shows",
        )
        assert len(refused.stderr.splitlines()) == 1
    # A typo in a whole id, or a name that is no prefix, keeps the plain line.
    typo = failed[:-1] + ("0" if failed[-1] != "0" else "1")
    for given in (typo, "no-such-run"):
        refused = serve_api.cli("runs", "show", given)
        assert_refused(refused, 1, f"no run '{given}'; `schemabridge runs list` shows")


def test_a_tenant_key_never_resolves_another_tenants_run(serve_api: Stack, failed: str) -> None:
    created = subprocess.run(
        [SCHEMABRIDGE, "keys", "create", "--tenant", "prefix-acme"],
        env=serve_api.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    # The run is tenant default's: to acme's key its prefix names nothing, as its id does.
    assert_refused(serve_api.cli("runs", "show", failed[:8], key=key), 1, "no run")
    assert_refused(serve_api.cli("runs", "show", "abcdef01", key=key), 1, "no run")
