"""Runs that use secrets, executed by a real worker against a real echo server, on both
backends: the secret reaches the destination in a header, the query, the body and the URL's
userinfo, and nothing the engine records or logs shows it; a missing or unreadable secret
fails its step with a kind that names it."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest
from cryptography.fernet import Fernet

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import RunDetail
from engine.runtime import Runtime
from engine.secret_cipher import MAKE_KEY, key_id
from schemas.definitions import Workflow
from schemas.errors import DefinitionError
from schemas.redaction import REDACTED
from tests.basic_auth import basic_credential
from tests.conftest import Backend
from tests.integration.dump_harness import dump_database, hits
from tests.integration.echo_harness import Echo, echo_server
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from tests.integration.test_step_waiting import eventually

VALUE = "cnry_Q9v+Zt=Kx.7Lw~pA-5d1"
KEY = Fernet.generate_key().decode()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    async with echo_server() as server:
        yield server


@pytest.fixture
async def ops(backend: Backend) -> AsyncIterator[Operations]:
    runtime = await Runtime.open(settings_for(backend, secret_keys=KEY))
    yield Operations(runtime)
    await runtime.close()


def using_secret(base: str, *, fail: bool) -> dict[str, Any]:
    """One call with the secret everywhere a request can carry it, then (with `fail`) one whose
    400 answer echoes it back."""
    host = base.removeprefix("http://")
    request = {
        "method": "POST",
        "headers": {"X-Api-Key": "{{ secrets.TOKEN }}"},
        "query": {"key": "{{ secrets.TOKEN }}"},
        "body": {"token": "{{ secrets.TOKEN }}", "note": "Bearer {{ secrets.TOKEN }}"},
        "retry": {"maxAttempts": 1},
    }
    vertices: dict[str, Any] = {
        "call": {
            "type": "GATEWAY",
            "config": {"url": f"http://canary:{{{{ secrets.TOKEN }}}}@{host}/ok", **request},
        }
    }
    if fail:
        vertices["echoed"] = {
            "type": "GATEWAY",
            "dependsOn": ["call"],
            "config": {"url": f"{base}/fail/{{{{ secrets.TOKEN }}}}", **request},
        }
    return {"name": "secretive", "vertices": vertices}


async def run_to_end(ops: Operations, document: dict[str, Any], tenant: str = "acme") -> str:
    await ops.workflows.publish([document])
    run_id = (await ops.runs.submit(document["name"], {}, tenant_id=tenant)).run.id
    async with running_worker(ops.runtime):
        await wait_for_run(ops.runtime, run_id)
    return run_id


async def test_the_secret_reaches_the_destination_and_nothing_recorded_shows_it(
    ops: Operations, echo: Echo, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await ops.secrets.set("acme", "TOKEN", VALUE, actor="cli")
    run_id = await run_to_end(ops, using_secret(echo.url, fail=True))

    # It was sent: header, query, body, Basic credential from the URL, and the path.
    first, second = echo.received
    assert first["headers"]["x-api-key"] == VALUE
    assert first["headers"]["authorization"] == f"Basic {basic_credential('canary', VALUE)}"
    assert first["query"] == {"key": [VALUE]}
    assert f'"token":"{VALUE}"' in first["body"]
    assert second["path"] == f"/fail/{VALUE}"

    # It is not recorded: the run, its steps, its log, the database.
    run = await ops.runs.get(run_id)
    assert run.status == "FAILED"
    assert run.error is not None
    assert (run.error.kind, run.error.vertex_id) == ("http_error", "echoed")
    assert REDACTED in (run.error.body_excerpt or "")
    assert VALUE not in (run.error.body_excerpt or "")
    assert "/fail/***" in run.error.message
    output = next(step.output for step in run.steps if step.vertex_id == "call")
    assert output["body"]["headers"]["x-api-key"] == REDACTED
    assert output["body"]["query"] == {"key": [REDACTED]}
    assert output["headers"]["x-echo-authorization"] == f"Basic {REDACTED}"
    logs = await ops.runs.logs(run_id, limit=500)
    forms = {VALUE, quote(VALUE, safe=""), basic_credential("canary", VALUE)}
    recorded = run.model_dump_json() + logs.model_dump_json()
    assert [form for form in forms if form in recorded] == []
    dump = await dump_database(backend.database_url)
    assert [hit for form in forms for hit in hits(dump, form)] == []
    assert any(REDACTED in row for row in dump["step"])  # the search reads the steps
    printed = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    assert [line for line in printed for form in forms if form in line] == []


URL_HOSTILE = 'p@ss w/rd?&=é"x'
"""A secret whose characters a URL gives meanings to: spliced raw into a path, it was cut at
`/` and `?`, and the redactor, which knows the value whole, could not recognise the pieces."""


async def test_a_secret_in_the_url_path_and_query_is_sent_whole_and_recorded_nowhere(
    ops: Operations, echo: Echo, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await ops.secrets.set("acme", "TOKEN", URL_HOSTILE, actor="cli")
    url = f"{echo.url}/fail/{{{{ secrets.TOKEN }}}}/end?k={{{{ secrets.TOKEN }}}}&z=1"
    document = {
        "name": "url-secret",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": url, "retry": {"maxAttempts": 1}}}
        },
    }
    run_id = await run_to_end(ops, document)

    # Sent as one path segment and one query value (the echo answers 400 with all of it).
    [received] = echo.received
    assert received["path"] == f"/fail/{URL_HOSTILE}/end"
    assert received["query"] == {"k": [URL_HOSTILE], "z": ["1"]}

    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "http_error")
    assert "/fail/***/end" in run.error.message
    assert REDACTED in (run.error.body_excerpt or "")
    # Not recorded, whole or in pieces, in any encoding: its start is searched for.
    pieces = {"p@ss", "p%40ss", "rd?&", "rd%3F"}
    logs = await ops.runs.logs(run_id, limit=100)
    recorded = run.model_dump_json() + logs.model_dump_json()
    assert [piece for piece in pieces if piece in recorded] == []
    dump = await dump_database(backend.database_url)
    assert [hit for piece in pieces for hit in hits(dump, piece)] == []
    printed = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    assert [line for line in printed for piece in pieces if piece in line] == []


URL_PASSWORD = "cnry#pw?q/p@h%41:z"
"""A password a URL's userinfo gives meanings to: spliced raw, `#` ended the URL there and its
start (`https://svc:cnry`) was shown in the step's error; `/` sent the rest as the path to the
wrong host; `%41` arrived as `A`."""


async def test_a_secret_password_in_the_url_is_sent_whole_and_recorded_nowhere(
    ops: Operations, echo: Echo, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await ops.secrets.set("acme", "TOKEN", URL_PASSWORD, actor="cli")
    host = echo.url.removeprefix("http://")
    url = f"http://svc:{{{{ secrets.TOKEN }}}}@{host}/fail/login"
    document = {
        "name": "url-password",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": url, "retry": {"maxAttempts": 1}}}
        },
    }
    run_id = await run_to_end(ops, document)

    # Sent whole, to the host written, as the Basic credential (the echo answers 400 with it).
    [received] = echo.received
    credential = basic_credential("svc", URL_PASSWORD)
    assert received["headers"]["authorization"] == f"Basic {credential}"
    assert received["path"] == "/fail/login"

    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "http_error")
    assert f"http://{host}/fail/login" in run.error.message  # shown without its userinfo
    # Not recorded, whole or from its start, in any encoding.
    pieces = {"cnry", credential, quote(URL_PASSWORD, safe="")}
    logs = await ops.runs.logs(run_id, limit=100)
    recorded = run.model_dump_json() + logs.model_dump_json()
    assert [piece for piece in pieces if piece in recorded] == []
    dump = await dump_database(backend.database_url)
    assert [hit for piece in pieces for hit in hits(dump, piece)] == []
    printed = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    assert [line for line in printed for piece in pieces if piece in line] == []


async def test_a_missing_secret_fails_the_step_naming_it_and_a_retry_finds_it(
    ops: Operations, echo: Echo
) -> None:
    await ops.secrets.set("globex", "TOKEN", VALUE, actor="cli")  # another tenant's
    run_id = await run_to_end(ops, using_secret(echo.url, fail=False))
    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "secret_not_found")
    assert "tenant 'acme' has no secret 'TOKEN'" in run.error.message
    assert "schemabridge secrets set TOKEN --tenant acme" in run.error.message
    assert echo.received == []  # nothing was sent

    await ops.secrets.set("acme", "TOKEN", VALUE, actor="cli")
    await ops.actions.retry(run_id, actor="cli")
    async with running_worker(ops.runtime):
        retried = await wait_for_run(ops.runtime, run_id)
    assert retried.status == "SUCCEEDED", retried.error
    assert [r["headers"]["x-api-key"] for r in echo.received] == [VALUE]


async def run_on_a_worker_with(
    keys: str | None, backend: Backend, ops: Operations, echo: Echo, service: str | None = None
) -> RunDetail:
    """A run of tenant acme that uses the secret TOKEN, run to its end by a worker with
    SCHEMABRIDGE_SECRET_KEYS `keys` (None: no key), not the one that set it; `service`: the
    name the worker runs under (None: none, as `schemabridge run`)."""
    worker = await Runtime.open(settings_for(backend, secret_keys=keys))
    try:
        await ops.workflows.publish([using_secret(echo.url, fail=False)])
        run_id = (await ops.runs.submit("secretive", {}, tenant_id="acme")).run.id
        config = dataclasses.replace(worker.worker_config(), service=service)
        async with running_worker(worker, config):
            return await wait_for_run(worker, run_id)
    finally:
        await worker.close()


@pytest.mark.parametrize("worker_keys", [None, "other"], ids=["no-key", "wrong-key"])
async def test_a_worker_that_cannot_decrypt_fails_the_step_saying_why(
    backend: Backend, ops: Operations, echo: Echo, worker_keys: str | None
) -> None:
    await ops.secrets.set("acme", "TOKEN", VALUE, actor="cli")
    keys = None if worker_keys is None else Fernet.generate_key().decode()
    run = await run_on_a_worker_with(keys, backend, ops, echo)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "secret_unreadable")
    assert "'acme'" in run.error.message and "TOKEN" in run.error.message
    if worker_keys is None:
        assert MAKE_KEY in run.error.message
    else:  # names the key the worker lacks (the setter's) and the setting to put it in
        assert f"encrypted with key {key_id(KEY)}" in run.error.message
        assert "add that key to SCHEMABRIDGE_SECRET_KEYS" in run.error.message
    assert echo.received == []


async def test_a_missing_secret_is_told_first_on_a_worker_without_a_key(
    backend: Backend, ops: Operations, echo: Echo
) -> None:
    """The secret to set is the fix that comes first: a key alone would only lead to it. The
    worker's missing key is said too, on the same line."""
    run = await run_on_a_worker_with(None, backend, ops, echo)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "secret_not_found")
    assert run.error.message.startswith("tenant 'acme' has no secret 'TOKEN': set it with ")
    assert "the worker that ran the step cannot decrypt secrets either: no secret" in (
        run.error.message
    )
    assert MAKE_KEY in run.error.message and "\n" not in run.error.message
    assert echo.received == []


