"""Destinations, tenants and services over real HTTP (uvicorn on loopback), on both backends:
caps set and removed under a percent-encoded key and seen by admission, tenant limits set and
put back to the default with null, heartbeats; admin keys for the writes and lists, a tenant
key reading its own tenant only; bad input refused with a code."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest

from admission import DestinationCaps
from api.rest import borrowed_runtime, create_app
from engine.coordination import keys
from engine.coordination.heartbeat import Heartbeat, ServiceRole
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import slow_to_redis

DEFAULT_RATE = 10_000_000
"""The rate per minute `settings_for` gives tenants."""


@dataclass
class Api:
    url: str
    ops: Operations
    runtime: Runtime
    admin_key: str
    acme_key: str


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    admin = await ops.keys.create(admin=True)
    acme = await ops.keys.create(tenant="acme")
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, ops, runtime, admin.key, acme.key)
    finally:
        await runtime.close()


def caps_path(key: str) -> str:
    return f"/destinations/{quote(key, safe='')}/caps"


def breakers_path(key: str) -> str:
    return f"/destinations/{quote(key, safe='')}/breakers/reset"


async def open_breakers(api: Api, key: str, tenant: str, failures: int) -> None:
    """`failures` consecutive failed calls of `tenant` to `key` (5 open its tenant layer)."""
    for _ in range(failures):
        await (await api.runtime.admission.admit(key, tenant, wait_timeout_s=0)).failure()


async def test_an_admin_closes_a_destinations_open_breakers(api: Api) -> None:
    key = f"http://brk-{uuid.uuid4().hex[:8]}:8080"  # the embedded Redis is shared
    async with client(api.url, api.admin_key) as http:
        unknown = await http.post(breakers_path(key))
        assert unknown.status_code == 404 and unknown.json()["code"] == "destination_not_found"
        await open_breakers(api, key, "acme", 5)
        await open_breakers(api, key, "globex", 5)
        one = await http.post(breakers_path(key), params={"tenant": "acme"})
        assert one.status_code == 200, one.text
        assert one.json() == {
            "destination": key,
            "tenantId": "acme",
            "closed": [{"layer": "tenant", "tenantId": "acme", "was": "open"}],
            "stepsReleased": 0,
        }
        every = await http.post(breakers_path(key))
        assert every.json()["closed"] == [{"layer": "tenant", "tenantId": "globex", "was": "open"}]
        again = await http.post(breakers_path(key))
        assert again.status_code == 200 and again.json()["closed"] == []
        bad = await http.post(breakers_path(key), params={"tenant": " acme"})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_tenant", bad.text
    # Calls go again at once, for both tenants.
    for tenant in ("acme", "globex"):
        await (await api.runtime.admission.admit(key, tenant, wait_timeout_s=0)).success()


async def test_a_breaker_reset_for_a_misspelt_tenant_says_so(api: Api) -> None:
    """The tour: `reset-breaker KEY --tenant acm` answered "the tenant breaker of acm was
    closed already" (200, nothing closed), and the operator moved on while acme's breaker
    stayed open. A tenant no run, key or setting names is a 404 naming the close ones; a
    known tenant whose breaker is closed is still "closed already"."""
    key = f"http://brk-{uuid.uuid4().hex[:8]}:8080"
    await open_breakers(api, key, "acme", 5)
    async with client(api.url, api.admin_key) as http:
        typo = await http.post(breakers_path(key), params={"tenantId": "acm"})
        assert typo.status_code == 404, typo.text
        body = typo.json()
        assert body["code"] == "tenant_not_found", body
        assert "did you mean 'acme'?" in body["message"], body
        assert body["details"] == {"tenantId": "acm", "meant": ["acme"]}, body
        meant = await http.post(breakers_path(key), params={"tenantId": "acme"})
        assert meant.json()["closed"] == [{"layer": "tenant", "tenantId": "acme", "was": "open"}]
        again = await http.post(breakers_path(key), params={"tenantId": "acme"})
        assert again.status_code == 200 and again.json()["closed"] == [], again.text


async def test_caps_set_and_removed_under_an_encoded_key(api: Api) -> None:
    key = "http://billing:8080"
    async with client(api.url, api.admin_key) as http:
        put = await http.put(caps_path(key), json={"maxConcurrency": 3, "ratePerSecond": 2.5})
        assert put.status_code == 200, put.text
        assert put.json() == {"destination": key, "maxConcurrency": 3, "ratePerSecond": 2.5}
        caps = await api.runtime.admission.get_caps(key)
        assert caps is not None and caps.max_concurrency == 3
        listed = await http.get("/destinations")
        assert listed.status_code == 200
        (view,) = [d for d in listed.json()["items"] if d["destination"] == key]
        assert (view["cap"], view["capConfigured"], view["inFlight"]) == (3, True, 0)
        assert view["globalBreaker"]["state"] == "closed" and view["retryAllowed"] is True
        assert {"limit", "slots", "tenantBreakers", "retryTokens"} <= set(view)
        named = await http.put(caps_path("billing/eu"), json={"maxConcurrency": 1})
        assert named.status_code == 200 and named.json()["destination"] == "billing/eu"
        removed = await http.delete(caps_path(key))
        assert removed.json() == {"destination": key, "removed": True}
        assert await api.runtime.admission.get_caps(key) is None
        again = await http.delete(caps_path(key))
        assert again.status_code == 200 and again.json()["removed"] is False


async def test_bad_caps_are_refused_with_a_code(api: Api) -> None:
    async with client(api.url, api.admin_key) as http:
        for key, body, code in [
            ("http://bad-caps:8080/path", {"maxConcurrency": 1}, "invalid_destination"),
            ("HTTP://Bad-Caps:8080", {"maxConcurrency": 1}, "invalid_destination"),
            ("http://bad-caps:8080", {"maxConcurrency": 0}, "invalid_request"),
            ("http://bad-caps:8080", {"maxConcurrency": "many"}, "invalid_request"),
            ("http://bad-caps:8080", {"maxConcurrency": 1, "ratePerSecond": 0}, "invalid_request"),
            ("http://bad-caps:8080", {"maxConcurrency": 1, "burst": 2}, "invalid_request"),
        ]:
            answer = await http.put(caps_path(key), json=body)
            assert answer.status_code == 422, (key, body, answer.text)
            assert answer.json()["code"] == code, (key, body)
        suggestion = await http.put(caps_path("HTTP://Bad-Caps:8080"), json={"maxConcurrency": 1})
        assert "http://bad-caps:8080" in suggestion.json()["message"]
        malformed = await http.put(
            caps_path("erp"), content=b"{max", headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_json"
    for key in ("http://bad-caps:8080/path", "HTTP://Bad-Caps:8080", "http://bad-caps:8080"):
        assert await api.runtime.store.get_destination_caps(key) is None, key


async def test_a_patch_changes_only_the_caps_it_names(api: Api) -> None:
    key = "http://patched:8080"
    async with client(api.url, api.admin_key) as http:
        for body, caps in [
            ({"maxConcurrency": 4}, {"maxConcurrency": 4, "ratePerSecond": None}),
            ({"ratePerSecond": 2.5}, {"maxConcurrency": 4, "ratePerSecond": 2.5}),
            ({"maxConcurrency": 6}, {"maxConcurrency": 6, "ratePerSecond": 2.5}),
            ({"ratePerSecond": None}, {"maxConcurrency": 6, "ratePerSecond": None}),
        ]:
            answer = await http.patch(caps_path(key), json=body)
            assert answer.status_code == 200, (body, answer.text)
            assert answer.json() == {"destination": key, **caps}, body
        assert await api.runtime.admission.get_caps(key) == DestinationCaps(6, None)
        for target, body, code in [
            ("http://bare:8080", {"ratePerSecond": 1}, "caps_not_set"),
            (key, {}, "invalid_caps"),
            (key, {"maxConcurrency": None}, "invalid_caps"),
            (key, {"maxConcurrency": 0}, "invalid_request"),
            (key, {"ratePerSecond": 0}, "invalid_request"),
            ("http://bad-caps:8080/path", {"maxConcurrency": 1}, "invalid_destination"),
        ]:
            answer = await http.patch(caps_path(target), json=body)
            assert answer.status_code == 422, (target, body, answer.text)
            assert answer.json()["code"] == code, (target, body, answer.text)
    assert await api.runtime.store.get_destination_caps(key) == (6, None)
    assert await api.runtime.store.get_destination_caps("http://bare:8080") is None


async def test_tenant_limits_set_then_back_to_the_default(api: Api) -> None:
    async with client(api.url, api.admin_key) as http:
        fresh = await http.get("/tenants/acme")
        assert fresh.status_code == 200
        assert fresh.json()["rate"]["perMinute"] == DEFAULT_RATE
        assert fresh.json()["rate"]["configured"] is False and fresh.json()["quota"] is None
        both = await http.put("/tenants/acme/limits", json={"ratePerMinute": 60, "maxRuns": 10})
        assert both.status_code == 200, both.text
        assert both.json()["rate"]["perMinute"] == 60 and both.json()["rate"]["configured"]
        assert both.json()["quota"] == {"maxRuns": 10, "usedRuns": 0, "runsLeft": 10}
        only_quota = await http.put("/tenants/acme/limits", json={"maxRuns": None})
        assert only_quota.json()["quota"] is None
        assert only_quota.json()["rate"]["perMinute"] == 60, "a field left out is unchanged"
        back = await http.put("/tenants/acme/limits", json={"ratePerMinute": None})
        assert back.json()["rate"] == {**fresh.json()["rate"], "used": back.json()["rate"]["used"]}
        await http.put("/tenants/globex/limits", json={"maxRuns": 0})
        listed = await http.get("/tenants")
        assert "globex" in [t["tenantId"] for t in listed.json()["items"]]
        for body in ({"ratePerMinute": 0}, {"maxRuns": -1}, {"maxRuns": "x"}, {"cap": 1}):
            refused = await http.put("/tenants/acme/limits", json=body)
            assert refused.status_code == 422 and refused.json()["code"] == "invalid_request"
        spaced = await http.get(f"/tenants/{quote(' acme')}")
        assert spaced.status_code == 422 and spaced.json()["code"] == "invalid_tenant"
        # The engine's own tenant: no limit acts on its runs, so none is taken.
        for body in ({"ratePerMinute": 5}, {"maxRuns": 0}):
            reserved = await http.put("/tenants/system/limits", json=body)
            assert reserved.status_code == 422 and reserved.json()["code"] == "invalid_tenant"
            assert "reserved" in reserved.json()["message"], reserved.text
        listed = await http.get("/tenants")
        assert "system" not in [t["tenantId"] for t in listed.json()["items"]]


@pytest.mark.parametrize("tenant", [" acme", "acme ", "t" * 201])
async def test_an_id_no_tenant_can_have_is_refused_with_the_rule(api: Api, tenant: str) -> None:
    allowed = "1 to 200 characters, without spaces at either end or any '/'"
    async with client(api.url, api.admin_key) as http:
        path = f"/tenants/{quote(tenant, safe='')}"
        for refused in (
            await http.put(f"{path}/limits", json={"ratePerMinute": 10, "maxRuns": 5}),
            await http.put(f"{path}/limits", json={}),
            await http.get(path),
        ):
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "invalid_tenant"
            assert refused.json()["details"] == {"allowed": allowed}
            assert f"is not a tenant id: a tenant id is {allowed}" in refused.json()["message"]
        listed = (await http.get("/tenants")).json()["items"]
        assert tenant not in [t["tenantId"] for t in listed], "nothing was stored"
        # The same rule as a submission's tenantId: no run can be created for it either.
        submitted = await http.post("/workflows/anything/runs", json={"tenantId": tenant})
        assert submitted.status_code == 422, submitted.text
        assert submitted.json()["code"] in ("invalid_tenant", "invalid_request")


async def test_a_key_for_a_tenant_id_with_a_slash_is_refused(api: Api) -> None:
    """A new user's tour made a key for tenant 'team/a': its runs went through, and no route
    could then reach the tenant's settings (`/tenants/team/a/limits` is no route, whatever the
    encoding of its '/'). The key is refused with the rule."""
    async with client(api.url, api.admin_key) as http:
        refused = await http.post("/keys", json={"tenantId": "team/a"})
        submitted = await http.post("/workflows/anything/runs", json={"tenantId": "team/a"})
    assert refused.status_code == 422, refused.text
    assert "or any '/'" in refused.json()["message"]
    assert submitted.status_code == 422, submitted.text
    assert submitted.json()["code"] in ("invalid_tenant", "invalid_request")


async def test_a_tenant_key_reads_its_own_tenant_only(api: Api) -> None:
    async with client(api.url, api.acme_key) as http:
        own = await http.get("/tenants/acme")
        assert own.status_code == 200 and own.json()["tenantId"] == "acme"
        # Another tenant is refused as every route a tenant key may call refuses a tenant
        # it names that is not its own (`tenant_forbidden`, as GET /runs?tenantId=globex),
        # saying which one it may read; `forbidden` is an admin route's.
        other = await http.get("/tenants/globex")
        assert other.status_code == 403, other.text
        assert other.json()["code"] == "tenant_forbidden", other.text
        assert "/tenants/acme" in other.json()["message"]
        for method, path, body in [
            ("GET", "/tenants", None),
            ("PUT", "/tenants/acme/limits", {"maxRuns": 1000}),
            ("GET", "/destinations", None),
            ("PUT", caps_path("erp"), {"maxConcurrency": 1}),
            ("PATCH", caps_path("erp"), {"ratePerSecond": 1}),
            ("DELETE", caps_path("erp"), None),
            ("POST", breakers_path("erp"), None),
            ("GET", "/services", None),
        ]:
            answer = await http.request(method, path, json=body)
            assert answer.status_code == 403, (method, path)
            assert answer.json()["code"] == "forbidden", (method, path)
    async with client(api.url) as anonymous:
        for path in ("/tenants/acme", "/destinations", "/services"):
            answer = await anonymous.get(path)
            assert answer.status_code == 401 and answer.json()["code"] == "unauthorized"
    assert (await api.ops.settings.tenant("acme")).quota is None


async def test_services_show_heartbeats_up_and_down(api: Api) -> None:
    """Up with its role, its pid and its uptime since its process started (an hour before the
    heartbeat was made, say), and when; down once stopped, with what its last beat said. A
    beat written before beats said their role answers `role: null`."""
    started = api.runtime.clock.now() - 3600
    redis, clock = api.runtime.redis, api.runtime.clock
    role = ServiceRole.WORKER
    beat = Heartbeat("worker-rest-test", redis, clock, pid=4242, started_at=started, role=role)
    assert await beat.beat()
    older = {k: v for k, v in beat.payload().items() if k != "role"}
    await redis.set(keys.heartbeat("older-rest-test"), json.dumps(older), px=30_000)
    await redis.zadd(keys.SERVICES_SET, {"older-rest-test": clock.now()})
    async with client(api.url, api.admin_key) as http:
        up = await http.get("/services")
        (listed,) = [s for s in up.json()["items"] if s["name"] == "worker-rest-test"]
        assert (listed["up"], listed["role"], listed["pid"]) == (True, "worker", 4242)
        (old,) = [s for s in up.json()["items"] if s["name"] == "older-rest-test"]
        assert old["up"] is True and "role" in old and old["role"] is None
        assert listed["startedAt"] == started and 3600 <= listed["uptimeS"] < 3660
        await beat.stop()
        down = await http.get("/services")
    (gone,) = [s for s in down.json()["items"] if s["name"] == "worker-rest-test"]
    assert gone["up"] is False and gone["lastSeen"] == listed["lastSeen"]
    assert listed["host"] == socket.gethostname()
    assert (gone["pid"], gone["host"]) == (4242, listed["host"]), "down: its last beat's"
    assert gone["role"] == "worker"


ROUNDS = 20


async def test_concurrent_partial_cap_changes_all_survive(api: Api) -> None:
    """`destinations set-cap --max-concurrency N` and `set-cap --rate R` at once, 20 times:
    each change of one cap keeps the other's latest value, in the store and in Redis."""
    from api.cli.admin import _changed_caps
    from api.cli.client import ApiClient
    from api.cli.target import ApiTarget

    key = "http://race-caps:8080"
    async with ApiClient(ApiTarget(api.url, api.admin_key)) as client_:
        await _changed_caps(client_, key, 1, 1.0, False)
        for round_ in range(2, ROUNDS + 2):
            await asyncio.gather(
                _changed_caps(client_, key, round_, None, False),
                _changed_caps(client_, key, None, float(round_), False),
            )
            stored = await api.runtime.store.get_destination_caps(key)
            assert stored == (round_, float(round_)), (round_, stored)
            operative = await api.runtime.admission.get_caps(key)
            assert operative == DestinationCaps(round_, float(round_)), (round_, operative)


