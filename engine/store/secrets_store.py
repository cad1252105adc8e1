"""Secrets in the store: tokens written, listed, read for a step, deleted and re-encrypted.

The store sees only ciphertexts (Fernet tokens): encryption and decryption happen in the
caller (`engine.secret_cipher`), with keys the database never holds. Listing returns names and
metadata only, so nothing that lists secrets can read one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.secret_cipher import stored_key_id
from engine.store import audit
from engine.store.core import StoreCore
from engine.store.dialect import dialect_of
from engine.store.models import AuditAction, AuditSubject, Secret

secrets_table = Secret.__table__  # type: ignore[attr-defined]

KEY_HEAD_CHARS = 9
"""A stored token's head: its key id (8 hex digits) and the colon after it."""
ROTATE_BATCH = 500
"""Secrets re-encrypted per transaction by `rotate_secrets`."""


@dataclass(frozen=True)
class SecretRecord:
    """One stored secret, without its value or ciphertext."""

    tenant_id: str
    name: str
    created_at: float
    updated_at: float
    updated_by: str


def _record(row: Any) -> SecretRecord:
    return SecretRecord(
        tenant_id=row.tenant_id,
        name=row.name,
        created_at=row.created_at,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


_METADATA = (
    secrets_table.c.tenant_id,
    secrets_table.c.name,
    secrets_table.c.created_at,
    secrets_table.c.updated_at,
    secrets_table.c.updated_by,
)


def _key(tenant_id: str, name: str) -> Any:
    return and_(secrets_table.c.tenant_id == tenant_id, secrets_table.c.name == name)


async def _metadata(conn: AsyncConnection, tenant_id: str, name: str) -> SecretRecord | None:
    row = (await conn.execute(select(*_METADATA).where(_key(tenant_id, name)))).first()
    return None if row is None else _record(row)


class SecretStore(StoreCore):
    """The durable, encrypted secrets of every tenant."""

    async def put_secret(
        self, tenant_id: str, name: str, ciphertext: str, *, actor: str
    ) -> tuple[SecretRecord, bool]:
        """Store `ciphertext` as the tenant's secret `name`, replacing its value if it has one,
        with its audit event (`secret.set` by `actor`: `updated_by` keeps only the last
        setter, the audit every one). Returns the secret's metadata and whether it was
        created (False: replaced)."""
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            existed = await _metadata(conn, tenant_id, name) is not None
            statement = (
                dialect_of(conn)
                .insert(secrets_table)
                .values(
                    tenant_id=tenant_id,
                    name=name,
                    ciphertext=ciphertext,
                    created_at=now,
                    updated_at=now,
                    updated_by=actor,
                )
            )
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[secrets_table.c.tenant_id, secrets_table.c.name],
                    set_={"ciphertext": ciphertext, "updated_at": now, "updated_by": actor},
                )
            )
            record = await _metadata(conn, tenant_id, name)
            await audit.append(
                conn,
                at=now,
                actor=actor,
                action=AuditAction.SECRET_SET,
                subject=AuditSubject.SECRET,
                subject_id=audit.secret_subject(tenant_id, name),
                detail={"tenantId": tenant_id, "name": name, "created": not existed},
            )
        if record is None:  # the row was written in this transaction
            raise RuntimeError(f"secret {tenant_id}/{name} vanished while being written")
        return record, not existed

    async def list_secrets(self, tenant_id: str | None = None) -> list[SecretRecord]:
        """Every secret (of `tenant_id` when given), by tenant then name: metadata only."""
        query = select(*_METADATA).order_by(secrets_table.c.tenant_id, secrets_table.c.name)
        if tenant_id is not None:
            query = query.where(secrets_table.c.tenant_id == tenant_id)
        async with self._engines.read.connect() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def delete_secret(self, tenant_id: str, name: str, *, actor: str | None = None) -> bool:
        """Delete the tenant's secret `name`, leaving an audit event (`secret.deleted` by
        `actor`, with when it was created and last set, and by whom) that outlives it; False,
        and no event, when there was none."""
        async with self._engines.write.begin() as conn:
            statement = delete(secrets_table).where(_key(tenant_id, name)).returning(*_METADATA)
            row = (await conn.execute(statement)).first()
            if row is not None:
                await audit.append(
                    conn,
                    at=self._clock.now(),
                    actor=actor,
                    action=AuditAction.SECRET_DELETED,
                    subject=AuditSubject.SECRET,
                    subject_id=audit.secret_subject(tenant_id, name),
                    detail={
                        "tenantId": tenant_id,
                        "name": name,
                        "createdAt": row.created_at,
                        "updatedAt": row.updated_at,
                        "updatedBy": row.updated_by,
                    },
                )
        return row is not None

    async def read_secret_tokens(self, tenant_id: str, names: Collection[str]) -> dict[str, str]:
        """The ciphertexts of the tenant's secrets among `names` (missing names are absent)."""
        if not names:
            return {}
        query = select(secrets_table.c.name, secrets_table.c.ciphertext).where(
            secrets_table.c.tenant_id == tenant_id, secrets_table.c.name.in_(sorted(names))
        )
        async with self._engines.read.connect() as conn:
            return {row.name: row.ciphertext for row in (await conn.execute(query)).all()}

    async def secret_key_ids(self) -> dict[str | None, int]:
        """How many secrets each key id encrypts (None: tokens stored before ids were), read
        from the tokens' heads only (`<key id>:`, `engine.secret_cipher`)."""
        head = func.substr(secrets_table.c.ciphertext, 1, KEY_HEAD_CHARS)
        query = select(head.label("head"), func.count().label("n")).group_by(head)
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(query)).all()
        counts: dict[str | None, int] = {}
        for row in rows:
            found = stored_key_id(str(row.head))
            counts[found] = counts.get(found, 0) + int(row.n)
        return counts

    async def rotate_secrets(
        self, rotate: Callable[[str], str | None], *, actor: str | None, key_id: str
    ) -> tuple[int, list[tuple[str, str]]]:
        """Replace every ciphertext by `rotate(ciphertext)`, `ROTATE_BATCH` secrets per
        transaction. `rotate` returns None for a token it cannot read: that secret is left as
        it is and listed. A secret set again while the batch was being re-encrypted keeps its
        new value (the update only replaces the ciphertext that was read). Each secret
        re-encrypted is an audit event (`secret.rotated` by `actor`, under `key_id`) in its
        batch's transaction. Returns how many were re-encrypted and the (tenant, name) of
        those left."""
        rotated, unreadable = 0, list[tuple[str, str]]()
        after: tuple[str, str] | None = None
        while True:
            query = (
                select(secrets_table.c.tenant_id, secrets_table.c.name, secrets_table.c.ciphertext)
                .order_by(secrets_table.c.tenant_id, secrets_table.c.name)
                .limit(ROTATE_BATCH)
            )
            if after is not None:
                tenant, name = after
                query = query.where(
                    or_(
                        secrets_table.c.tenant_id > tenant,
                        and_(secrets_table.c.tenant_id == tenant, secrets_table.c.name > name),
                    )
                )
            async with self._engines.read.connect() as conn:
                rows = (await conn.execute(query)).all()
            if not rows:
                return rotated, unreadable
            async with self._engines.write.begin() as conn:
                for row in rows:
                    token = rotate(row.ciphertext)
                    if token is None:
                        unreadable.append((row.tenant_id, row.name))
                        continue
                    result = await conn.execute(
                        update(secrets_table)
                        .where(
                            _key(row.tenant_id, row.name),
                            secrets_table.c.ciphertext == row.ciphertext,
                        )
                        .values(ciphertext=token)
                    )
                    rotated += result.rowcount
                    if result.rowcount:
                        await audit.append(
                            conn,
                            at=self._clock.now(),
                            actor=actor,
                            action=AuditAction.SECRET_ROTATED,
                            subject=AuditSubject.SECRET,
                            subject_id=audit.secret_subject(row.tenant_id, row.name),
                            detail={"keyId": key_id},
                        )
            after = (rows[-1].tenant_id, rows[-1].name)
