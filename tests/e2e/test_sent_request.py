"""What a failed GATEWAY sent, end to end: a `schemabridge serve --demo` whose demo downstream
answers 422 to a POST that carries a secret in a header, the query and the body, and a long
body with markup in it. The REST run detail, `schemabridge runs show` and the monitor's run
page each show the method, the URL and the body's excerpt (cut, and said so), and none of
them, nor the run's log, shows the secret. A step answered 500 twice with the destination's
words (and the secret in them) keeps each attempt's answer in its history: the REST run
detail and `runs show` say it with each attempt, the secret shown as `***`."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import yarl
from cryptography.fernet import Fernet

from schemas.redaction import REDACTED
from tests.e2e.browser_harness import (
    DemoServer,
    opened,
    serve_demo,
    server_env,
    shoot,
    stop,
)
from tests.e2e.rest_harness import schemabridge

pytestmark = pytest.mark.slow

SECRET = "snt_4Vq+Kp9=Zr/Hx2Lw"
TENANT = "acme-sent"
MARKUP = "<script>window.__pwned = 1</script><img src=x onerror=window.__pwned=2>"
NOTE = MARKUP + "n" * 600
"""Past the 500-character bound of the body excerpt, with markup that must stay text."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    workdir = tmp_path_factory.mktemp("sent-request")
    env = server_env(workdir, f"sqlite+aiosqlite:///{workdir / 'sb.db'}")
    env["SCHEMABRIDGE_SECRET_KEYS"] = Fernet.generate_key().decode()
    running = serve_demo(workdir, env)
    try:
        yield running
    finally:
        stop(running)


@pytest.fixture(scope="module")
def failed_run(server: DemoServer) -> str:
    """A run whose POST the downstream answered 422: its id."""
    stored = server.call("/secrets/TOKEN", {"tenantId": TENANT, "value": SECRET}, method="PUT")
    assert stored["name"] == "TOKEN", stored
    published = server.call(
        "/workflows",
        {
            "name": "sent-request",
            "vertices": {
                "create-order": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{server.downstream}/sent/orders/{{{{ input.id }}}}",
                        "method": "POST",
                        "headers": {"X-Api-Key": "{{ secrets.TOKEN }}"},
                        "query": {"key": "{{ secrets.TOKEN }}"},
                        "body": {
                            "id": "{{ input.id }}",
                            "token": "{{ secrets.TOKEN }}",
                            "note": "{{ input.note }}",
                        },
                    },
                }
            },
        },
    )
    assert published["version"] == 1, published
    server.script("/sent/orders/A7", {"status": 422, "body": {"error": "validation_failed"}})
    body = {"input": {"id": "A7", "note": NOTE}, "tenantId": TENANT}
    answer = server.call("/workflows/sent-request/runs?wait=true", body)
    run_id = str(answer["details"]["runId"])
    assert server.run_status(run_id) == "FAILED"
    return run_id


