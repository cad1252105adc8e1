"""Tenants whose ids the older rule took (a space or a control character inside) stay usable
after the rule tightened, on both backends: they are read, limited, keyed, given secrets and
submitted for; a new tenant cannot get such an id; and ids neither rule takes are refused
everywhere with the one sentence of `schemas.tenant_ids`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet

from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.keys import ApiKeyRecord
from schemas.errors import InvalidRequest
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

RULE = "a tenant id is 1 to 200 characters, without spaces or control characters"
VALUE = "tok_3bX9-value"


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend, secret_keys=Fernet.generate_key().decode()))
    yield runtime
    await runtime.close()


@pytest.fixture
async def ops(runtime: Runtime) -> Operations:
    ops = Operations(runtime)
    await ops.workflows.publish(single("older-ids", "http://127.0.0.1:9/never"))
    return ops


def older(kind: str) -> str:
    """An id the older rule took and today's refuses, unique to the test (Redis is shared)."""
    inside = {"space": " ", "newline": "\n", "zero-width": "\u200b"}[kind]
    return f"ac{inside}me-{uuid.uuid4().hex[:8]}"


async def keyed_before(runtime: Runtime, tenant: str) -> None:
    """The tenant as a release before the rule tightened left it: a key stored for it."""
    await runtime.store.create_api_key(
        ApiKeyRecord(uuid.uuid4().hex[:12], uuid.uuid4().hex, None, tenant, 0.0, None, None)
    )


@pytest.mark.parametrize("kind", ["space", "newline", "zero-width"])
async def test_an_existing_tenant_with_an_older_id_is_still_served(
    ops: Operations, runtime: Runtime, kind: str
) -> None:
    tenant = older(kind)
    await keyed_before(runtime, tenant)
    assert (await ops.settings.tenant(tenant)).tenant_id == tenant
    assert (await ops.settings.set_tenant_rate(tenant, 5)).per_minute == 5
    assert (await ops.settings.set_quota(tenant, 3)).max_runs == 3
    assert (await ops.keys.create(tenant=tenant)).tenant == tenant
    assert (await ops.secrets.set(tenant, "CRM_TOKEN", VALUE, actor="cli")).tenant == tenant
    assert [s.tenant for s in (await ops.secrets.list(tenant)).items] == [tenant]
    run = (await ops.runs.submit("older-ids", {}, tenant_id=tenant)).run
    assert run.tenant_id == tenant
    await ops.settings.reset_tenant_rate(tenant)
    assert await ops.settings.reset_quota(tenant)
    await ops.secrets.delete(tenant, "CRM_TOKEN")


async def test_a_tenant_known_only_by_its_limits_is_existing_too(ops: Operations) -> None:
    tenant = older("space")
    await ops.runtime.store.set_quota(tenant, 2)  # a quota row left from before
    assert (await ops.settings.set_tenant_rate(tenant, 4)).per_minute == 4
    assert (await ops.keys.create(tenant=tenant)).tenant == tenant
    await ops.settings.reset_tenant_rate(tenant)


CREATES: dict[str, Callable[[Operations, str], Awaitable[Any]]] = {
    "keys create": lambda ops, t: ops.keys.create(tenant=t),
    "set-rate": lambda ops, t: ops.settings.set_tenant_rate(t, 5),
    "set-quota": lambda ops, t: ops.settings.set_quota(t, 5),
    "submit": lambda ops, t: ops.runs.submit("older-ids", {}, tenant_id=t),
}


@pytest.mark.parametrize("kind", ["space", "newline"])
async def test_a_new_tenant_cannot_get_an_older_id(
    ops: Operations, runtime: Runtime, kind: str
) -> None:
    tenant = older(kind)
    for action, create in CREATES.items():
        with pytest.raises(InvalidRequest) as refused:
            await create(ops, tenant)
        assert RULE in refused.value.message, (action, refused.value.message)
        assert "\n" not in refused.value.message  # one line: the id is quoted with repr
    assert tenant not in await runtime.store.tenants_with_runs_or_keys()
    assert await runtime.store.get_quota(tenant) is None
    assert await runtime.store.get_tenant_rate(tenant) is None
    # Reading settings names no new tenant: any id the older rule took has the defaults.
    assert (await ops.settings.tenant(tenant)).quota is None


READS: dict[str, Callable[[Operations, str], Awaitable[Any]]] = {
    "show": lambda ops, t: ops.settings.tenant(t),
    "reset-rate": lambda ops, t: ops.settings.reset_tenant_rate(t),
    "reset-quota": lambda ops, t: ops.settings.reset_quota(t),
    "secrets set": lambda ops, t: ops.secrets.set(t, "CRM_TOKEN", VALUE, actor="cli"),
    "secrets list": lambda ops, t: ops.secrets.list(t),
}


@pytest.mark.parametrize("tenant", [" acme", "acme\n", "", "t" * 201])
async def test_an_id_neither_rule_took_is_refused_everywhere(ops: Operations, tenant: str) -> None:
    for action, act in {**CREATES, **READS}.items():
        with pytest.raises(InvalidRequest) as refused:
            await act(ops, tenant)
        assert RULE in refused.value.message, (action, refused.value.message)