async def test_a_secret_in_the_host_is_refused(ops: Operations, echo: Echo) -> None:
    await ops.secrets.set("acme", "TOKEN", "secret-host-part", actor="cli")
    document = {
        "name": "host",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": "http://{{ secrets.TOKEN }}.example/x"}}
        },
    }
    with pytest.raises(DefinitionError) as refused:  # refused when published...
        await ops.workflows.publish(document)
    [problem] = refused.value.problems
    assert (problem.pointer, problem.code) == ("/vertices/call/config/url", "secret_not_allowed")
    # ...and by the run, for a version stored before validation refused it.
    await ops.runtime.store.publish(Workflow.model_validate(document))
    run_id = (await ops.runs.submit("host", {}, tenant_id="acme")).run.id
    async with running_worker(ops.runtime):
        await wait_for_run(ops.runtime, run_id)
    run = await ops.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "invalid_config")
    assert "the url's host would hold a secret, and it is the call's admission key" in (
        run.error.message
    )
    assert "secret-host-part" not in run.model_dump_json()


async def test_a_destination_holding_a_secret_is_named_as_the_field(
    ops: Operations, echo: Echo
) -> None:
    # `@` is the whole context, which holds the secrets the step reads: validation cannot
    # tell, the run can.
    await ops.secrets.set("acme", "TOKEN", "secret-in-key", actor="cli")
    config = {
        "url": f"{echo.url}/ok",
        "headers": {"X-Api-Key": "{{ secrets.TOKEN }}"},
        "destination": "d-{{ to_string(@) }}",
    }
    document = {"name": "keyed", "vertices": {"call": {"type": "GATEWAY", "config": config}}}
    run = await ops.runs.get(await run_to_end(ops, document))
    assert run.error is not None
    assert (run.status, run.error.kind) == ("FAILED", "invalid_config")
    assert "the destination would hold a secret" in run.error.message
    assert "secret-in-key" not in run.model_dump_json()
    assert echo.received == []


