"""API keys in the store: create, list, find by the secret's hash, revoke.

The store never sees a secret: callers hash it first (`engine.operations.keys`). Whether a key
is usable (not revoked, not expired) is decided by the caller from the record, against its
clock, on every request; nothing here caches, so a revocation holds on every process at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import audit
from engine.store.core import StoreCore
from engine.store.models import ApiKey, AuditAction, AuditSubject

api_keys = ApiKey.__table__  # type: ignore[attr-defined]

KEY_BY_HASH = select(api_keys).where(api_keys.c.token_hash == bindparam("token_hash"))
"""The key of a secret's hash (parameter `token_hash`): what every authenticated request reads,
so it is built once."""


@dataclass(frozen=True)
class ApiKeyRecord:
    """One stored key (never its secret)."""

    id: str
    token_hash: str
    name: str | None
    tenant_id: str | None
    """None: an admin key."""
    created_at: float
    expires_at: float | None
    revoked_at: float | None


@dataclass(frozen=True)
class KeyRevocation:
    """What `revoke_api_key` did to a key."""

    record: ApiKeyRecord
    """The key as it is afterwards."""
    changed: bool
    """False: it was revoked already (nothing was written)."""
    revoked_by: str | None
    """The actor of its revocation (of the first one when it was revoked already); None when
    unknown (revoked without an actor)."""


def _record(row: Any) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row.id,
        token_hash=row.token_hash,
        name=row.name,
        tenant_id=row.tenant_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


def _described(record: ApiKeyRecord) -> dict[str, Any]:
    """What an audit event says of a key (never its hash)."""
    return {
        "name": record.name,
        "role": "admin" if record.tenant_id is None else "tenant",
        "tenantId": record.tenant_id,
        "expiresAt": record.expires_at,
    }


async def _by_id(conn: AsyncConnection, key_id: str) -> ApiKeyRecord | None:
    row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).first()
    return None if row is None else _record(row)


async def _revoker(conn: AsyncConnection, key_id: str) -> str | None:
    """Who revoked the key, as its audit event says (None: no actor was recorded)."""
    events = audit.audit_events
    query = (
        select(events.c.actor)
        .where(
            events.c.subject_kind == AuditSubject.API_KEY.value,
            events.c.subject_id == key_id,
            events.c.action == AuditAction.KEY_REVOKED.value,
        )
        .order_by(events.c.id.desc())
        .limit(1)
    )
    actor: str | None = (await conn.execute(query)).scalar()
    return actor


class KeyStore(StoreCore):
    """The durable API keys."""

    async def create_api_key(self, record: ApiKeyRecord, *, actor: str | None = None) -> None:
        """Insert `record`, and its audit event (`key.created` by `actor`). Ids and hashes
        are unique: a collision raises the database's IntegrityError (random ids and secrets
        make it practically impossible)."""
        async with self._engines.write.begin() as conn:
            await conn.execute(
                insert(api_keys).values(
                    id=record.id,
                    token_hash=record.token_hash,
                    name=record.name,
                    tenant_id=record.tenant_id,
                    created_at=record.created_at,
                    expires_at=record.expires_at,
                    revoked_at=record.revoked_at,
                )
            )
            await audit.append(
                conn,
                at=record.created_at,
                actor=actor,
                action=AuditAction.KEY_CREATED,
                subject=AuditSubject.API_KEY,
                subject_id=record.id,
                detail=_described(record),
            )

    async def list_api_keys(self) -> list[ApiKeyRecord]:
        """Every key, oldest first (revoked and expired ones included)."""
        query = select(api_keys).order_by(api_keys.c.created_at, api_keys.c.id)
        async with self._engines.read.connect() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def find_api_key(self, token_hash: str) -> ApiKeyRecord | None:
        """The key whose secret hashes to `token_hash` (revoked or expired ones included)."""
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(KEY_BY_HASH, {"token_hash": token_hash})).first()
        return None if row is None else _record(row)

    async def revoke_api_key(
        self, key_id: str, *, actor: str | None = None
    ) -> KeyRevocation | None:
        """Mark the key revoked now, unless it already is (the first revocation time stays),
        with its audit event (`key.revoked` by `actor`; none when it already was). Returns
        the key as it is afterwards and whether this call revoked it, or None when there is
        no such key."""
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            revoked = await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            record = await _by_id(conn, key_id)
            if record is None:
                return None
            if revoked.rowcount != 1:
                return KeyRevocation(record, False, await _revoker(conn, key_id))
            await audit.append(
                conn,
                at=now,
                actor=actor,
                action=AuditAction.KEY_REVOKED,
                subject=AuditSubject.API_KEY,
                subject_id=key_id,
                detail=_described(record),
            )
            return KeyRevocation(record, True, actor)
