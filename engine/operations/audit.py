"""The audit trail of administrative changes: who published a version, created or revoked a
key, set a tenant's limits or a destination's caps, set or deleted a secret, switched a
serving version (docs/security.md, 'Audit').

The store's writers append each event in the transaction of its change; this group only
reads them, newest first, a keyset page at a time, filtered by actor, action or subject. Run
operator actions are not here: each run's log has them (`data.action`, `data.actor`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from engine.operations.audit_views import AuditEventView, AuditFilter, AuditList
from engine.operations.boundary import store_boundary
from engine.operations.pagination import (
    MAX_ROW_ID,
    check_limit,
    decode_cursor,
    encode_cursor,
    invalid_cursor,
    invalid_filter,
    scope_digest,
)
from engine.store.models import AuditAction, AuditSubject

if TYPE_CHECKING:
    from engine.runtime import Runtime

_ACTIONS = frozenset(a.value for a in AuditAction)
_OLD_TENANT_NAME = frozenset({AuditSubject.API_KEY.value, AuditSubject.SECRET.value})
"""Subjects whose events named the tenant `tenant` in `detail` before it became `tenantId`."""
_SUBJECTS = frozenset(s.value for s in AuditSubject)
CURSOR_KIND = "audit"


def _checked(selection: AuditFilter) -> AuditFilter:
    """`selection`, refused with `invalid_filter` when no event can match it."""
    if selection.action is not None and selection.action not in _ACTIONS:
        raise invalid_filter(
            f"unknown audit action {selection.action!r}; one of {', '.join(sorted(_ACTIONS))}",
            "action",
            _ACTIONS,
        )
    if selection.subject_kind is not None and selection.subject_kind not in _SUBJECTS:
        raise invalid_filter(
            f"unknown subject kind {selection.subject_kind!r}; one of "
            f"{', '.join(sorted(_SUBJECTS))}",
            "subjectKind",
            _SUBJECTS,
        )
    if selection.subject_id is not None and selection.subject_kind is None:
        raise invalid_filter(
            "a subject id needs the kind of subject it names (subjectKind: "
            f"{', '.join(sorted(_SUBJECTS))})",
            "subjectId",
        )
    return selection


def _detail(subject_kind: str, detail: Any) -> Any:
    """`detail` under today's names: events of keys and secrets written before the rename say
    `tenant` (the trail is append-only, so they are renamed as they are read, in place)."""
    if subject_kind not in _OLD_TENANT_NAME or not isinstance(detail, dict):
        return detail
    if "tenant" not in detail or "tenantId" in detail:
        return detail
    return {("tenantId" if name == "tenant" else name): value for name, value in detail.items()}


def _before(keys: list[Any]) -> int:
    match keys:
        case [int() as event_id] if not isinstance(event_id, bool) and 0 <= event_id <= MAX_ROW_ID:
            return event_id  # in the id range: the digest is no secret, the keys any caller's
    raise invalid_cursor("it was altered")


class AuditOperations:
    """The audit trail: read (its writers are the store's transactions of each change)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @store_boundary
    async def list(
        self,
        selection: AuditFilter | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditList:
        """A page of the events `selection` picks (None: every event), newest first. `next`
        continues the same list: events recorded meanwhile never push a row into the next
        page twice or make one skip. `limit` is 1 to 500 (`invalid_limit`); an unknown action
        or subject kind, or a subject id without its kind, is `invalid_filter`; a cursor of
        another list or filter, or an altered one, `invalid_cursor`."""
        check_limit(limit)
        selection = _checked(selection or AuditFilter())
        scope = scope_digest(CURSOR_KIND, dataclasses.asdict(selection))
        before = None if cursor is None else _before(decode_cursor(cursor, CURSOR_KIND, scope))
        rows = await self._runtime.store.audit_page(selection, before_id=before, limit=limit + 1)
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(CURSOR_KIND, [rows[-1].id], scope)
        items = [
            AuditEventView(
                id=row.id,
                at=row.at,
                actor=row.actor,
                action=AuditAction(row.action),
                subject_kind=AuditSubject(row.subject_kind),
                subject_id=row.subject_id,
                detail=_detail(row.subject_kind, row.detail),
            )
            for row in rows
        ]
        return AuditList(items=items, next=next_cursor)
