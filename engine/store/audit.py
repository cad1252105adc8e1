"""The audit trail: one append-only row per administrative change (docs/security.md, 'Audit').

`append` is called by the store's own writers inside the transaction of the change it
records, so an event exists exactly when its change committed (a change outside the store, a
breaker reset in Redis, is recorded just after it, `append_alone`), and it outlives what it is
about (a deleted secret, a revoked key). Nothing updates or deletes an event. `AuditStore`
reads them newest first, filtered by actor, action or subject, a keyset page at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.core import StoreCore
from engine.store.models import AuditAction, AuditEvent, AuditSubject

audit_events = AuditEvent.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AuditRecord:
    """One stored event."""

    id: int
    at: float
    actor: str | None
    action: str
    subject_kind: str
    subject_id: str
    detail: Any


@dataclass(frozen=True)
class AuditFilter:
    """Which events a page reads: each field set narrows it (exact matches, but for an actor
    named without `:`; the operations check them, `engine.operations.audit`)."""

    actor: str | None = None
    """An actor (`key:410577f5e3b5`, `cli:ana@ops-1`), or a kind of actor, named without `:`
    (`cli`, `key`, `deployment`), which matches itself and every actor of that kind."""
    action: str | None = None
    subject_kind: str | None = None
    subject_id: str | None = None
    """Only with `subject_kind` (the index is (kind, id))."""


async def append(
    conn: AsyncConnection,
    *,
    at: float,
    actor: str | None,
    action: AuditAction,
    subject: AuditSubject,
    subject_id: str,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Record one change in the caller's transaction (it commits or rolls back with it)."""
    await conn.execute(
        insert(audit_events).values(
            at=at,
            actor=actor,
            action=action.value,
            subject_kind=subject.value,
            subject_id=subject_id,
            detail=None if detail is None else dict(detail),
        )
    )


def secret_subject(tenant_id: str, name: str) -> str:
    """A secret's `subject_id`: `<tenant>/<NAME>` (a secret's name holds no `/`, so the last
    one splits it)."""
    return f"{tenant_id}/{name}"


class AuditStore(StoreCore):
    """Reads the audit trail (writers append in their own transactions)."""

    async def append_alone(
        self,
        *,
        actor: str | None,
        action: AuditAction,
        subject: AuditSubject,
        subject_id: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a change made outside the store (a breaker reset lives in Redis), in a
        transaction of its own, after the change: the one kind of event that can be missing
        when the database fails at that moment (the caller logs it)."""
        async with self._engines.write.begin() as conn:
            await append(
                conn,
                at=self._clock.now(),
                actor=actor,
                action=action,
                subject=subject,
                subject_id=subject_id,
                detail=detail,
            )

    async def audit_page(
        self, query: AuditFilter, *, before_id: int | None, limit: int
    ) -> list[AuditRecord]:
        """Up to `limit` events `query` selects with ids below `before_id` (None: from the
        newest), newest first: one range of the primary key or of the index of the field
        filtered on (a kind of actor: the primary key's, newest first, filtered)."""
        table = audit_events
        statement = select(table).order_by(table.c.id.desc()).limit(limit)
        if query.actor is not None:
            actor = table.c.actor == query.actor
            if ":" not in query.actor:
                # `cli` names every `cli:<user>@<host>`. Not LIKE: SQLite's ignores case.
                kind = f"{query.actor}:"
                actor = or_(actor, func.substr(table.c.actor, 1, len(kind)) == kind)
            statement = statement.where(actor)
        if query.action is not None:
            statement = statement.where(table.c.action == query.action)
        if query.subject_kind is not None:
            statement = statement.where(table.c.subject_kind == query.subject_kind)
        if query.subject_id is not None:
            statement = statement.where(table.c.subject_id == query.subject_id)
        if before_id is not None:
            statement = statement.where(table.c.id < before_id)
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [
            AuditRecord(
                id=int(row.id),
                at=row.at,
                actor=row.actor,
                action=row.action,
                subject_kind=row.subject_kind,
                subject_id=row.subject_id,
                detail=row.detail,
            )
            for row in rows
        ]
