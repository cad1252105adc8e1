"""API keys over real HTTP (uvicorn on loopback), on both backends: the `/keys` routes, and who
gets in: 401 without a key or with an unknown, revoked or expired one; 403 for a tenant key on
an admin route; the caller a route receives (tenant scope); authentication off."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from subprocess import PIPE

import pytest
from fastapi import APIRouter

from api.rest import CallerDep, borrowed_runtime, create_app
from api.rest.app import DEFAULT_ROUTERS
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.clock import FakeClock
from tests.conftest import Backend
from tests.e2e.rest_harness import SCHEMABRIDGE, access_lines, client, serving
from tests.integration.engine_harness import settings_for

whoami = APIRouter()


@whoami.get("/whoami")
async def _whoami(caller: CallerDep) -> dict[str, object]:
    # A route as the run routes will be written: it acts for the caller's tenant scope.
    return {"keyId": caller.key_id, "tenant": caller.tenant, "admin": caller.admin}


@dataclass
class Api:
    url: str
    ops: Operations
    clock: FakeClock
    admin_key: str


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend), clock=FakeClock())
    yield runtime
    await runtime.close()


async def _serve(runtime: Runtime, *, auth: bool) -> AsyncIterator[Api]:
    app = create_app(
        runtime.settings,
        runtime_factory=borrowed_runtime(runtime),
        auth=auth,
        routers=(*DEFAULT_ROUTERS, whoami),
    )
    ops = Operations(runtime)
    admin = await ops.keys.create(admin=True, name="test admin")
    assert isinstance(runtime.clock, FakeClock)
    async with serving(app) as url:
        yield Api(url, ops, runtime.clock, admin.key)


@pytest.fixture
async def api(runtime: Runtime) -> AsyncIterator[Api]:
    async for served in _serve(runtime, auth=True):
        yield served


async def test_admin_creates_lists_and_revokes_keys(api: Api) -> None:
    api.clock.advance(1)  # listed oldest first: the admin key, then this one
    async with client(api.url, api.admin_key) as http:
        created = await http.post(
            "/keys", json={"tenantId": "acme", "name": "acme prod", "expiresInDays": 30}
        )
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["key"].startswith("sbk_")
        assert "tenant" not in body  # the answer says `tenantId` only
        assert (body["role"], body["tenantId"], body["name"], body["state"]) == (
            "tenant",
            "acme",
            "acme prod",
            "live",
        )
        assert body["expiresAt"] == pytest.approx(body["createdAt"] + 30 * 86_400)

        listed = await http.get("/keys")
        assert listed.status_code == 200
        items = listed.json()["items"]
        assert [item["name"] for item in items] == ["test admin", "acme prod"]
        assert all("key" not in item for item in items)
        assert body["key"] not in listed.text

        revoked = await http.delete(f"/keys/{body['id']}")
        assert revoked.status_code == 200
        assert revoked.json()["state"] == "revoked"
        assert revoked.json()["revokedAt"] is not None
        assert revoked.json()["changed"] is True
        again = await http.delete(f"/keys/{body['id']}")
        assert again.status_code == 200  # nothing to do: 200, as a cancel of a cancelled run
        assert again.json()["revokedAt"] == revoked.json()["revokedAt"]
        assert again.json()["changed"] is False
        assert again.json()["revokedBy"] == revoked.json()["revokedBy"] is not None
        assert "was already revoked at" in again.json()["message"]


async def test_admin_key_creation_refusals(api: Api) -> None:
    async with client(api.url, api.admin_key) as http:
        both = await http.post("/keys", json={"tenantId": "acme", "admin": True})
        neither = await http.post("/keys", json={})
        # `tenant`, the old name of `tenantId`, is still taken (a deprecated alias)
        renamed = await http.post("/keys", json={"tenant": "acme", "name": "old client"})
        conflict = await http.post("/keys", json={"tenant": "acme", "tenantId": "globex"})
        bad_days = await http.post("/keys", json={"admin": True, "expiresInDays": -3})
        unknown_field = await http.post("/keys", json={"admin": True, "role": "root"})
        missing = await http.delete("/keys/000000000000")
        listed = await http.get("/keys")
    assert renamed.status_code == 201 and renamed.json()["tenantId"] == "acme"
    assert conflict.status_code == 422 and conflict.json()["code"] == "invalid_request"
    assert "give only `tenantId`" in conflict.json()["message"]
    for refused in (both, neither, bad_days):
        assert refused.status_code == 422
        assert refused.json()["code"] == "invalid_key"
    assert bad_days.json()["details"]["problems"][0]["pointer"] == "/expiresInDays"
    assert bad_days.json()["message"].startswith(
        "a key expires after more than 0 and at most 36500 days (or never, when none is given)"
    ), bad_days.json()["message"]
    assert unknown_field.status_code == 422
    assert unknown_field.json()["code"] == "invalid_request"
    assert unknown_field.json()["details"]["problems"][0]["pointer"] == "/role"
    assert missing.status_code == 404
    assert missing.json()["code"] == "key_not_found"
    # A REST client is pointed to the route that lists the ids, not only to the CLI.
    assert "GET /keys (`schemabridge keys list`) shows the keys' ids" in missing.json()["message"]
    assert len(listed.json()["items"]) == 2, "the refused requests created nothing"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer sbk_unknown0123456789"},
        {"Authorization": "Bearer not-even-a-key"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"X-API-Key": "sbk_unknown0123456789"},
        {"Authorization": "Bearer"},
    ],
)
async def test_no_key_or_an_unknown_key_is_401(api: Api, headers: dict[str, str]) -> None:
    async with client(api.url) as http:
        for method, path in (("GET", "/keys"), ("POST", "/keys"), ("GET", "/whoami")):
            answer = await http.request(method, path, headers=headers, json={"admin": True})
            assert answer.status_code == 401, (method, path)
            assert answer.json()["code"] == "unauthorized"
            assert answer.headers["www-authenticate"] == "Bearer"
    assert len((await api.ops.keys.list()).items) == 1, "no key was created"


@pytest.mark.parametrize(
    ("authorization", "says"),
    [
        (None, "an API key is required: send 'Authorization: Bearer <key>'"),
        ("{key}", "the Authorization header has no scheme: send 'Authorization: Bearer <key>'"),
        ("Token {key}", "the Authorization header uses the 'Token' scheme: send 'Authoriz"),
        ("Basic dXNlcjpwYXNz", "the Authorization header uses the 'Basic' scheme"),
        ("Bearer", "names the Bearer scheme but no key after it"),
    ],
)
async def test_a_key_sent_without_the_bearer_scheme_is_named(
    api: Api, authorization: str | None, says: str
) -> None:
    """The usual mistake, a key in `Authorization` without "Bearer", is said as such (the
    header's value never repeated: it is the key), on a route with a body as without."""
    headers = (
        {} if authorization is None else {"Authorization": authorization.format(key=api.admin_key)}
    )
    async with client(api.url) as http:
        for method, path in (("GET", "/keys"), ("POST", "/keys")):
            answer = await http.request(method, path, headers=headers, json={"admin": True})
            assert answer.status_code == 401, (method, path)
            assert says in answer.json()["message"], answer.json()
            assert api.admin_key not in answer.text
    assert len((await api.ops.keys.list()).items) == 1, "no key was created"


async def test_a_key_sent_in_x_api_key_with_the_bearer_scheme_is_named(api: Api) -> None:
    """`X-API-Key: Bearer <key>`, the two headers' forms mixed, was "the API key is unknown,
    revoked or expired" of a live key: it is said as the mistake it is, the key not repeated."""
    async with client(api.url) as http:
        for method, path in (("GET", "/keys"), ("POST", "/keys")):
            headers = {"X-API-Key": f"Bearer {api.admin_key}"}
            answer = await http.request(method, path, headers=headers, json={"admin": True})
            assert answer.status_code == 401, (method, path)
            assert answer.json()["message"] == (
                "the X-API-Key header takes the key alone, without 'Bearer': send "
                "'X-API-Key: <key>' (or 'Authorization: Bearer <key>')"
            )
            assert api.admin_key not in answer.text
    assert len((await api.ops.keys.list()).items) == 1, "no key was created"


async def test_both_headers_are_accepted(api: Api) -> None:
    async with client(api.url) as http:
        bearer = await http.get("/keys", headers={"Authorization": f"Bearer {api.admin_key}"})
        header = await http.get("/keys", headers={"X-API-Key": api.admin_key})
        # Both headers with the same key are one key.
        same = await http.get(
            "/keys",
            headers={"Authorization": f"Bearer {api.admin_key}", "X-API-Key": api.admin_key},
        )
    assert [bearer.status_code, header.status_code, same.status_code] == [200, 200, 200]


async def test_two_different_keys_are_refused_whichever_is_live(api: Api) -> None:
    """Acting as either key could act as a caller the client did not mean (a proxy adding its
    own header, a client configured twice): 401 naming the two headers, with a body or
    without, and the key itself never repeated."""
    tenant = await api.ops.keys.create(tenant="acme", name="acme")
    pairs = [
        (api.admin_key, "sbk_wrong"),
        ("sbk_wrong", api.admin_key),
        (tenant.key, api.admin_key),
    ]
    async with client(api.url) as http:
        for bearer, header in pairs:
            headers = {"Authorization": f"Bearer {bearer}", "X-API-Key": header}
            for answer in (
                await http.get("/runs", headers=headers),
                await http.post("/workflows/validate", headers=headers, json={}),
            ):
                assert answer.status_code == 401, answer.text
                assert answer.json()["code"] == "unauthorized"
                assert "two different keys" in answer.json()["message"]
                assert api.admin_key not in answer.text and tenant.key not in answer.text


async def test_a_key_header_repeated_with_two_keys_is_refused(api: Api) -> None:
    """`Authorization` (or `X-API-Key`) sent twice with two keys used to act as the first,
    silently, where the two headers with two keys are refused: a tenant key first and an
    admin key after it (a proxy appending its own) got the tenant's answer. Now both are a
    401 naming the header, with a body or without; the same key twice is still one key."""
    tenant = await api.ops.keys.create(tenant="acme", name="acme")
    repeated = [
        [("Authorization", f"Bearer {tenant.key}"), ("Authorization", f"Bearer {api.admin_key}")],
        [("Authorization", f"Bearer {api.admin_key}"), ("Authorization", "Basic dXNlcjpwdw==")],
        [("X-API-Key", tenant.key), ("X-API-Key", api.admin_key)],
    ]
    async with client(api.url) as http:
        for headers in repeated:
            header = headers[0][0]
            for answer in (
                await http.get("/whoami", headers=headers),
                await http.post("/workflows/validate", headers=headers, json={}),
            ):
                assert answer.status_code == 401, (headers, answer.text)
                assert answer.json()["code"] == "unauthorized"
                assert f"sends the {header} header more than once" in answer.json()["message"]
                assert api.admin_key not in answer.text and tenant.key not in answer.text
        twice = [("Authorization", f"Bearer {tenant.key}")] * 2
        same = await http.get("/whoami", headers=twice)
    assert same.status_code == 200, same.text
    assert same.json()["tenant"] == "acme"


async def test_revoked_key_is_refused_on_the_next_request(api: Api) -> None:
    victim = await api.ops.keys.create(admin=True, name="victim")
    async with client(api.url, victim.key) as http:
        assert (await http.get("/keys")).status_code == 200
        async with client(api.url, api.admin_key) as admin:
            assert (await admin.delete(f"/keys/{victim.id}")).status_code == 200
        refused = await http.get("/keys")
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthorized"


async def test_expired_key_is_refused(api: Api) -> None:
    temporary = await api.ops.keys.create(tenant="acme", expires_in_days=1)
    async with client(api.url, temporary.key) as http:
        assert (await http.get("/whoami")).status_code == 200
        api.clock.advance(86_400)
        refused = await http.get("/whoami")
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthorized"


async def test_tenant_key_is_forbidden_on_admin_routes(api: Api) -> None:
    tenant = await api.ops.keys.create(tenant="acme")
    async with client(api.url, tenant.key) as http:
        answers = [
            await http.get("/keys"),
            await http.post("/keys", json={"admin": True}),
            await http.delete(f"/keys/{tenant.id}"),
            await http.get("/metrics"),
        ]
    for answer in answers:
        assert answer.status_code == 403
        assert answer.json()["code"] == "forbidden"
    keys = (await api.ops.keys.list()).items
    assert len(keys) == 2 and all(k.state == "live" for k in keys), "nothing changed"


async def test_routes_receive_the_callers_tenant_scope(api: Api) -> None:
    tenant = await api.ops.keys.create(tenant="acme")
    async with client(api.url, tenant.key) as http:
        as_tenant = (await http.get("/whoami")).json()
    async with client(api.url, api.admin_key) as http:
        as_admin = (await http.get("/whoami")).json()
    assert as_tenant == {"keyId": tenant.id, "tenant": "acme", "admin": False}
    assert as_admin["tenant"] is None and as_admin["admin"] is True


async def test_access_log_names_the_key(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    admin_id = (await api.ops.keys.list()).items[0].id
    with caplog.at_level(logging.INFO, logger="api.rest.access"):
        async with client(api.url, api.admin_key) as http:
            await http.get("/keys")
        async with client(api.url) as http:
            await http.get("/keys")
    lines = access_lines(caplog.records)
    assert [(line["route"], line["status"], line["key_id"]) for line in lines] == [
        ("/keys", 200, admin_id),
        ("/keys", 401, None),
    ]
    for line in lines:
        assert set(line) == {
            "ts",
            "method",
            "route",
            "path",
            "status",
            "duration_ms",
            "key_id",
            "client",
        }
        assert line["method"] == "GET" and line["duration_ms"] >= 0
        assert line["client"] == "127.0.0.1"


@pytest.fixture
async def open_api(runtime: Runtime) -> AsyncIterator[Api]:
    async for served in _serve(runtime, auth=False):
        yield served


async def test_with_auth_off_every_request_is_the_demo_admin(open_api: Api) -> None:
    async with client(open_api.url) as http:
        whoami_ = (await http.get("/whoami")).json()
        created = await http.post("/keys", json={"tenant": "acme"})
        # A key presented anyway changes nothing.
        with_key = await http.get("/whoami", headers={"X-API-Key": "sbk_whatever"})
    assert whoami_ == {"keyId": "demo", "tenant": None, "admin": True}
    assert created.status_code == 201
    assert with_key.json()["keyId"] == "demo"


async def test_unreachable_database_is_503_not_401() -> None:
    # The key lookup cannot run: that is "try again", never "your key is wrong".
    settings = settings_for(
        Backend("down", "postgresql+asyncpg://postgres@127.0.0.1:1/none", None),
        health_timeout_s=1.0,
    )
    runtime = await Runtime.open(settings, migrate=False)
    try:
        app = create_app(settings, runtime_factory=borrowed_runtime(runtime))
        async with serving(app) as url, client(url, "sbk_any0123456789") as http:
            answer = await http.get("/keys")
    finally:
        await runtime.close()
    assert answer.status_code == 503
    assert answer.json()["code"] == "store_unavailable"


async def test_revocation_holds_at_once_on_another_api_process(backend: Backend, api: Api) -> None:
    # A second API on its own runtime (as another process would be) over the same database.
    other_runtime = await Runtime.open(settings_for(backend), migrate=False)
    try:
        other = create_app(other_runtime.settings, runtime_factory=borrowed_runtime(other_runtime))
        victim = await api.ops.keys.create(admin=True, name="victim")
        async with serving(other) as other_url, client(other_url, victim.key) as http:
            assert (await http.get("/keys")).status_code == 200
            async with client(api.url, api.admin_key) as first:
                assert (await first.delete(f"/keys/{victim.id}")).status_code == 200
            refused = await http.get("/keys")
    finally:
        await other_runtime.close()
    assert refused.status_code == 401


async def test_a_key_reads_who_it_is(api: Api) -> None:
    tenant = await api.ops.keys.create(tenant="acme", name="acme ci")
    async with client(api.url, tenant.key) as http:
        answer = await http.get("/keys/current")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "id": tenant.id,
        "name": "acme ci",
        "role": "tenant",
        "tenantId": "acme",
        "authentication": True,
    }
    async with client(api.url, api.admin_key) as http:
        admin = (await http.get("/keys/current")).json()
    assert (admin["role"], admin["tenantId"], admin["name"]) == ("admin", None, "test admin")
    async with client(api.url, None) as http:
        refused = await http.get("/keys/current")
    assert (refused.status_code, refused.json()["code"]) == (401, "unauthorized")
    await api.ops.keys.revoke(tenant.id, actor="test")
    async with client(api.url, tenant.key) as http:
        assert (await http.get("/keys/current")).status_code == 401


async def test_with_authentication_off_the_key_is_demo(runtime: Runtime) -> None:
    async for served in _serve(runtime, auth=False):
        async with client(served.url, None) as http:
            answer = await http.get("/keys/current")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "id": "demo",
            "name": None,
            "role": "admin",
            "tenantId": None,
            "authentication": False,
        }
        # `whoami` says so, and that a key given is not checked (served in this event loop:
        # the command runs as a subprocess awaited here).
        env = {**os.environ, "SCHEMABRIDGE_API_URL": served.url, "SCHEMABRIDGE_API_KEY": "sbk_x"}
        process = await asyncio.create_subprocess_exec(
            SCHEMABRIDGE, "whoami", env=env, stdout=PIPE, stderr=PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
        said = out.decode().strip()
        assert said == (
            f"authentication is off at {served.url}: every request acts as the admin demo "
            "(the key given is not checked)"
        )
