"""Awkward secrets sent every way a URL carries them, echoed back, recorded nowhere.

Each secret of the table goes to a real echo downstream (tests/integration/echo_harness.py) as
a `query` value (aiohttp writes it with space as `+` and `/ : @ ! $ ' ( ) * ,` as they are),
in the url's path and query (encoded whole, then re-encoded by yarl), and as the url's
password (sent as a Basic credential); the downstream answers with the request it saw, in a
200 (the step's output) and in a 422 (the error's body excerpt, never parsed, so the server's
JSON escapes stay: PHP's `\\/` and `\\u00e9`, Gson's `\\u003d`). What the downstream saw is the
oracle: every spelling of the value it received, and those spellings as its JSON encoder
wrote them, must be absent from the runs, their steps, their logs, the run list, the database
and the worker's log lines.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.fernet import Fernet

from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from schemas.redaction import REDACTED
from tests.basic_auth import basic_credential
from tests.conftest import Backend
from tests.integration.dump_harness import dump_database, hits
from tests.integration.echo_harness import ESCAPES, Echo, echo_server, php_json
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run

KEY = Fernet.generate_key().decode()
USER = "svc"

AWKWARD = {
    "review-spaces": "correct horse/battery staple",
    "review-mixed": 'Sk-é/quote"&amp x+y%41~ZZTOP',
    "base64": "tok/En+base64==",
    "delimiters": "a&b=c#d?e%zz;f/g",
    "quotes": 'it\'s "quoted" (maybe)*',
    "sub-delims": "!$'()*,;:@ end~",
    "latin-1": "pässwörd~ünï çé",
    "backslash": "C:\\dir\\n+tab\t1",
}
"""Secrets a URL, a form or a JSON string give meanings to. Each fits HTTP Basic (Latin-1),
since each is also sent as the url's password."""


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    async with echo_server() as server:
        yield server


@pytest.fixture
async def ops(backend: Backend) -> AsyncIterator[Operations]:
    runtime = await Runtime.open(settings_for(backend, secret_keys=KEY))
    yield Operations(runtime)
    await runtime.close()


def _gateway(url: str, **config: Any) -> dict[str, Any]:
    return {"type": "GATEWAY", "config": {"url": url, "retry": {"maxAttempts": 1}, **config}}


def workflows(base: str) -> dict[str, dict[str, Any]]:
    """By name: one run whose three calls succeed (their echoes are outputs), and one run per
    failing call (a run stops at its first failure; each echo is an error's excerpt)."""
    host = base.removeprefix("http://")
    secret = "{{ secrets.PASS }}"
    in_query = {"query": {"pw": secret}}
    in_url = f"/{secret}/end?k={secret}&z=1"
    password = f"http://{USER}:{secret}@{host}"
    documents = {
        "succeeds": {
            "query": _gateway(f"{base}/php/ok", **in_query),
            "url": {**_gateway(f"{base}/gson/ok{in_url}"), "dependsOn": ["query"]},
            "password": {**_gateway(f"{password}/ok"), "dependsOn": ["url"]},
        },
        "query-fails": {"call": _gateway(f"{base}/php/fail", **in_query)},
        "url-fails": {"call": _gateway(f"{base}/php/fail{in_url}")},
        "gson-fails": {"call": _gateway(f"{base}/gson/fail{in_url}", **in_query)},
        "password-fails": {"call": _gateway(f"{password}/fail/login")},
    }
    return {name: {"name": name, "vertices": vertices} for name, vertices in documents.items()}


def spellings(received: list[dict[str, Any]], value: str) -> set[str]:
    """Every spelling of `value` the downstream received (the oracle: what the HTTP client
    actually sent, not what the redactor expects) and each as the echo's encoders wrote it."""
    sent = {value, basic_credential(USER, value)}
    for request in received:
        raw = urlsplit(request["rawPath"])
        segments = raw.path.split("/")
        if "end" in segments:
            sent.add(segments[segments.index("end") - 1])
        # `keep_blank_values`, and no decoding: the raw text of each query value.
        sent.update(part.partition("=")[2] for part in raw.query.split("&") if part)
        assert {v for k, v in parse_qsl(raw.query) if k in {"pw", "k"}} <= {value}
    sent -= {"1"}  # the `z=1` beside it
    escaped = {escape(form)[1:-1] for form in sent for escape in (*ESCAPES.values(), json.dumps)}
    return {form for form in sent | escaped if len(form) >= 4}