def text_of(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as answer:
        return str(answer.read().decode())


def leaks(text: str) -> list[str]:
    # As yarl sends a query value (it leaves `/` alone), besides the other spellings.
    as_query = yarl.URL("http://h/").with_query({"k": SECRET}).raw_query_string[2:]
    forms = {SECRET, quote(SECRET, safe=""), json.dumps(SECRET)[1:-1], as_query}
    return [form for form in forms if form in text]


def sent_url(server: DemoServer) -> str:
    return f"{server.downstream}/sent/orders/A7?key={REDACTED}"


def test_the_run_detail_says_what_was_sent(server: DemoServer, failed_run: str) -> None:
    detail = server.call(f"/runs/{failed_run}")
    step = detail["steps"][0]
    for sent in (detail["error"]["request"], step["error"]["request"]):
        assert sent["method"] == "POST"
        assert sent["url"] == sent_url(server)
        assert sent["headerNames"] == ["X-Api-Key", "Idempotency-Key", "Content-Type"]
        assert sent["bodyExcerpt"].startswith(f'{{"id":"A7","token":"{REDACTED}","note":"')
        assert len(sent["bodyExcerpt"]) == 500 and sent["bodyTruncated"] is True
        assert sent["bodyBytes"] > 600
    assert step["error"]["httpStatus"] == 422
    assert step["history"][-1]["request"] == step["error"]["request"]
    # Lists read summaries: the record stays in the run's detail.
    listed = server.call(f"/runs?tenantId={TENANT}")["items"]
    assert [run["error"].get("request") for run in listed] == [None]


def test_no_answer_about_the_run_shows_the_secret(server: DemoServer, failed_run: str) -> None:
    for path in (
        f"/runs/{failed_run}",
        f"/runs/{failed_run}/logs",
        f"/runs?tenantId={TENANT}",
    ):
        answer = text_of(f"{server.url}{path}")
        assert leaks(answer) == [], path
    assert REDACTED in text_of(f"{server.url}/runs/{failed_run}/logs")


def test_runs_show_says_what_was_sent(server: DemoServer, failed_run: str) -> None:
    env = {**os.environ, "SCHEMABRIDGE_API_URL": server.url}
    env.pop("SCHEMABRIDGE_API_KEY", None)
    done = schemabridge(env, "runs", "show", failed_run)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"POST {sent_url(server)}" in out, out
    assert "headers" in out and "X-Api-Key, Idempotency-Key, Content-Type" in out
    assert "request body" in out and f'{{"id":"A7","token":"{REDACTED}"' in out
    assert "[cut: the first 500 characters of" in out
    assert leaks(out + done.stderr) == []
    shown = json.loads(schemabridge(env, "runs", "show", failed_run, "-o", "json").stdout)
    assert shown["error"]["request"]["url"] == sent_url(server)


def test_the_run_page_says_what_was_sent(server: DemoServer, failed_run: str, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/runs/{failed_run}") as (page, _):
        panel = page.locator(".step-panel")
        line = panel.locator(".sent-line")
        line.wait_for()
        assert line.inner_text() == f"Sent: POST {sent_url(server)}"
        assert (
            "X-Api-Key, Idempotency-Key, Content-Type"
            in panel.locator(".sent-headers").inner_text()
        )
        body = panel.locator("pre.request-body")
        # The body's markup is text: shown as sent, never run.
        assert body.inner_text().startswith(f'{{"id":"A7","token":"{REDACTED}","note":"{MARKUP}')
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main script, main img").count() == 0
        assert "cut: the first 500 characters of" in panel.locator(".body-cut").inner_text()
        assert leaks(page.content()) == []
        shoot(page, "run-sent-request")


POOL_EXHAUSTED = "database connection pool exhausted"


@pytest.fixture(scope="module")
def answered_run(server: DemoServer, failed_run: str) -> str:
    """A run whose GET the downstream answered 500 twice, naming the key it was sent: its id
    (`failed_run` stored the tenant's secret)."""
    path = "/sent/pool"
    call = {
        "url": f"{server.downstream}{path}",
        "headers": {"X-Api-Key": "{{ secrets.TOKEN }}"},
        "retry": {"maxAttempts": 2, "baseDelayMs": 10},
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "answered", "vertices": {"read-orders": vertex}})
    server.script(
        path,
        {"status": 500, "raw": f"{POOL_EXHAUSTED} (key {SECRET})"},
        {"status": 500, "raw": "[bold]still[/bold] down"},
    )
    answer = server.call("/workflows/answered/runs?wait=true", {"input": {}, "tenantId": TENANT})
    run_id = str(answer["details"]["runId"])
    assert server.run_status(run_id) == "FAILED"
    return run_id


def test_the_run_detail_says_what_each_attempt_was_answered(
    server: DemoServer, answered_run: str
) -> None:
    (step,) = server.call(f"/runs/{answered_run}")["steps"]
    history = [(a["attempt"], a["httpStatus"], a["bodyExcerpt"]) for a in step["history"]]
    assert history == [
        (1, 500, f"{POOL_EXHAUSTED} (key {REDACTED})"),
        (2, 500, "[bold]still[/bold] down"),
    ]
    assert step["error"]["bodyExcerpt"] == "[bold]still[/bold] down"
    for path in (f"/runs/{answered_run}", f"/runs/{answered_run}/logs"):
        assert leaks(text_of(f"{server.url}{path}")) == [], path


def test_runs_show_says_what_each_attempt_was_answered(
    server: DemoServer, answered_run: str
) -> None:
    env = {**os.environ, "SCHEMABRIDGE_API_URL": server.url}
    env.pop("SCHEMABRIDGE_API_KEY", None)
    done = schemabridge(env, "runs", "show", answered_run)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"answered: {POOL_EXHAUSTED} (key {REDACTED})" in out, out
    # The answer's brackets are its text, not markup the terminal ate.
    assert "answered: [bold]still[/bold] down" in out, out
    assert leaks(out + done.stderr) == []
