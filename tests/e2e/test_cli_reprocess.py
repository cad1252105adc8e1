"""`schemabridge runs reprocess` on a fan-out that had SUCCEEDED, its MERGE tolerating the dead
letters, with a `report` GATEWAY after the join: the reprocess would run `report` again (a
partner's call sent twice), so the command says so before acting — `--preview` prints what it
would do and does nothing; without a terminal it acts only with `--yes`; on a terminal it
asks, and only "y" goes ahead. Real subprocesses against `schemabridge serve` and its demo
downstream, whose /report calls are counted."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from typing import Any

import httpx
import pytest

from tests.e2e.cli_harness import Stack, assert_refused
from tests.e2e.rest_harness import ROOT, SCHEMABRIDGE

PARENT = "cli-reprocess-fanout"
CHILD = "cli-reprocess-item"
REPORT = "/cli-reprocess/report"


@pytest.fixture(scope="module")
def workflows(serve_api: Stack) -> None:
    """SPAWNER → MERGE (two failed children tolerated) → report (a POST after the join)."""
    base = serve_api.downstream
    documents = [
        {
            "name": PARENT,
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": CHILD},
                },
                "join": {
                    "type": "MERGE",
                    "dependsOn": ["each"],
                    "config": {
                        "tolerateChildFailures": ["FAILED"],
                        "failureTolerance": {"maxFailures": 2},
                    },
                },
                "report": {
                    "type": "GATEWAY",
                    "dependsOn": ["join"],
                    "config": {
                        "url": f"{base}{REPORT}",
                        "method": "POST",
                        "retry": {"maxAttempts": 1},
                    },
                },
            },
        },
        {
            "name": CHILD,
            "vertices": {
                "charge": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/cli-reprocess/{{{{ item.tag }}}}/{{{{ index }}}}",
                        "method": "POST",
                        "retry": {"maxAttempts": 1},
                    },
                    "maxAutoRetries": 0,
                }
            },
        },
    ]
    path = serve_api.tmp / "cli-reprocess.json"
    path.write_text(json.dumps(documents), encoding="utf-8")
    serve_api.ok("workflows", "publish", str(path))


def reports(stack: Stack) -> int:
    """How many POST /report the demo downstream has answered."""
    with httpx.Client(trust_env=False, timeout=10) as http:
        stats = http.get(f"{stack.downstream}/_stats").json()
    return sum(1 for r in stats["recent"] if r["path"] == REPORT)


def succeeded_over_dead_letters(stack: Stack, tag: str) -> str:
    """A run of 12 children, 3 and 8 answered 400 once (dead letters, tolerated): it
    SUCCEEDED and sent its report once."""
    for index in (3, 8):
        stack.downstream_script(f"/cli-reprocess/{tag}/{index}", [400])
    before = reports(stack)
    run_input = json.dumps({"items": [{"tag": tag}] * 12})
    waited = stack.cli("runs", "submit", PARENT, "--input", run_input, "--wait", "-o", "json")
    assert waited.returncode == 0, waited.stderr
    run = json.loads(waited.stdout)
    assert run["status"] == "SUCCEEDED"
    assert reports(stack) == before + 1
    return str(run["id"])


def on_a_terminal(stack: Stack, answer: str, *args: str) -> tuple[int, str]:
    """`schemabridge ARGS` with a terminal for stdin (a pty) on which `answer` is typed:
    (exit code, stdout and stderr)."""
    env = dict(stack.env)
    env["SCHEMABRIDGE_API_URL"] = stack.url
    env["SCHEMABRIDGE_API_KEY"] = stack.admin_key
    main, terminal = pty.openpty()
    try:
        with subprocess.Popen(
            [SCHEMABRIDGE, *args],
            env=env,
            cwd=ROOT,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process:
            os.write(main, f"{answer}\n".encode())
            said, _ = process.communicate(timeout=120)
            return process.returncode, said
    finally:
        os.close(main)
        os.close(terminal)


def test_preview_says_what_would_run_again_and_does_nothing(
    serve_api: Stack, workflows: None
) -> None:
    run = succeeded_over_dead_letters(serve_api, "preview")
    sent = reports(serve_api)
    shown = serve_api.ok("runs", "reprocess", run, "--dry-run")
    destination = serve_api.downstream
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {run} (SUCCEEDED): a reprocess runs 2 dead-lettered children again"
    assert re.fullmatch(r"  each\[3\]  [0-9a-f-]{36}", lines[1]), lines
    assert re.fullmatch(r"  each\[8\]  [0-9a-f-]{36}", lines[2]), lines
    assert lines[3] == (
        f"the join 'join', which had SUCCEEDED, reopens: report (calls {destination}) runs again"
    )
    assert shown.stderr == (
        f"warning: run {run} had SUCCEEDED and runs again from its join 'join': the steps after "
        f"that join run a second time: report (calls {destination})\n"
    )
    # --preview, its first name, is still taken (retry and start-over call it --dry-run).
    as_json = serve_api.json("runs", "reprocess", run, "--preview")
    assert (as_json["revived"], as_json["reopenedRun"]) == (2, run)
    assert as_json["reopenedJoins"][0]["stepsAgain"][0]["vertexId"] == "report"
    assert serve_api.json("runs", "show", run)["status"] == "SUCCEEDED"
    assert reports(serve_api) == sent


def test_without_a_terminal_only_yes_reprocesses_a_finished_run(
    serve_api: Stack, workflows: None
) -> None:
    run = succeeded_over_dead_letters(serve_api, "script")
    sent = reports(serve_api)
    refused = serve_api.cli("runs", "reprocess", run)
    said = assert_refused(
        refused,
        1,
        f"error: run {run} was not reprocessed: it runs again work that had finished",
        "add --yes to reprocess it all the same",
        f"`schemabridge runs reprocess {run} --dry-run`",
        f"  run {run} had SUCCEEDED and runs again from its join 'join'",
        f"report (calls {serve_api.downstream})",
    )
    assert len(said.splitlines()) == 2, said
    assert serve_api.json("runs", "show", run)["status"] == "SUCCEEDED"
    assert reports(serve_api) == sent

    done = serve_api.ok("runs", "reprocess", run, "--yes")
    assert done.stdout.startswith(f"run {run}: 2 dead-lettered children run again")
    assert f"warning: run {run} had SUCCEEDED and runs again from its join" in done.stderr
    assert serve_api.cli("runs", "watch", run, "--timeout", "120").returncode == 0
    assert reports(serve_api) == sent + 1
    logged = serve_api.ok("runs", "logs", run).stdout
    assert "the run, which had SUCCEEDED, runs again from its join 'join'" in logged, logged


def test_on_a_terminal_it_asks_first(serve_api: Stack, workflows: None) -> None:
    run = succeeded_over_dead_letters(serve_api, "terminal")
    sent = reports(serve_api)
    code, said = on_a_terminal(serve_api, "n", "runs", "reprocess", run)
    assert code == 1, said
    assert f"run {run} (SUCCEEDED): a reprocess runs 2 dead-lettered children again" in said
    assert "warning: run " in said and "report (calls " in said, said
    assert f"reprocess run {run}? [y/N]" in said, said
    assert f"run {run} was not reprocessed" in said, said
    assert serve_api.json("runs", "show", run)["status"] == "SUCCEEDED"

    code, said = on_a_terminal(serve_api, "y", "runs", "reprocess", run)
    assert code == 0, said
    assert f"run {run}: 2 dead-lettered children run again" in said, said
    assert serve_api.cli("runs", "watch", run, "--timeout", "120").returncode == 0
    assert reports(serve_api) == sent + 1


def test_a_join_that_failed_is_reprocessed_without_asking(serve_api: Stack, workflows: Any) -> None:
    """Nothing after the join had run: nothing runs twice, nothing to confirm."""
    for index in (0, 1, 2):
        serve_api.downstream_script(f"/cli-reprocess/failed/{index}", [400])
    run_input = json.dumps({"items": [{"tag": "failed"}] * 4})
    waited = serve_api.cli("runs", "submit", PARENT, "--input", run_input, "--wait", "-o", "json")
    assert waited.returncode == 1, waited.stderr
    run = json.loads(waited.stdout)["id"]
    # A dead letter failed at its own step: nothing under it to reprocess; a retry it needs.
    child = serve_api.json("runs", "children", run, "--status", "FAILED")["items"][0]["id"]
    retry = f"its own failed steps run again with `schemabridge runs retry {child}`"
    previewed = serve_api.ok("runs", "reprocess", child, "--dry-run")
    assert previewed.stdout.splitlines() == [
        f"run {child} (FAILED): no dead-lettered children to run again",
        retry,
    ], previewed.stdout
    unchanged = serve_api.ok("runs", "reprocess", child)
    assert unchanged.stdout.startswith(f"run {child}: no dead-lettered children"), unchanged.stdout
    assert unchanged.stderr == f"{retry}\n", unchanged.stderr
    done = serve_api.ok("runs", "reprocess", run)
    assert done.stdout.startswith(f"run {run}: 3 dead-lettered children run again")
    assert "warning" not in done.stderr


def test_several_runs_are_reprocessed_and_a_finished_one_is_left(
    serve_api: Stack, workflows: Any
) -> None:
    """`runs reprocess RUN RUN ...`: each failed join's dead letters run again, as alone; a
    run that SUCCEEDED is not reopened by the batch (reprocess it alone), and the command
    says so and exits 1; --dry-run looks at one run only."""
    failed = []
    for tag in ("batch-a", "batch-b"):
        for index in (0, 1, 2):  # more than the two the MERGE tolerates
            serve_api.downstream_script(f"/cli-reprocess/{tag}/{index}", [400])
        run_input = json.dumps({"items": [{"tag": tag}] * 4})
        waited = serve_api.cli(
            "runs", "submit", PARENT, "--input", run_input, "--wait", "-o", "json"
        )
        assert waited.returncode == 1, waited.stderr
        failed.append(json.loads(waited.stdout)["id"])
    finished = succeeded_over_dead_letters(serve_api, "batch-done")
    sent = reports(serve_api)

    refused = serve_api.cli("runs", "reprocess", *failed, "--dry-run")
    assert_refused(refused, 2, "error: --dry-run looks at one run: give one RUN")

    done = serve_api.cli("runs", "reprocess", failed[0][:8], failed[1], finished)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "reprocessed 2 runs: 6 dead-lettered children run again",
        f"  {failed[0]}  3 children run again; it is RUNNING",
        f"  {failed[1]}  3 children run again; it is RUNNING",
        "skipped 1 run:",
        f"  {finished}  run {finished} has SUCCEEDED: reprocessing would reopen its join "
        f"'join' and run the steps after it again; reprocess run {finished} alone if that is "
        "really wanted",
    ], done.stdout
    for run in failed:
        assert serve_api.cli("runs", "watch", run, "--timeout", "120").returncode == 0
    assert serve_api.json("runs", "show", finished)["status"] == "SUCCEEDED"
    assert reports(serve_api) == sent + 2  # the two failed joins' reports, not the finished one's
