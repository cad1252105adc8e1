"""The command line does what the REST API does: `runs submit --version N` runs the version
`POST /workflows/{name}/runs` runs with `version` in its body, refused in the same words, and
`runs retry RUN --dry-run` prints what `GET /runs/{id}/retry/preview` answers. Real
subprocesses against `schemabridge serve` (an admin key)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.cli_harness import Stack, assert_refused

NAME = "cli-parity-ping"


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
    below = serve_api.cli("runs", "submit", versions, "--version", "0")
    assert below.returncode == 2 and "No such option" not in below.stderr, below.stderr
