"""What the command line tells an operator about a run that was started over: real
subprocesses against `schemabridge serve` (an admin key), the run failing on the demo
downstream's real 422. `runs retry` refuses it (one line naming the new run, its status and
what to do), `--dry-run` says so, a batch skips it in words, and a second `start-over` names
the new run's status."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.cli_harness import Stack, assert_refused

WORKFLOW = "cli-started-over"


@pytest.fixture(scope="module")
def workflow(serve_api: Stack) -> str:
    url = serve_api.downstream + "/cli-started-over/call?status={{ input.code }}"
    document = {"name": WORKFLOW, "vertices": {"call": {"type": "GATEWAY", "config": {"url": url}}}}
    serve_api.publish(document, "v1")
    return WORKFLOW


def failed(stack: Stack, tenant: str) -> str:
    """A run of the workflow answered 422: FAILED (`submit --wait`, JSON)."""
    run_input = json.dumps({"code": "422"})
    waited = stack.cli(
        "runs", "submit", WORKFLOW, "--input", run_input, "--tenant", tenant, "--wait",
        "-o", "json",
    )  # fmt: skip
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    run = json.loads(waited.stdout)
    assert run["status"] == "FAILED", run
    return str(run["id"])


def test_a_run_started_over_is_not_retried_from_the_command_line(
    serve_api: Stack, workflow: str
) -> None:
    tenant = "cli-started-over"
    old = failed(serve_api, tenant)
    new = serve_api.json("runs", "start-over", old)["newRunId"]
    assert serve_api.cli("runs", "watch", new, "--timeout", "60").returncode == 1  # FAILED too

    again = serve_api.ok("runs", "start-over", old)
    assert (
        f"already started over as run {new}, FAILED: retry it (`schemabridge runs retry {new}`) "
        f"or start it over (`schemabridge runs start-over {new}`)"
    ) in again.stdout, again.stdout
    # Its --dry-run exits as the start over would: already the case, 0 (README's exit codes).
    dry_again = serve_api.ok("runs", "start-over", old, "--dry-run")
    assert f"already started over as run {new}, FAILED" in dry_again.stdout, dry_again.stdout
    assert "nothing started" in dry_again.stdout

    refused = assert_refused(
        serve_api.cli("runs", "retry", old),
        1,
        f"run {old} was started over as run {new}, FAILED: a retry would run its steps",
        f"Look at run {new} instead: retry it",
        "A run can be retried only while nobody has started it over",
    )
    assert len(refused.splitlines()) == 1, refused

    dry = serve_api.cli("runs", "retry", old, "--dry-run")
    assert dry.returncode == 1, (dry.stdout, dry.stderr)
    assert dry.stdout == f"run {old} (FAILED): a retry would be refused; nothing retried\n"
    assert f"was started over as run {new}, FAILED" in dry.stderr, dry.stderr

    counted = serve_api.ok(
        "runs", "retry", "--status", "FAILED", "--workflow", WORKFLOW, "--tenant", tenant,
        "--dry-run",
    )  # fmt: skip
    assert counted.stdout.splitlines()[0] == (
        f"would retry 1 run (status FAILED, workflow {WORKFLOW}, tenant {tenant}); 1 matched is "
        "skipped: started over (its retry would send its calls a second time, beside the "
        f"new run's; look at that one): run {old} (started over as run {new}); nothing retried"
    ), counted.stdout
    # The API's preview names them too, as it names the runs to fix first.
    preview = httpx.post(
        f"{serve_api.url}/runs/retry/preview",
        json={"filter": {"status": "FAILED", "workflow": WORKFLOW, "tenantId": tenant}},
        headers={"Authorization": f"Bearer {serve_api.admin_key}"},
    ).json()
    assert preview["skipped"] == [
        {
            "reason": "started_over",
            "state": "FAILED",
            "count": 1,
            "message": preview["skipped"][0]["message"],
            "runIds": [old],
            "newRunIds": [new],
        }
    ], preview
    dry_json = serve_api.json(
        "runs", "retry", "--status", "FAILED", "--workflow", WORKFLOW, "--tenant", tenant,
        "--dry-run",
    )  # fmt: skip
    assert dry_json["skipped"] == preview["skipped"], dry_json

    batch = serve_api.cli("runs", "retry", old, new)
    assert "Traceback" not in batch.stderr
    lines = batch.stdout.splitlines()
    assert lines[:3] == ["retried 1 run", f"  {new}", "skipped 1 run: 1 started over (1 FAILED)"]
    assert lines[3].startswith(f"  {old}  run {old} was started over as run {new}, FAILED"), lines


def test_a_start_over_dry_run_of_a_running_run_names_it_once(
    serve_api: Stack, workflow: str
) -> None:
    """The tour read "run X (RUNNING): run X is RUNNING; only an ended run can be started
    over; nothing started": the refusal names the run already, so the line says it once."""
    serve_api.downstream_script("/cli-started-over/call", [{"status": 200, "sleep_ms": 8_000}])
    run_input = json.dumps({"code": "200"})
    running = serve_api.json("runs", "submit", WORKFLOW, "--input", run_input)["id"]
    dry = serve_api.cli("runs", "start-over", running, "--dry-run")
    assert dry.returncode == 1, (dry.stdout, dry.stderr)
    assert dry.stdout == (
        f"run {running} is RUNNING; only an ended run can be started over; nothing started\n"
    ), dry.stdout
    assert serve_api.cli("runs", "watch", running, "--timeout", "60").returncode == 0


def test_runs_list_says_which_failures_were_started_over(serve_api: Stack, workflow: str) -> None:
    """A FAILED run already started over read as any other failure in `runs list`: its
    status says the run its start over made (a short id `runs show` takes), and a failure
    nobody started over says nothing more."""
    tenant = "cli-started-over-list"
    old, other = failed(serve_api, tenant), failed(serve_api, tenant)
    new = serve_api.json("runs", "start-over", old)["newRunId"]
    listed = serve_api.ok("runs", "list", "--tenant", tenant, "--status", "FAILED").stdout
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert f" FAILED (started over as {new[:8]}) " in rows[old], listed
    assert " FAILED " in rows[other] and "started over" not in rows[other], listed
    assert serve_api.ok("runs", "show", new[:8]).stdout.count(old) >= 1
    assert serve_api.json("runs", "list", "--tenant", tenant)["items"][-1]["startedOverAs"] == new
