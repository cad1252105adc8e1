"""API keys through the operations layer, on both backends: create, list, revoke,
authenticate, and every refusal. Time is a `FakeClock`, so expiry needs no waiting."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest

from engine.operations import Operations
from engine.operations.keys import KEY_PREFIX, hash_secret
from engine.runtime import Runtime
from engine.store.keys import ApiKeyRecord
from schemas.clock import FakeClock, utc_moment
from schemas.errors import InvalidRequest, NotFound
from schemas.tenant_ids import SYSTEM_TENANT
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for

DAY_S = 86_400.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def ops(backend: Backend, clock: FakeClock) -> AsyncIterator[Operations]:
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    yield Operations(runtime)
    await runtime.close()


async def test_created_key_authenticates_as_its_tenant(ops: Operations, clock: FakeClock) -> None:
    created = await ops.keys.create(tenant="acme", name="acme prod")
    assert created.key.startswith(KEY_PREFIX)
    assert len(created.key) >= len(KEY_PREFIX) + 43  # 32 random bytes, base64url
    assert (created.role, created.tenant, created.name) == ("tenant", "acme", "acme prod")
    assert (created.created_at, created.expires_at, created.revoked_at) == (clock.now(), None, None)
    assert created.state == "live"

    caller = await ops.keys.authenticate(created.key)
    assert caller is not None
    assert (caller.id, caller.role, caller.tenant) == (created.id, "tenant", "acme")


async def test_admin_key_has_no_tenant(ops: Operations) -> None:
    created = await ops.keys.create(admin=True)
    caller = await ops.keys.authenticate(created.key)
    assert caller is not None
    assert (caller.role, caller.tenant, caller.name) == ("admin", None, None)


async def test_secret_is_stored_hashed_and_never_listed(ops: Operations) -> None:
    created = await ops.keys.create(tenant="acme")
    stored = await ops.runtime.store.find_api_key(hashlib.sha256(created.key.encode()).hexdigest())
    assert stored is not None and stored.id == created.id
    assert created.key not in repr(stored)
    listed = await ops.keys.list()
    assert [key.id for key in listed.items] == [created.id]
    assert "key" not in listed.model_dump(by_alias=True)["items"][0]
    assert created.key not in listed.model_dump_json()


async def test_each_key_is_different(ops: Operations) -> None:
    keys = [await ops.keys.create(tenant="acme") for _ in range(5)]
    assert len({k.key for k in keys}) == len({k.id for k in keys}) == 5


async def test_list_is_oldest_first_with_every_state(ops: Operations, clock: FakeClock) -> None:
    first = await ops.keys.create(admin=True, name="first")
    clock.advance(1)
    second = await ops.keys.create(tenant="acme", expires_in_days=1)
    clock.advance(1)
    third = await ops.keys.create(tenant="globex")
    await ops.keys.revoke(third.id)
    clock.advance(DAY_S)
    listed = await ops.keys.list()
    assert [(k.id, k.state) for k in listed.items] == [
        (first.id, "live"),
        (second.id, "expired"),
        (third.id, "revoked"),
    ]


async def test_revoked_key_stops_authenticating_at_once(ops: Operations, clock: FakeClock) -> None:
    created = await ops.keys.create(tenant="acme")
    assert await ops.keys.authenticate(created.key) is not None
    revoked = await ops.keys.revoke(created.id)
    assert (revoked.revoked_at, revoked.state) == (clock.now(), "revoked")
    assert await ops.keys.authenticate(created.key) is None


async def test_revoking_twice_keeps_the_first_time(ops: Operations, clock: FakeClock) -> None:
    created = await ops.keys.create(admin=True)
    first = await ops.keys.revoke(created.id, actor="key:first")
    assert (first.changed, first.revoked_by) == (True, "key:first")
    assert first.message == f"key {created.id} revoked"
    clock.advance(60)
    again = await ops.keys.revoke(created.id, actor="cli")
    assert again.revoked_at == first.revoked_at
    # Nothing to do, said as such: when, and by whom (the first revoker, not this caller).
    assert (again.changed, again.revoked_by) == (False, "key:first")
    when = utc_moment(first.revoked_at or 0)
    assert again.message == (
        f"key {created.id} was already revoked at {when} by key:first: nothing to do"
    )


async def test_revoking_twice_without_a_known_revoker_says_when_only(ops: Operations) -> None:
    created = await ops.keys.create(admin=True)
    await ops.keys.revoke(created.id)  # no actor recorded
    again = await ops.keys.revoke(created.id, actor="cli")
    assert (again.changed, again.revoked_by) == (False, None)
    assert again.message.endswith("Z: nothing to do") and " by " not in again.message


async def test_revoking_an_unknown_key_is_not_found(ops: Operations) -> None:
    with pytest.raises(NotFound) as refused:
        await ops.keys.revoke("0123456789ab")
    assert refused.value.code == "key_not_found"


async def test_revoking_a_short_or_misspelt_key_id_names_the_key_meant(
    ops: Operations,
) -> None:
    """The tour: `keys revoke 34682be7` (the start of an id, as run ids are given) and a
    typo of an id answered "no API key with id '…'" and nothing more. The refusal names the
    key meant, or the command that lists the ids."""
    created = await ops.keys.create(admin=True)
    with pytest.raises(NotFound) as short:
        await ops.keys.revoke(created.id[:8])
    assert short.value.message == (
        f"no API key with id {created.id[:8]!r}; did you mean {created.id!r}?"
    )
    assert short.value.details == {"meant": [created.id]}
    typo = created.id[:-1] + ("0" if created.id[-1] != "0" else "1")
    with pytest.raises(NotFound) as misspelt:
        await ops.keys.revoke(typo)
    assert f"did you mean {created.id!r}?" in misspelt.value.message
    with pytest.raises(NotFound) as unknown:
        await ops.keys.revoke("zzzz")
    assert unknown.value.message == (
        "no API key with id 'zzzz'; GET /keys (`schemabridge keys list`) shows the keys' ids"
    )
    assert (await ops.keys.list()).items[-1].revoked_at is None  # nothing was revoked


async def test_key_expires_at_its_time(ops: Operations, clock: FakeClock) -> None:
    created = await ops.keys.create(tenant="acme", expires_in_days=2)
    assert created.expires_at == clock.now() + 2 * DAY_S
    clock.advance(2 * DAY_S - 1)
    assert await ops.keys.authenticate(created.key) is not None
    clock.advance(1)
    assert await ops.keys.authenticate(created.key) is None


@pytest.mark.parametrize(
    "presented",
    [
        "",
        "sbk_",
        "sbk_unknown-but-well-formed-0123456789abcdefghijklmnopq",
        "not-a-key",
        "sbk_" + "x" * 1000,
    ],
)
async def test_unknown_secrets_do_not_authenticate(ops: Operations, presented: str) -> None:
    await ops.keys.create(admin=True)
    assert await ops.keys.authenticate(presented) is None


async def test_a_key_with_its_prefix_changed_does_not_authenticate(ops: Operations) -> None:
    created = await ops.keys.create(admin=True)
    assert (
        await ops.keys.authenticate(created.key[:-1] + ("A" if created.key[-1] != "A" else "B"))
        is None
    )
    assert await ops.keys.authenticate(created.key.upper()) is None


@pytest.mark.parametrize(
    ("request_", "pointer"),
    [
        ({}, "/tenantId"),
        ({"tenant": "acme", "admin": True}, "/tenantId"),
        ({"tenant": ""}, "/tenantId"),
        ({"tenant": " acme"}, "/tenantId"),
        ({"tenant": "t" * 201}, "/tenantId"),
        ({"tenant": "system"}, "/tenantId"),  # the engine's own runs' tenant
        ({"admin": True, "name": ""}, "/name"),
        ({"admin": True, "name": "n" * 201}, "/name"),
        ({"admin": True, "expires_in_days": 0}, "/expiresInDays"),
        ({"admin": True, "expires_in_days": -1}, "/expiresInDays"),
        ({"admin": True, "expires_in_days": float("nan")}, "/expiresInDays"),
        ({"admin": True, "expires_in_days": float("inf")}, "/expiresInDays"),
        ({"admin": True, "expires_in_days": 36_501}, "/expiresInDays"),
    ],
)
async def test_invalid_keys_are_refused_and_nothing_is_stored(
    ops: Operations, request_: dict[str, object], pointer: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await ops.keys.create(**request_)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_key"
    assert [p["pointer"] for p in refused.value.details["problems"]] == [pointer]
    assert (await ops.keys.list()).items == []


async def test_a_key_stored_for_the_engines_own_tenant_does_not_authenticate(
    ops: Operations, clock: FakeClock
) -> None:
    """A key for tenant `system` (made before the tenant was reserved, or written to the
    table by hand) would list every deployment's `gradual_deploy` run and cancel it, which
    aborts the deployment: an admin's action with a tenant key. It is refused like an unknown
    key, and the refusal of its creation says why."""
    secret = KEY_PREFIX + "s" * 43
    record = ApiKeyRecord(
        id="5y5735000000",
        token_hash=hash_secret(secret),
        name=None,
        tenant_id=SYSTEM_TENANT,
        created_at=clock.now(),
        expires_at=None,
        revoked_at=None,
    )
    await ops.runtime.store.create_api_key(record, actor=None)
    assert await ops.keys.authenticate(secret) is None
    with pytest.raises(InvalidRequest) as refused:
        await ops.keys.create(tenant=SYSTEM_TENANT)
    assert "reserved" in refused.value.message
