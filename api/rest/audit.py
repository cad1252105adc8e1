"""`/audit`: the audit trail of administrative changes (admin keys only; docs/security.md,
'Audit'): who published a version, created or revoked a key, set a tenant's limits or a
destination's caps, set or deleted a secret, switched a serving version. Newest first, in
pages with cursors as `/runs` has them, filtered by actor, action or subject."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.rest.auth import AdminDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from api.rest.page_params import Cursor, page_limit
from engine.operations.audit_views import AuditAction, AuditFilter, AuditList, AuditSubject

router = APIRouter(tags=["audit"], route_class=JsonBodyRoute)


@router.get(
    "/audit",
    response_model=AuditList,
    responses=error_responses(
        401,
        403,
        422,
        503,
        codes={
            422: "An action or subject kind not in its enum (`invalid_request`), "
            "`subjectId` without `subjectKind` (`invalid_filter`: `details.parameter` names "
            "it), or a cursor this list did not give out (`invalid_cursor`)."
        },
    ),
    summary="List administrative changes (who did what, when), newest first",
)
async def list_audit(
    *,
    ops: OperationsDep,
    _caller: AdminDep,
    actor: Annotated[
        str | None,
        Query(
            max_length=200,
            description="Only this actor's changes: `key:<id>`, `cli:<user>@<host>`, `demo`, "
            "…; a kind named without `:` (`cli`, `key`, `deployment`) takes every actor of "
            "that kind.",
        ),
    ] = None,
    action: Annotated[AuditAction | None, Query(description="Only this action.")] = None,
    subject_kind: Annotated[
        AuditSubject | None,
        Query(alias="subjectKind", description="Only changes of this kind of thing."),
    ] = None,
    subject_id: Annotated[
        str | None,
        Query(
            alias="subjectId",
            max_length=400,
            description="Needs `subjectKind`: a workflow's name, a key's id, a tenant id, a "
            "destination key, or `<tenant>/<NAME>` for a secret.",
        ),
    ] = None,
    limit: Annotated[int, page_limit("Events")] = 50,
    cursor: Cursor = None,
) -> AuditList:
    """Each event was written in the transaction of its change, so it is there exactly when
    the change is, and it stays when its subject goes (a deleted secret, a revoked key).
    Operator actions on runs are in each run's log (`GET /runs/{id}/logs`), not here."""
    selection = AuditFilter(
        actor=actor,
        action=None if action is None else action.value,
        subject_kind=None if subject_kind is None else subject_kind.value,
        subject_id=subject_id,
    )
    return await ops.audit.list(selection, limit=limit, cursor=cursor)
