"""Where a tenant can come into being (an API key, a run, a rate limit or quota), its id must
meet today's rule (`schemas.tenant_ids`); an id the older rule took (spaces or control
characters inside) is still accepted there for a tenant that exists already, so a tenant
created before the rule tightened can still get keys, runs and limits. Nothing renames ids:
the store keeps what it has."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.tenant_ids import is_tenant_id, is_tenant_ref

if TYPE_CHECKING:
    from engine.store.settings_store import OperatorSettingsStore


async def may_name_tenant(store: OperatorSettingsStore, tenant_id: str) -> bool:
    """Whether a key, a run or a limit may be made for `tenant_id`: a tenant id, or an older
    id of a tenant that has runs, keys, a rate limit or a quota. The store is read only for
    an older id (rare), not on every submission."""
    if is_tenant_id(tenant_id):
        return True
    if not is_tenant_ref(tenant_id):
        return False
    if await store.get_quota(tenant_id) is not None:
        return True
    if await store.get_tenant_rate(tenant_id) is not None:
        return True
    return tenant_id in await store.tenants_with_runs_or_keys()
