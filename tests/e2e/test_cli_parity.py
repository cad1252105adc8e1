"""The command line does what the REST API does: `runs submit --version N` runs the version
`POST /workflows/{name}/runs` runs with `version` in its body, refused in the same words, and
`runs retry RUN --dry-run` prints what `GET /runs/{id}/retry/preview` answers. Real
subprocesses against `schemabridge serve` (an admin key)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.e2e.cli_harness import Stack, assert_refused

NAME = "cli-parity-ping"
FAILING = "cli-parity-fail"


def publish(stack: Stack, name: str, path: str) -> None:
    call = {"type": "GATEWAY", "config": {"url": stack.downstream + path}}
    document = {"name": name, "vertices": {"ping": call}}
    file = stack.tmp / f"{name}-{len(path)}.json"
    file.write_text(json.dumps(document))
    stack.ok("workflows", "publish", str(file))


@pytest.fixture(scope="module")
def versions(serve_api: Stack) -> str:
    """Two versions of one workflow: v1 serves (the first published), v2 does not."""
    publish(serve_api, NAME, "/cli-parity/v1")
    publish(serve_api, NAME, "/cli-parity/v2-longer")
    return NAME


def test_submit_runs_the_version_given(serve_api: Stack, versions: str) -> None:
    served = serve_api.json("runs", "submit", versions)["run"]
    assert served["version"] == 1
    pinned = serve_api.json("runs", "submit", versions, "--version", "2")["run"]
    assert (pinned["version"], pinned["route"]) == (2, "pinned")
    text = serve_api.ok("runs", "submit", versions, "--version", "2")
    assert f"({versions} v2, tenant default)" in text.stdout, text.stdout
    same = serve_api.json("runs", "submit", f"{versions}@2", "--version", "2")
    assert same["run"]["version"] == 2


def test_the_version_that_serves_is_said_beside_the_latest(serve_api: Stack, versions: str) -> None:
    """The tour: `workflows show NAME` showed the latest version (v2) with no word that v1
    is the one new runs get, and `workflows versions` had no such column."""
    listed = serve_api.ok("workflows", "versions", versions).stdout
    assert re.search(r"^v2\s+-\s+[0-9a-f]{12}\s", listed, re.M), listed
    assert re.search(r"^v1\s+serving\s+[0-9a-f]{12}\s", listed, re.M), listed
    latest = serve_api.ok("workflows", "show", versions).stdout.splitlines()
    assert latest[0].startswith(f"{versions} v2 "), latest
    assert latest[1] == "not serving: v1 serves new runs", latest
    first = serve_api.ok("workflows", "show", f"{versions}@1").stdout.splitlines()
    assert first[1] == "serving", first


def test_an_unknown_version_is_refused_as_rest_refuses_it(serve_api: Stack, versions: str) -> None:
    answer = httpx.post(
        f"{serve_api.url}/workflows/{versions}/runs",
        json={"input": {}, "version": 9},
        headers={"Authorization": f"Bearer {serve_api.admin_key}"},
    )
    assert answer.status_code == 404, answer.text
    refused = serve_api.cli("runs", "submit", versions, "--version", "9")
    assert_refused(refused, 1, answer.json()["message"])
    disagree = serve_api.cli("runs", "submit", f"{versions}@1", "--version", "2")
    assert_refused(disagree, 2, f"{versions}@1 and --version 2 disagree")
    for below in ("0", "-1"):
        refused = serve_api.cli("runs", "submit", versions, "--version", below)
        said = assert_refused(refused, 2)
        assert said == (
            f"error: --version '{below}': give a whole number, 1 or more "
            "(see `schemabridge runs submit --help`)\n"
        ), said


def test_a_dry_run_of_one_run_says_what_its_retry_would_run_again(
    serve_api: Stack, versions: str
) -> None:
    url = serve_api.downstream + "/cli-parity/fail?status=500"
    call = {"url": url, "retry": {"maxAttempts": 1}}
    document = {
        "name": FAILING,
        "vertices": {"ping": {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}},
    }
    file = serve_api.tmp / f"{FAILING}.json"
    file.write_text(json.dumps(document))
    serve_api.ok("workflows", "publish", str(file))
    failed = serve_api.cli("runs", "submit", FAILING, "--wait")
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    listed = serve_api.json("runs", "list", "--workflow", FAILING, "--status", "FAILED")
    run_id = listed["items"][0]["id"]

    dry = serve_api.ok("runs", "retry", run_id[:8], "--dry-run")
    assert dry.stdout == (
        f"run {run_id} (FAILED): a retry would have 1 failed step run again; nothing retried\n"
    ), dry.stdout
    preview = httpx.get(
        f"{serve_api.url}/runs/{run_id}/retry/preview",
        headers={"Authorization": f"Bearer {serve_api.admin_key}"},
    ).json()
    assert serve_api.json("runs", "retry", run_id, "--dry-run") == preview
    assert serve_api.json("runs", "show", run_id)["status"] == "FAILED"  # nothing retried

    succeeded = serve_api.cli("runs", "submit", versions, "--wait")
    assert succeeded.returncode == 0, (succeeded.stdout, succeeded.stderr)
    done = serve_api.json("runs", "list", "--workflow", versions, "--status", "SUCCEEDED")
    done_id = done["items"][0]["id"]
    refused = serve_api.cli("runs", "retry", done_id, "--dry-run")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert refused.stdout == (
        f"run {done_id} is SUCCEEDED: a retry takes FAILED runs only; nothing retried\n"
    )
    # A start over's dry run: what it would start, starting nothing, as the API's preview.
    ahead = serve_api.ok("runs", "start-over", done_id[:8], "--dry-run")
    assert re.fullmatch(
        rf"run {done_id} \(SUCCEEDED\): would start a new run of v\d+ with the same input; "
        r"nothing started\n",
        ahead.stdout,
    ), ahead.stdout
    looked = httpx.get(
        f"{serve_api.url}/runs/{done_id}/start-over/preview",
        headers={"Authorization": f"Bearer {serve_api.admin_key}"},
    ).json()
    assert serve_api.json("runs", "start-over", done_id, "--dry-run") == looked
    assert looked["startable"] and serve_api.json("runs", "show", done_id)["restarts"] == []
    # Several runs: the batch's preview of them, which skips the SUCCEEDED one (exit 1, as
    # the batch of them would exit).
    several = serve_api.cli("runs", "retry", run_id[:8], done_id, "--dry-run")
    assert several.returncode == 1, (several.stdout, several.stderr)
    assert several.stdout == (
        "would retry 1 run (of 2 named); 1 named is skipped: not FAILED (1 SUCCEEDED): "
        f"run {done_id}; nothing retried\n"
    ), several.stdout
    assert serve_api.json("runs", "show", run_id)["status"] == "FAILED"  # nothing retried


def test_publish_leaves_run_inputs_out_as_validate_does(serve_api: Stack) -> None:
    """The tour: `workflows publish examples/*.json` sent the `*.input.json` files as
    workflows (19 problems), where `validate examples/*.json` reads them as run inputs."""
    name = "cli-parity-inputs"
    workflow = serve_api.tmp / f"{name}.json"
    call = {"type": "GATEWAY", "config": {"url": serve_api.downstream + "/cli-parity/in"}}
    workflow.write_text(json.dumps({"name": name, "vertices": {"ping": call}}))
    run_input = serve_api.tmp / f"{name}.input.json"
    run_input.write_text('{"customer": 7}')
    done = serve_api.ok("workflows", "publish", str(workflow), str(run_input))
    assert re.search(rf"^{name}\s+v1\s+published", done.stdout, re.M), done.stdout
    said = " ".join(done.stderr.split())
    assert f"left out {run_input}: a run input (*.input.json), not a workflow" in said, said
    only = serve_api.cli("workflows", "publish", str(run_input))
    assert_refused(only, 2, "no workflow file among those given: only run inputs")
