"""Operator settings in the store: tenant run quotas, destination caps and tenant rate
limits (the durable copies; admission caches caps and rate limits in Redis). Part of
`engine.store` (called only from there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.dialect import dialect_of
from engine.store.models import ApiKey, DestinationCap, TenantQuota, TenantRateLimit

quotas = TenantQuota.__table__  # type: ignore[attr-defined]
caps = DestinationCap.__table__  # type: ignore[attr-defined]
rates = TenantRateLimit.__table__  # type: ignore[attr-defined]
keys = ApiKey.__table__  # type: ignore[attr-defined]

# A loose index scan: one seek on ix_run_tenant_created (tenant_id first) per tenant, so the
# cost grows with the number of tenants, not of runs (a plain DISTINCT reads every run's entry
# on both backends). The same SQL runs on SQLite and PostgreSQL.
_RUN_TENANTS = text(
    """
    WITH RECURSIVE tenants(id) AS (
        SELECT MIN(tenant_id) FROM run
        UNION ALL
        SELECT (SELECT MIN(tenant_id) FROM run WHERE tenant_id > tenants.id)
        FROM tenants WHERE tenants.id IS NOT NULL
    )
    SELECT id FROM tenants WHERE id IS NOT NULL
    """
)


async def tenants_with_runs_or_keys(conn: AsyncConnection) -> set[str]:
    """Every tenant id that has a run (any status, the engine's `system` too) or an API key."""
    found = {row.id for row in (await conn.execute(_RUN_TENANTS)).all()}
    keyed = select(keys.c.tenant_id).where(keys.c.tenant_id.is_not(None)).distinct()
    found.update(row.tenant_id for row in (await conn.execute(keyed)).all())
    return found


async def quota_left(conn: AsyncConnection, tenant_id: str) -> int | None:
    row = (
        await conn.execute(
            select(quotas.c.max_runs, quotas.c.used_runs).where(quotas.c.tenant_id == tenant_id)
        )
    ).first()
    return None if row is None else max(0, row.max_runs - row.used_runs)


async def set_quota(conn: AsyncConnection, tenant_id: str, max_runs: int) -> tuple[int, int]:
    """Set the tenant's quota, keeping its count of used runs; returns (max_runs, used_runs)."""
    statement = (
        dialect_of(conn).insert(quotas).values(tenant_id=tenant_id, max_runs=max_runs, used_runs=0)
    )
    row = (
        await conn.execute(
            statement.on_conflict_do_update(
                index_elements=["tenant_id"], set_={"max_runs": max_runs}
            ).returning(quotas.c.max_runs, quotas.c.used_runs)
        )
    ).one()
    return int(row.max_runs), int(row.used_runs)


async def read_quota(conn: AsyncConnection, tenant_id: str) -> tuple[int, int] | None:
    """(max_runs, used_runs) of the tenant's quota; None = unlimited."""
    row = (
        await conn.execute(
            select(quotas.c.max_runs, quotas.c.used_runs).where(quotas.c.tenant_id == tenant_id)
        )
    ).first()
    return None if row is None else (int(row.max_runs), int(row.used_runs))


async def list_quotas(conn: AsyncConnection) -> list[tuple[str, int, int]]:
    """(tenant id, max_runs, used_runs) of every quota, by tenant id."""
    rows = await conn.execute(
        select(quotas.c.tenant_id, quotas.c.max_runs, quotas.c.used_runs).order_by(
            quotas.c.tenant_id
        )
    )
    return [(r.tenant_id, int(r.max_runs), int(r.used_runs)) for r in rows.all()]


async def delete_quota(conn: AsyncConnection, tenant_id: str) -> bool:
    """Remove the tenant's quota (unlimited again, its count of used runs too); False when
    it had none."""
    result = await conn.execute(quotas.delete().where(quotas.c.tenant_id == tenant_id))
    return bool(result.rowcount)


CAP_COLUMNS = frozenset({"max_concurrency", "rate_per_second"})


async def change_caps(
    conn: AsyncConnection, destination: str, changes: Mapping[str, Any], now: float
) -> tuple[int, float | None] | None:
    """Set the cap columns in `changes` (`max_concurrency`, `rate_per_second`) and keep the
    others, in one statement: an upsert when `max_concurrency` is given (a new row's rate is
    `changes`' or none), else an UPDATE of the row there is. Two changes of different columns
    at once both survive (the database merges each into the row as it is when the statement
    runs; PostgreSQL's row lock and SQLite's write lock order them). Returns the caps as they
    now are, or None when only the rate was given and the destination has no row."""
    if not changes or not changes.keys() <= CAP_COLUMNS:
        raise ValueError(f"cap changes must be some of {sorted(CAP_COLUMNS)}, not {changes}")
    values = {**changes, "updated_at": now}
    returning = (caps.c.max_concurrency, caps.c.rate_per_second)
    if "max_concurrency" in changes:
        statement: Any = (
            dialect_of(conn)
            .insert(caps)
            .values({"destination": destination, "rate_per_second": None, **values})
            .on_conflict_do_update(index_elements=["destination"], set_=values)
        )
    else:
        statement = update(caps).where(caps.c.destination == destination).values(**values)
    row = (await conn.execute(statement.returning(*returning))).first()
    return None if row is None else (int(row.max_concurrency), row.rate_per_second)


async def read_caps(conn: AsyncConnection, destination: str) -> tuple[int, float | None] | None:
    row = (
        await conn.execute(
            select(caps.c.max_concurrency, caps.c.rate_per_second).where(
                caps.c.destination == destination
            )
        )
    ).first()
    return None if row is None else (row.max_concurrency, row.rate_per_second)


async def delete_caps(conn: AsyncConnection, destination: str) -> tuple[int, float | None] | None:
    """Remove the destination's caps; the caps it had, or None when it had none."""
    statement = (
        caps.delete()
        .where(caps.c.destination == destination)
        .returning(caps.c.max_concurrency, caps.c.rate_per_second)
    )
    row = (await conn.execute(statement)).first()
    return None if row is None else (int(row.max_concurrency), row.rate_per_second)


async def list_caps(conn: AsyncConnection) -> list[tuple[str, int, float | None]]:
    rows = await conn.execute(
        select(caps.c.destination, caps.c.max_concurrency, caps.c.rate_per_second).order_by(
            caps.c.destination
        )
    )
    return [(r.destination, r.max_concurrency, r.rate_per_second) for r in rows.all()]


async def change_tenant_rate(
    conn: AsyncConnection, tenant_id: str, per_minute: int | None, now: float
) -> None:
    """Set a tenant's rate limit; None removes it (the default applies again). Either way the
    tenant's row is locked until the transaction ends: one upsert sets the limit, and a
    removal upserts the row first (so there is a row to lock even when the tenant had none,
    and an uncommitted insert of it is waited for) and deletes it in the same transaction.
    Concurrent changes of one tenant are so ordered (PostgreSQL's row lock, SQLite's write
    lock) for as long as each transaction lasts."""
    values = {"per_minute": 1 if per_minute is None else per_minute, "updated_at": now}
    statement = dialect_of(conn).insert(rates).values(tenant_id=tenant_id, **values)
    await conn.execute(statement.on_conflict_do_update(index_elements=["tenant_id"], set_=values))
    if per_minute is None:
        await conn.execute(rates.delete().where(rates.c.tenant_id == tenant_id))


async def read_tenant_rate(conn: AsyncConnection, tenant_id: str) -> int | None:
    row = (
        await conn.execute(select(rates.c.per_minute).where(rates.c.tenant_id == tenant_id))
    ).first()
    return None if row is None else int(row.per_minute)


async def list_tenant_rates(conn: AsyncConnection) -> list[tuple[str, int]]:
    rows = await conn.execute(
        select(rates.c.tenant_id, rates.c.per_minute).order_by(rates.c.tenant_id)
    )
    return [(r.tenant_id, r.per_minute) for r in rows.all()]