async def test_a_literal_url_password_is_redacted_too(ops: Operations, echo: Echo) -> None:
    host = echo.url.removeprefix("http://")
    document = {
        "name": "literal",
        "vertices": {
            "call": {"type": "GATEWAY", "config": {"url": f"http://ops:pa55-w0rd-9@{host}/ok"}}
        },
    }
    run_id = await run_to_end(ops, document)
    [received] = echo.received
    assert received["headers"]["authorization"] == f"Basic {basic_credential('ops', 'pa55-w0rd-9')}"
    run = await ops.runs.get(run_id)
    assert run.status == "SUCCEEDED"
    recorded = run.model_dump_json() + (await ops.runs.logs(run_id, limit=100)).model_dump_json()
    assert "pa55-w0rd-9" not in recorded
    assert basic_credential("ops", "pa55-w0rd-9") not in recorded
    assert f"http://{host}/ok" in recorded  # the URL is logged, without its userinfo


async def test_a_retry_wait_shown_while_it_lasts_is_redacted_too(
    ops: Operations, downstream: RunningDownstream, backend: Backend
) -> None:
    """The lines and the wait message a retry wait writes before the step's result pass
    through the step's redactor, as everything it records at the end does."""
    await ops.secrets.set("acme", "TOKEN", VALUE, actor="cli")
    downstream.script([{"status": 503, "retry_after": "2"}, 200])
    document = {
        "name": "secret-retry",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{downstream.url}/retry/{{{{ secrets.TOKEN }}}}",
                    "retry": {"maxAttempts": 2},
                },
            }
        },
    }
    await ops.workflows.publish([document])
    run_id = (await ops.runs.submit("secret-retry", {}, tenant_id="acme")).run.id

    async def waiting() -> str | None:
        (step,) = await ops.runtime.store.get_steps(run_id)
        return step.wait_message

    async with running_worker(ops.runtime):
        message = await eventually(waiting, "the retry wait", timeout_s=10)
        await wait_for_run(ops.runtime, run_id)
    assert "/retry/***" in message and VALUE not in message
    forms = {VALUE, quote(VALUE, safe="")}
    dump = await dump_database(backend.database_url)
    assert [hit for form in forms for hit in hits(dump, form)] == []
    logs = await ops.runs.logs(run_id, limit=100)
    assert [line.data.get("attempt") for line in logs.items if line.vertex_id] == [1, 2]


@pytest.mark.parametrize("worker_keys", [None, "other"], ids=["no-key", "wrong-key"])
async def test_a_worker_that_cannot_decrypt_is_named_to_admins_only(
    backend: Backend, ops: Operations, echo: Echo, worker_keys: str | None
) -> None:
    """Of several workers, only those without the key fail the steps they claim: the run's
    log says which one to an admin key. The step's error, which the tenant reads, does not
    (a service id names hosts and processes: docs/security.md), nor do the tenant's logs."""
    await ops.secrets.set("acme", "TOKEN", VALUE, actor="cli")
    keys = None if worker_keys is None else Fernet.generate_key().decode()
    run = await run_on_a_worker_with(keys, backend, ops, echo, service="worker-b")
    assert run.error is not None and run.error.kind == "secret_unreadable"
    assert "worker-b" not in run.error.message, run.error.message
    assert "the worker that ran the step" in run.error.message
    admin = await ops.runs.logs(run.id, limit=100)
    (failed,) = [line for line in admin.items if line.message.startswith("step failed")]
    assert failed.data is not None and failed.data["worker"] == "worker-b"
    tenant = await ops.runs.logs(run.id, limit=100, tenant="acme")
    assert "worker-b" not in tenant.model_dump_json()