async def test_concurrent_limit_puts_leave_redis_as_the_store(
    api: Api, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `PUT /tenants/{id}/limits` of one tenant's rate at once through two API processes
    (two servers, one store and Redis), the first slow to reach Redis, 20 rounds: the second
    (a new rate or null) comes after it in the store, and Redis, what admission enforces,
    holds the second too."""
    slow = await Runtime.open(settings_for(backend))
    at_redis = slow_to_redis(slow, monkeypatch)
    app = create_app(slow.settings, runtime_factory=borrowed_runtime(slow), auth=True)
    path = "/tenants/race/limits"
    try:
        async with (
            serving(app) as slow_url,
            client(slow_url, api.admin_key) as first,
            client(api.url, api.admin_key) as second,
        ):

            async def after_the_first(rate: int | None) -> int:
                await at_redis.wait()
                return (await second.put(path, json={"ratePerMinute": rate})).status_code

            for round_ in range(20):
                at_redis.clear()
                rate = None if round_ % 3 == 2 else 1000 + round_
                answers = await asyncio.gather(
                    first.put(path, json={"ratePerMinute": 500 + round_}),
                    after_the_first(rate),
                )
                assert (answers[0].status_code, answers[1]) == (200, 200), answers[0].text
                assert await api.runtime.store.get_tenant_rate("race") == rate, round_
                _, operative = await api.runtime.admission.rate.usage("race")
                assert operative == (DEFAULT_RATE if rate is None else rate), round_
    finally:
        await slow.close()
