"""`/keys`: create, list and revoke API keys (admin keys only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from api.rest.auth import AdminDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from api.rest.renamed import renamed_fields
from engine.operations.keys_views import ApiKeyList, CreatedApiKey, RevokedApiKey

router = APIRouter(tags=["keys"], route_class=JsonBodyRoute)


class KeyRequest(BaseModel):
    """A key for one tenant (`tenantId`) or an admin key (`admin: true`): exactly one."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    tenant_id: str | None = Field(
        default=None,
        description="The tenant the key acts for (`tenant`, its old name, is still taken).",
    )
    admin: bool = Field(default=False, description="An admin key: every tenant, admin routes.")
    name: str | None = Field(default=None, description="A label for operators.")
    expires_in_days: float | None = Field(
        default=None, description="Days until the key stops working; omitted: never."
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return renamed_fields(data)


@router.post(
    "/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=CreatedApiKey,
    responses=error_responses(401, 403, 422, 503),
    summary="Create an API key (its secret is in this answer only)",
)
async def create_key(body: KeyRequest, ops: OperationsDep, caller: AdminDep) -> CreatedApiKey:
    return await ops.keys.create(
        tenant=body.tenant_id,
        admin=body.admin,
        name=body.name,
        expires_in_days=body.expires_in_days,
        actor=caller.actor,
    )


@router.get(
    "/keys",
    response_model=ApiKeyList,
    responses=error_responses(401, 403, 503),
    summary="List API keys (never their secrets)",
)
async def list_keys(ops: OperationsDep, _caller: AdminDep) -> ApiKeyList:
    return await ops.keys.list()


@router.delete(
    "/keys/{key_id}",
    response_model=RevokedApiKey,
    responses=error_responses(401, 403, 404, 503),
    summary="Revoke an API key (at once, on every API process)",
)
async def revoke_key(key_id: str, ops: OperationsDep, caller: AdminDep) -> RevokedApiKey:
    """Revoke the key. A key revoked already answers 200 too, with `changed: false`, its
    first `revokedAt` and `revokedBy` (nothing is done), as every action with nothing to do
    answers."""
    return await ops.keys.revoke(key_id, actor=caller.actor)
