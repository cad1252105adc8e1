"""Who did what, over real HTTP on both backends (docs/security.md, 'Audit'): the key that
submitted a run (`createdBy`, also for a tenant key of the same tenant; unchanged by a
replay), the access log's client address and the run a submission created or replayed, and
`GET /audit` (admin keys only, filtered, paged) with a key's revocation and who did it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import access_lines, client, serving
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

DOCUMENT = single("audited", "http://127.0.0.1:9/never")


@dataclass
class Api:
    url: str
    ops: Operations
    admin: tuple[str, str]
    """(secret, id) of an admin key."""
    acme: tuple[str, str]
    acme_other: tuple[str, str]
    """Two keys of tenant acme."""


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    keys = [
        await ops.keys.create(admin=True, name="ops"),
        await ops.keys.create(tenant="acme", name="acme a"),
        await ops.keys.create(tenant="acme", name="acme b"),
    ]
    await ops.workflows.publish(DOCUMENT)
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            admin, acme, other = ((k.key, k.id) for k in keys)
            yield Api(url, ops, admin, acme, other)
    finally:
        await runtime.close()


async def test_a_submission_names_its_key_and_a_replay_does_not_change_it(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Idempotency-Key": "order-7"}
    with caplog.at_level(logging.INFO, logger="api.rest.access"):
        async with client(api.url, api.acme[0]) as http:
            first = await http.post("/workflows/audited/runs", json={"input": {}}, headers=headers)
        async with client(api.url, api.acme_other[0]) as http:
            again = await http.post("/workflows/audited/runs", json={"input": {}}, headers=headers)
            run_id = first.json()["id"]
            read = await http.get(f"/runs/{run_id}")  # a tenant key of the same tenant
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert again.json()["id"] == run_id
    # The key that created it, shown as operator actions' actors are to a tenant's keys.
    assert read.json()["createdBy"] == f"key:{api.acme[1]}"

    submissions = [line for line in access_lines(caplog.records) if line["method"] == "POST"]
    assert [(line["key_id"], line["run_id"], line["replayed"]) for line in submissions] == [
        (api.acme[1], run_id, False),
        (api.acme_other[1], run_id, True),
    ]
    reads = [line for line in access_lines(caplog.records) if line["method"] == "GET"]
    assert all("run_id" not in line for line in reads), "only a submission names a run"
    assert {line["client"] for line in access_lines(caplog.records)} == {"127.0.0.1"}


async def test_the_client_address_is_the_peer_whatever_a_header_says(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused key is logged with the address it came from, so a burst of them can be
    alerted on; `X-Forwarded-For` is not believed (by default no proxy is trusted,
    tests/e2e/test_trusted_proxies.py)."""
    spoofed = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9"}
    with caplog.at_level(logging.INFO, logger="api.rest.access"):
        async with client(api.url, "sbk_wrong") as http:
            for _ in range(3):
                refused = await http.get("/runs", headers=spoofed)
                assert refused.status_code == 401
    lines = access_lines(caplog.records)
    assert [(line["status"], line["key_id"], line["client"]) for line in lines] == [
        (401, None, "127.0.0.1")
    ] * 3


async def test_the_audit_is_for_admin_keys_and_records_a_revocation(api: Api) -> None:
    async with client(api.url, api.acme[0]) as http:
        forbidden = await http.get("/audit")
    assert forbidden.status_code == 403, forbidden.text
    assert forbidden.json()["code"] == "forbidden"

    async with client(api.url, api.admin[0]) as http:
        created = await http.post("/keys", json={"tenant": "acme", "name": "ci"})
        key_id = created.json()["id"]
        revoked = await http.delete(f"/keys/{key_id}")
        assert (created.status_code, revoked.status_code) == (201, 200)
        listed = await http.get("/audit", params={"subjectKind": "api_key", "subjectId": key_id})
        assert listed.status_code == 200, listed.text
        events = listed.json()["items"]
        assert [(e["action"], e["actor"], e["subjectId"]) for e in events] == [
            ("key.revoked", f"key:{api.admin[1]}", key_id),
            ("key.created", f"key:{api.admin[1]}", key_id),
        ]
        assert events[0]["at"] == pytest.approx(revoked.json()["revokedAt"])

        # Paged like /runs: the cursor goes on under the same filter only.
        page = await http.get("/audit", params={"actor": f"key:{api.admin[1]}", "limit": 1})
        rest = await http.get(
            "/audit",
            params={"actor": f"key:{api.admin[1]}", "limit": 1, "cursor": page.json()["next"]},
        )
        assert [e["action"] for e in page.json()["items"] + rest.json()["items"]] == [
            "key.revoked",
            "key.created",
        ]
        other = await http.get("/audit", params={"cursor": page.json()["next"]})
        unknown = await http.get("/audit", params={"action": "key.deleted"})
        alone = await http.get("/audit", params={"subjectId": "acme"})
    assert (other.status_code, other.json()["code"]) == (422, "invalid_cursor")
    # An action outside the enum OpenAPI lists; an id without its kind, which it cannot say.
    assert (unknown.status_code, unknown.json()["code"]) == (422, "invalid_request")
    assert (alone.status_code, alone.json()["code"]) == (422, "invalid_filter")
    assert alone.json()["details"]["parameter"] == "subjectId"


async def test_admin_changes_over_rest_name_their_key(api: Api) -> None:
    actor = f"key:{api.admin[1]}"
    async with client(api.url, api.admin[0]) as http:
        changes = [
            await http.put("/tenants/acme/limits", json={"maxRuns": 5, "ratePerMinute": 100}),
            await http.put(
                "/destinations/https%3A%2F%2Fapi.example.com%3A443/caps", json={"maxConcurrency": 4}
            ),
            await http.delete("/destinations/https%3A%2F%2Fapi.example.com%3A443/caps"),
            await http.post("/workflows", json={**DOCUMENT, "description": "v2"}),
        ]
        assert [answer.status_code for answer in changes] == [200, 200, 200, 201]
        listed = (await http.get("/audit", params={"actor": actor})).json()["items"]
    assert [(e["action"], e["actor"]) for e in listed] == [
        ("workflow.published", actor),
        ("destination.caps_removed", actor),
        ("destination.caps_set", actor),
        ("tenant.quota_set", actor),
        ("tenant.rate_set", actor),
    ]


async def test_with_authentication_off_the_creator_is_demo(backend: Backend) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        await Operations(runtime).workflows.publish(DOCUMENT)
        app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=False)
        async with serving(app) as url, client(url) as http:
            submitted = await http.post("/workflows/audited/runs", json={"input": {}})
            read = await http.get(submitted.headers["Location"])
            schema = (await http.get("/openapi.json")).json()["components"]["schemas"]
    finally:
        await runtime.close()
    assert read.json()["createdBy"] == "demo"
    assert "createdBy" in schema["RunDetail"]["properties"]
