"""Secrets through the operations layer, on both backends: set, list, delete, rotate, every
refusal, and what the store holds (a token, never the value)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from cryptography.fernet import Fernet

from engine.operations import Operations
from engine.runtime import Runtime
from engine.secret_cipher import MAKE_KEY, SecretCipher, SecretKeyError
from schemas.clock import FakeClock
from schemas.errors import InvalidRequest, NotFound
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for

VALUE = "tok_3bX9-ü+/=value"
KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()

Opener = Callable[[str | None], Coroutine[Any, Any, Operations]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def open_ops(backend: Backend, clock: FakeClock) -> AsyncIterator[Opener]:
    """Operations on the backend with the given SCHEMABRIDGE_SECRET_KEYS (None: no key)."""
    runtimes: list[Runtime] = []

    async def open_with(keys: str | None) -> Operations:
        runtime = await Runtime.open(settings_for(backend, secret_keys=keys), clock=clock)
        runtimes.append(runtime)
        return Operations(runtime)

    yield open_with
    for runtime in runtimes:
        await runtime.close()


async def test_set_list_replace_delete(open_ops: Opener, clock: FakeClock) -> None:
    ops = await open_ops(KEY_A)
    created = await ops.secrets.set("acme", "CRM_TOKEN", VALUE, actor="key:abc")
    assert (created.name, created.tenant, created.created) == ("CRM_TOKEN", "acme", True)
    assert (created.created_at, created.updated_at, created.updated_by) == (
        clock.now(),
        clock.now(),
        "key:abc",
    )
    await ops.secrets.set("globex", "CRM_TOKEN", "another-value", actor="cli")
    clock.advance(60)
    replaced = await ops.secrets.set("acme", "CRM_TOKEN", VALUE + "2", actor="cli")
    assert replaced.created is False
    assert (replaced.created_at, replaced.updated_at) == (created.created_at, clock.now())

    listed = await ops.secrets.list()
    assert [(s.tenant, s.name, s.updated_by) for s in listed.items] == [
        ("acme", "CRM_TOKEN", "cli"),
        ("globex", "CRM_TOKEN", "cli"),
    ]
    assert VALUE not in listed.model_dump_json()
    assert [s.tenant for s in (await ops.secrets.list("globex")).items] == ["globex"]

    deleted = await ops.secrets.delete("acme", "CRM_TOKEN")
    assert (deleted.tenant, deleted.name) == ("acme", "CRM_TOKEN")
    with pytest.raises(NotFound) as caught:
        await ops.secrets.delete("acme", "CRM_TOKEN")
    assert caught.value.code == "secret_not_found"
    assert [s.tenant for s in (await ops.secrets.list()).items] == ["globex"]


async def test_the_store_holds_a_token_never_the_value(open_ops: Opener) -> None:
    ops = await open_ops(KEY_A)
    await ops.secrets.set("acme", "CRM_TOKEN", VALUE, actor="cli")
    tokens = await ops.runtime.store.read_secret_tokens("acme", ["CRM_TOKEN", "NOPE"])
    assert list(tokens) == ["CRM_TOKEN"]
    assert VALUE not in tokens["CRM_TOKEN"]
    assert SecretCipher.from_setting(KEY_A).decrypt(tokens["CRM_TOKEN"]) == VALUE
    assert await ops.runtime.store.read_secret_tokens("globex", ["CRM_TOKEN"]) == {}


@pytest.mark.parametrize(
    ("tenant", "name", "value", "pointer"),
    [
        ("acme", "1TOKEN", VALUE, "/name"),
        ("acme", "crm-token", VALUE, "/name"),
        ("acme", "A" * 129, VALUE, "/name"),
        (" acme", "TOKEN", VALUE, "/tenantId"),
        ("", "TOKEN", VALUE, "/tenantId"),
        ("system", "TOKEN", VALUE, "/tenantId"),  # reserved: the engine's runs call nothing
        ("acme", "TOKEN", "short12", "/value"),
        ("acme", "TOKEN", "x" * (16 * 1024 + 1), "/value"),
        ("acme", "TOKEN", "lone \ud800 surrogate", "/value"),
        ("acme", "TOKEN", "LEAKME-1234\u0000x5678", "/value"),
    ],
)
async def test_invalid_secrets_are_refused_without_quoting_the_value(
    open_ops: Opener, tenant: str, name: str, value: str, pointer: str
) -> None:
    ops = await open_ops(KEY_A)
    with pytest.raises(InvalidRequest) as caught:
        await ops.secrets.set(tenant, name, value, actor="cli")
    assert caught.value.code == "invalid_secret"
    assert [p.pointer for p in caught.value.problems] == [pointer]
    assert value not in caught.value.message
    assert (await ops.secrets.list()).items == []


async def test_without_a_key_setting_and_rotating_say_how_to_make_one(open_ops: Opener) -> None:
    ops = await open_ops(None)
    for attempt in (
        ops.secrets.set("acme", "CRM_TOKEN", VALUE, actor="cli"),
        ops.secrets.rotate(),
    ):
        with pytest.raises(SecretKeyError) as caught:
            await attempt
        assert caught.value.code == "secret_key_missing"
        assert MAKE_KEY in caught.value.message
    # Listing and deleting need no key: a secret whose key was lost can still be removed.
    assert (await ops.secrets.list()).items == []
    with pytest.raises(NotFound):
        await ops.secrets.delete("acme", "CRM_TOKEN")


async def test_a_malformed_key_is_refused_by_listing_and_deleting_too(open_ops: Opener) -> None:
    """No key is a key that was lost (list and delete go on); a malformed one is a mistake in
    the settings, which the workers given it would fail on: said, before anything is shown."""
    stored = await open_ops(KEY_A)
    await stored.secrets.set("acme", "CRM_TOKEN", VALUE, actor="cli")
    ops = await open_ops(f"{KEY_A},not-a-key")
    for attempt in (ops.secrets.list(), ops.secrets.list("acme")):
        with pytest.raises(SecretKeyError) as caught:
            await attempt
        assert caught.value.code == "secret_key_invalid"
        assert "2nd key in SCHEMABRIDGE_SECRET_KEYS is not a Fernet key" in caught.value.message
        assert MAKE_KEY in caught.value.message and "not-a-key" not in caught.value.message
    with pytest.raises(SecretKeyError):
        await ops.secrets.delete("acme", "CRM_TOKEN")
    assert [s.name for s in (await stored.secrets.list()).items] == ["CRM_TOKEN"], "kept"


async def test_rotation_moves_every_secret_to_the_first_key(open_ops: Opener) -> None:
    old = await open_ops(KEY_A)
    for index in range(3):
        await old.secrets.set(f"tenant-{index}", "TOKEN", f"{VALUE}-{index}", actor="cli")
    stray_key = Fernet.generate_key().decode()
    stray = await open_ops(stray_key)
    await stray.secrets.set("zeta", "LOST", VALUE, actor="cli")

    both = await open_ops(f"{KEY_B},{KEY_A}")
    result = await both.secrets.rotate()
    assert result.rotated == 3
    assert [(ref.tenant, ref.name) for ref in result.unreadable] == [("zeta", "LOST")]

    new_only = SecretCipher.from_setting(KEY_B)
    for index in range(3):
        tokens = await both.runtime.store.read_secret_tokens(f"tenant-{index}", ["TOKEN"])
        assert new_only.decrypt(tokens["TOKEN"]) == f"{VALUE}-{index}"
    lost = await both.runtime.store.read_secret_tokens("zeta", ["LOST"])
    assert SecretCipher.from_setting(stray_key).decrypt(lost["LOST"]) == VALUE  # untouched


async def test_a_process_lacking_the_key_of_stored_secrets_is_told_which(
    open_ops: Opener,
) -> None:
    """`keys_missing`, what a worker warns with at start: the secrets encrypted with a key
    its list lacks, counted by the key ids the tokens carry (read from the store on both
    backends); nothing when it holds every one, or when there are no secrets."""
    from engine.operations.secrets import keys_missing
    from engine.secret_cipher import key_id

    writer = await open_ops(KEY_A)
    store = writer.runtime.store
    assert await keys_missing(store, SecretCipher.from_setting(KEY_B), "worker w") is None
    await writer.secrets.set("acme", "CRM_TOKEN", VALUE, actor="cli")
    await writer.secrets.set("globex", "CRM_TOKEN", VALUE, actor="cli")
    assert await store.secret_key_ids() == {key_id(KEY_A): 2}
    told = await keys_missing(store, SecretCipher.from_setting(KEY_B), "worker w")
    assert told is not None
    assert told.startswith(
        f"worker w: 2 secrets in the database are encrypted with key {key_id(KEY_A)}"
    )
    assert f"(it holds {key_id(KEY_B)})" in told
    unkeyed = await keys_missing(store, SecretCipher.from_setting(None), "worker w")
    assert unkeyed is not None and "(it holds none)" in unkeyed
    both = SecretCipher.from_setting(f"{KEY_B},{KEY_A}")
    assert await keys_missing(store, both, "worker w") is None
    rotated = await open_ops(KEY_B)  # a third secret, under the other key
    await rotated.secrets.set("initech", "CRM_TOKEN", VALUE, actor="cli")
    third = Fernet.generate_key().decode()
    lacking_both = await keys_missing(store, SecretCipher.from_setting(third), "worker w")
    named = ", ".join(sorted([key_id(KEY_A), key_id(KEY_B)]))
    assert lacking_both is not None
    assert lacking_both.startswith(
        f"worker w: 3 secrets in the database are encrypted with keys {named}, which"
    )
