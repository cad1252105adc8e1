"""The secret canary: a run that uses a secret everywhere a request can carry it, executed by
real `api` and `worker` processes on both backends, and then a search for the secret's value
in everything the system kept or showed: every column of every table, every line the
processes and the CLI printed (at debug level), every API answer about the run (the run, its
steps, its log, its children, its event stream, the run list, /metrics, /secrets). Zero hits,
while the destination did receive it: in a header, the query, the body, the path and the
URL's userinfo (as a Basic credential), in the parent run and in its children; and it echoed
the request back, in a successful answer (the step output) and in a failing one (the error's
body excerpt).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from cryptography.fernet import Fernet

from schemas.redaction import REDACTED
from tests.basic_auth import basic_credential
from tests.conftest import Backend
from tests.e2e.rest_harness import client, process_env, schemabridge, service, upgraded
from tests.integration.dump_harness import dump_database, hits
from tests.integration.echo_harness import Echo, echo_server

CANARY = "cnry_7Hq+V2x=Lp.9Zk~wE-41c"
USER = "canary-user"
PASSPHRASE = "correct horse/battery staple"
"""A second secret, sent as a `query` value, which the HTTP client writes with space as `+`
and `/` as it is: the spelling a security review once found echoed in clear."""
FORMS = {
    "raw": CANARY,
    "percent-encoded": quote(CANARY, safe=""),
    "form-encoded": quote(CANARY, safe="").replace("%20", "+"),
    "basic credential": basic_credential(USER, CANARY),
    "passphrase": PASSPHRASE,
    "passphrase as a query value": "correct+horse/battery+staple",
    "passphrase, JSON-escaped": "correct+horse\\/battery+staple",
}
RUN_TIMEOUT_S = 90.0

pytestmark = pytest.mark.slow


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    async with echo_server() as server:
        yield server


def workflows(base: str) -> list[dict[str, Any]]:
    host = base.removeprefix("http://")
    request: dict[str, Any] = {
        "method": "POST",
        "headers": {"X-Api-Key": "{{ secrets.CRM_TOKEN }}"},
        "query": {"key": "{{ secrets.CRM_TOKEN }}", "pw": "{{ secrets.PASSPHRASE }}"},
        "body": {"token": "{{ secrets.CRM_TOKEN }}", "item": "{{ item }}"},
        "retry": {"maxAttempts": 1},
    }
    with_userinfo = f"http://{USER}:{{{{ secrets.CRM_TOKEN }}}}@{host}"
    parent = {
        "name": "canary",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": f"{with_userinfo}/ok", **request}},
            "each": {
                "type": "SPAWNER",
                "dependsOn": ["call"],
                "config": {"items": [1, 2], "workflow": "canary-child"},
            },
            "join": {"type": "MERGE", "dependsOn": ["each"]},
            "echoed": {
                "type": "GATEWAY",
                "dependsOn": ["join"],
                "config": {"url": f"{with_userinfo}/fail/{{{{ secrets.CRM_TOKEN }}}}", **request},
            },
        },
    }
    child = {
        "name": "canary-child",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": f"{base}/ok/child", **request}},
        },
    }
    return [parent, child]


def cli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = schemabridge(env, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done


async def _events(http: httpx.AsyncClient, run_id: str) -> str:
    """The whole event stream of an ended run (it closes after its `end` event)."""
    async with http.stream("GET", f"/runs/{run_id}/events") as stream:
        assert stream.status_code == 200
        text = "".join([chunk async for chunk in stream.aiter_text()])
    assert "event: end" in text
    return text


async def _answers(url: str, key: str, run_id: str) -> dict[str, str]:
    """Every API answer about the run, by what was asked."""
    async with client(url, key) as http:
        run = await http.get(f"/runs/{run_id}")
        children = await http.get(f"/runs/{run_id}/children")
        answers = {"run": run, "children": children}
        for child in children.json()["items"]:
            answers[f"child run {child['id']}"] = await http.get(f"/runs/{child['id']}")
            answers[f"child log {child['id']}"] = await http.get(f"/runs/{child['id']}/logs")
        answers["log"] = await http.get(f"/runs/{run_id}/logs", params={"limit": 500})
        answers["runs"] = await http.get("/runs", params={"limit": 50})
        answers["metrics"] = await http.get("/metrics")
        answers["secrets"] = await http.get("/secrets")
        for name, answer in answers.items():
            assert answer.status_code == 200, (name, answer.text)
        texts = {name: answer.text for name, answer in answers.items()}
        texts["events"] = await _events(http, run_id)
    return texts


async def _wait_ended(url: str, key: str, run_id: str) -> dict[str, Any]:
    async with client(url, key) as http, asyncio.timeout(RUN_TIMEOUT_S):
        while True:
            run = (await http.get(f"/runs/{run_id}")).json()
            if run["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"}:
                return dict(run)
            await asyncio.sleep(0.2)


def _found(texts: dict[str, str]) -> list[str]:
    return [
        f"{form} in {where}"
        for where, text in texts.items()
        for form, needle in FORMS.items()
        if needle in text
    ]


async def test_the_canary_secret_is_nowhere(backend: Backend, tmp_path: Path, echo: Echo) -> None:
    env = process_env(
        backend,
        tmp_path,
        secret_keys=Fernet.generate_key().decode(),
        # The egress policy (where it exists) refuses loopback unless it is allowed.
        egress_allow="127.0.0.0/8",
    )
    printed: dict[str, str] = {}
    admin = cli(upgraded(env), "keys", "create", "--admin")
    key = admin.stdout.strip()
    set_secret = cli(env, "secrets", "set", "CRM_TOKEN", "--tenant", "acme", stdin=CANARY + "\n")
    cli(env, "secrets", "set", "PASSPHRASE", "--tenant", "acme", stdin=PASSPHRASE + "\n")
    printed["cli keys create"] = admin.stderr
    printed["cli secrets set"] = set_secret.stdout + set_secret.stderr

    api_args = ["api", "--port", "0", "--log-level", "debug"]
    worker_args = ["worker", "--name", "canary-worker", "--log-level", "debug"]
    with (
        service(api_args, env, tmp_path / "api.log") as api,
        service(worker_args, env, tmp_path / "worker.log") as worker,
    ):
        url = api.wait_for_url()
        async with client(url, key) as http:
            published = await http.post("/workflows", json=workflows(echo.url))
            assert published.status_code in (200, 201), published.text
            submitted = await http.post("/workflows/canary/runs", json={"tenantId": "acme"})
            assert submitted.status_code in (200, 201, 202), submitted.text
            run_id = submitted.json()["run"]["id"]
        run = await _wait_ended(url, key, run_id)
        answers = await _answers(url, key, run_id)
        for name, process in (("api", api), ("worker", worker)):
            assert process.stop() == 0
            printed[f"{name} stdout"] = process.stdout()
            printed[f"{name} stderr"] = process.stderr()

    # The destination received the secret, every way it was sent.
    parent_call, first_child, second_child, failing = sorted(
        echo.received, key=lambda r: (r["path"] != "/ok", r["path"].startswith("/fail"))
    )
    assert parent_call["headers"]["authorization"] == f"Basic {FORMS['basic credential']}"
    for received in (parent_call, first_child, second_child, failing):
        assert received["headers"]["x-api-key"] == CANARY
        assert received["query"] == {"key": [CANARY], "pw": [PASSPHRASE]}
        assert "pw=correct+horse/battery+staple" in received["rawPath"]
        assert CANARY in received["body"]
    assert failing["path"] == f"/fail/{CANARY}"
    # The run went as designed: the children succeeded, the echoing call failed.
    assert run["status"] == "FAILED", run
    assert run["error"]["kind"] == "http_error" and run["error"]["vertexId"] == "echoed"
    assert REDACTED in run["error"]["bodyExcerpt"]
    # What the failing call sent is recorded too, the canary in its path, query and body
    # shown as ***, its userinfo left out, its header values not kept.
    sent = run["error"]["request"]
    assert sent["url"].endswith(f"/fail/{REDACTED}?key={REDACTED}&pw={REDACTED}"), sent
    assert USER not in sent["url"] and f'"token":"{REDACTED}"' in sent["bodyExcerpt"]
    assert "X-Api-Key" in sent["headerNames"]
    child_runs = [text for name, text in answers.items() if name.startswith("child run ")]
    assert len(child_runs) == 2 and all(REDACTED in text for text in child_runs)
    assert REDACTED in answers["log"]

    dump = await dump_database(backend.database_url)
    in_database = [f"{form}: {hit}" for form, needle in FORMS.items() for hit in hits(dump, needle)]
    assert in_database == []
    assert any(REDACTED in row for row in dump["step"])  # the search reads what was recorded
    assert _found(answers) == []
    assert _found(printed) == []
    assert "canary-worker" in printed["worker stderr"]  # the search reads what was printed