def once_each(received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests received, a request sent again (same method, raw path and credential)
    counted once."""
    seen: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for request in received:
        key = (request["method"], request["rawPath"], request["headers"].get("authorization"))
        seen.setdefault(key, request)
    return list(seen.values())


async def run_all(ops: Operations, echo: Echo, value: str) -> dict[str, str]:
    await ops.secrets.set("acme", "PASS", value, actor="cli")
    documents = workflows(echo.url)
    await ops.workflows.publish(list(documents.values()))
    runs = {name: (await ops.runs.submit(name, {}, tenant_id="acme")).run.id for name in documents}
    async with running_worker(ops.runtime):
        for run_id in runs.values():
            await wait_for_run(ops.runtime, run_id)
    return runs


@pytest.mark.parametrize("value", AWKWARD.values(), ids=AWKWARD.keys())
async def test_an_awkward_secret_sent_in_the_url_is_recorded_nowhere(
    ops: Operations, echo: Echo, backend: Backend, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    caplog.set_level(logging.DEBUG)
    runs = await run_all(ops, echo, value)

    # It reached the downstream whole, every way it was sent. Once each, but for a call sent
    # again after its claim's lease expired (at-least-once: a full CI run on a starved host
    # requeued five), which repeats the same request.
    received = once_each(echo.received)
    assert len(received) == 7 <= len(echo.received)
    # The value as a query value and in the URL's path and query, three requests each.
    assert sum("pw" in r["query"] for r in received) == 3
    assert sum("k" in r["query"] for r in received) == 3
    for request in received:
        if "pw" in request["query"]:
            assert request["query"]["pw"] == [value]
        if "k" in request["query"]:
            assert request["query"]["k"] == [value]
            assert request["path"].endswith(f"/{value}/end")
    passwords = [r for r in received if r["headers"].get("authorization")]
    assert len(passwords) == 2
    for request in passwords:
        assert request["headers"]["authorization"] == f"Basic {basic_credential(USER, value)}"
    needles = spellings(echo.received, value)
    if value == AWKWARD["review-spaces"]:  # the oracle reads the request line as it was sent
        assert {"correct+horse/battery+staple", "correct+horse\\/battery+staple"} <= needles

    # The runs went as designed, and what they show has `***` where the value was.
    recorded: dict[str, str] = {}
    for name, run_id in runs.items():
        run = await ops.runs.get(run_id)
        if name == "succeeds":
            assert run.status == "SUCCEEDED", run.error
            outputs = {step.vertex_id: step.output for step in run.steps}
            assert outputs["query"]["body"]["query"] == {"pw": [REDACTED]}
            assert outputs["url"]["body"]["query"] == {"k": [REDACTED], "z": ["1"]}
            assert outputs["password"]["headers"]["x-echo-authorization"] == f"Basic {REDACTED}"
        else:
            assert run.error is not None
            assert (run.status, run.error.kind, run.error.http_status) == (
                "FAILED",
                "http_error",
                422 if name != "password-fails" else 400,
            )
            assert REDACTED in (run.error.body_excerpt or "")
        logs = await ops.runs.logs(run_id, limit=200)
        recorded[name] = run.model_dump_json() + logs.model_dump_json()
    listed = await ops.runs.list(RunFilter(tenant="acme"), limit=50)
    assert len(listed.items) == len(runs)
    recorded["list"] = listed.model_dump_json()
    dump = await dump_database(backend.database_url)
    recorded["database"] = "\n".join(hits(dump, ""))
    recorded["logged"] = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)

    found = sorted(
        f"{needle!r} in {where}"
        for where, text in recorded.items()
        for needle in needles
        if needle in text
    )
    assert found == []


async def test_a_secret_in_an_html_page_of_the_json_echo_is_recorded_nowhere(
    ops: Operations, echo: Echo
) -> None:
    """A security review's leak: a downstream's error page that shows the JSON it echoes
    HTML-escaped writes the value's `"` as `\\&quot;` (the JSON escape, then the page's), a
    spelling the redactor did not know; the whole rest of the value was in the body excerpt."""
    value = AWKWARD["quotes"]
    await ops.secrets.set("acme", "PASS", value, actor="cli")
    call = _gateway(f"{echo.url}/page/fail", query={"pw": "{{ secrets.PASS }}"})
    await ops.workflows.publish([{"name": "page-fails", "vertices": {"call": call}}])
    run_id = (await ops.runs.submit("page-fails", {}, tenant_id="acme")).run.id
    async with running_worker(ops.runtime):
        await wait_for_run(ops.runtime, run_id)

    assert [r["query"]["pw"] for r in echo.received] == [[value]]
    shown = html.escape(php_json(value)[1:-1])
    assert "\\&quot;" in shown  # what the page showed of it
    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.kind, run.error.http_status) == ("FAILED", "http_error", 422)
    excerpt = run.error.body_excerpt or ""
    assert excerpt.startswith("<html><body><pre>") and REDACTED in excerpt
    logs = await ops.runs.logs(run_id, limit=200)
    recorded = [excerpt, run.error.message, *(step.model_dump_json() for step in run.steps)]
    recorded += [line.model_dump_json() for line in logs.items]
    assert [text for text in recorded if "maybe" in text] == []
