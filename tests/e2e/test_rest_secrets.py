"""`/secrets` over real HTTP (uvicorn on loopback), on both backends: set (201 then 200), list
and delete; admin keys only; the value in no answer, no access-log line and no error; 503 with
the command that makes a key when the API process has none."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from cryptography.fernet import Fernet

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from engine.secret_cipher import MAKE_KEY
from tests.conftest import Backend
from tests.e2e.rest_harness import access_lines, client, serving
from tests.integration.engine_harness import settings_for

VALUE = "rest-canary-8e1f+/=ü"


@dataclass
class Api:
    url: str
    ops: Operations
    admin_key: str
    admin_id: str
    tenant_key: str


async def _serve(backend: Backend, keys: str | None) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend, secret_keys=keys))
    ops = Operations(runtime)
    admin = await ops.keys.create(admin=True)
    tenant = await ops.keys.create(tenant="acme")
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, ops, admin.key, admin.id, tenant.key)
    finally:
        await runtime.close()


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    async for served in _serve(backend, Fernet.generate_key().decode()):
        yield served


async def test_admin_sets_lists_replaces_and_deletes(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    answers = []
    async with client(api.url, api.admin_key) as http:
        created = await http.put("/secrets/CRM_TOKEN", json={"tenantId": "acme", "value": VALUE})
        replaced = await http.put("/secrets/CRM_TOKEN", json={"tenantId": "acme", "value": VALUE})
        listed = await http.get("/secrets")
        scoped = await http.get("/secrets", params={"tenantId": "globex"})
        deleted = await http.delete("/secrets/CRM_TOKEN", params={"tenantId": "acme"})
        again = await http.delete("/secrets/CRM_TOKEN", params={"tenantId": "acme"})
        answers = [created, replaced, listed, scoped, deleted, again]
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["tenantId"], body["created"]) == ("CRM_TOKEN", "acme", True)
    assert body["updatedBy"] == f"key:{api.admin_id}"
    assert replaced.status_code == 200 and replaced.json()["created"] is False
    assert listed.status_code == 200
    assert [(s["tenantId"], s["name"]) for s in listed.json()["items"]] == [("acme", "CRM_TOKEN")]
    assert set(listed.json()["items"][0]) == {
        "name",
        "tenantId",
        "createdAt",
        "updatedAt",
        "updatedBy",
    }
    assert scoped.json() == {"items": []}
    assert deleted.status_code == 200
    assert deleted.json() == {"tenantId": "acme", "name": "CRM_TOKEN"}
    assert again.status_code == 404 and again.json()["code"] == "secret_not_found"
    shown = [answer.text for answer in answers] + [r.getMessage() for r in caplog.records]
    assert [text for text in shown if VALUE in text] == []
    assert {line["route"] for line in access_lines(caplog.records)} >= {"/secrets/{name}"}


async def test_the_old_name_tenant_is_still_taken(api: Api) -> None:
    """`tenant`, the old name of `tenantId`, in a body and in a query string (deprecated):
    clients written before the rename keep working; answers say `tenantId` only."""
    async with client(api.url, api.admin_key) as http:
        created = await http.put("/secrets/CRM_TOKEN", json={"tenant": "acme", "value": VALUE})
        scoped = await http.get("/secrets", params={"tenant": "acme"})
        both = await http.get("/secrets", params={"tenant": "acme", "tenantId": "globex"})
        missing = await http.delete("/secrets/CRM_TOKEN")
        deleted = await http.delete("/secrets/CRM_TOKEN", params={"tenant": "acme"})
    assert created.status_code == 201 and created.json()["tenantId"] == "acme"
    assert "tenant" not in created.json()
    assert [s["tenantId"] for s in scoped.json()["items"]] == ["acme"]
    assert both.status_code == 422 and both.json()["details"]["problems"][0]["pointer"] == (
        "/tenant"
    )
    assert missing.status_code == 422
    assert missing.json()["details"]["problems"][0]["pointer"] == "/tenantId"
    assert deleted.status_code == 200 and deleted.json()["tenantId"] == "acme"


@pytest.mark.parametrize(
    ("path", "body", "pointer"),
    [
        ("/secrets/CRM_TOKEN", {"tenantId": "acme", "value": "short"}, "/value"),
        ("/secrets/crm-token", {"tenantId": "acme", "value": VALUE}, "/name"),
        ("/secrets/CRM_TOKEN", {"tenantId": " acme", "value": VALUE}, "/tenantId"),
        ("/secrets/CRM_TOKEN", {"tenant": " acme", "value": VALUE}, "/tenantId"),
        ("/secrets/CRM_TOKEN", {"tenantId": "acme", "value": VALUE, "extra": 1}, "/extra"),
        ("/secrets/CRM_TOKEN", {"value": VALUE}, "/tenantId"),
        ("/secrets/CRM_TOKEN", {"tenant": "a", "tenantId": "b", "value": VALUE}, ""),
    ],
)
async def test_invalid_requests_are_422_and_never_echo_the_value(
    api: Api, path: str, body: dict[str, object], pointer: str
) -> None:
    async with client(api.url, api.admin_key) as http:
        answer = await http.put(path, json=body)
        listed = await http.get("/secrets")
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "invalid_request"
    assert pointer in [p["pointer"] for p in answer.json()["details"]["problems"]]
    assert VALUE not in answer.text
    assert listed.json() == {"items": []}
    # A name or a tenant of the wrong form is told what the form is, not a regular expression.
    assert "should match pattern" not in answer.text
    if body.get("value") == "short":  # the reason, as the CLI gives it, not only the count
        assert "could not be redacted" in answer.json()["message"]


async def test_only_admin_keys_manage_secrets(api: Api) -> None:
    requests = [
        ("PUT", "/secrets/CRM_TOKEN", {"json": {"tenantId": "acme", "value": VALUE}}),
        ("GET", "/secrets", {}),
        ("DELETE", "/secrets/CRM_TOKEN", {"params": {"tenantId": "acme"}}),
    ]
    async with client(api.url) as anonymous, client(api.url, api.tenant_key) as tenant:
        for method, path, extra in requests:
            refused = await anonymous.request(method, path, **extra)
            assert refused.status_code == 401, (method, refused.text)
            forbidden = await tenant.request(method, path, **extra)
            assert forbidden.status_code == 403, (method, forbidden.text)
            assert forbidden.json()["code"] == "forbidden"
    assert (await api.ops.secrets.list()).items == []


async def test_without_a_key_setting_is_503_saying_how_to_make_one(backend: Backend) -> None:
    async for api in _serve(backend, None):
        async with client(api.url, api.admin_key) as http:
            answer = await http.put("/secrets/CRM_TOKEN", json={"tenantId": "acme", "value": VALUE})
            listed = await http.get("/secrets")
            document = (await http.get("/openapi.json")).json()
        assert answer.status_code == 503
        assert answer.json()["code"] == "secret_key_missing"
        assert MAKE_KEY in answer.json()["message"]
        # The contract says this 503 apart from an outage's, which a client simply sends again.
        described = document["paths"]["/secrets/{name}"]["put"]["responses"]["503"]["description"]
        assert "`secret_key_missing`" in described, described
        assert listed.status_code == 200 and listed.json() == {"items": []}
