"""`/keys`: create, list and revoke API keys (admin keys only), and `/keys/current`: the
key a request was sent with (any key), so a client can say who it acts as before it is
refused a route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from api.rest.auth import AdminDep, CallerDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import ContextDep, OperationsDep
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


KeyId = Annotated[
    str, Path(description="The key's `id`, as `GET /keys` and `schemabridge keys list` show it.")
]


@router.delete(
    "/keys/{key_id}",
    response_model=RevokedApiKey,
    responses=error_responses(401, 403, 404, 503),
    summary="Revoke an API key (at once, on every API process)",
)
async def revoke_key(key_id: KeyId, ops: OperationsDep, caller: AdminDep) -> RevokedApiKey:
    """Revoke the key. A key revoked already answers 200 too, with `changed: false`, its
    first `revokedAt` and `revokedBy` (nothing is done), as every action with nothing to do
    answers."""
    return await ops.keys.revoke(key_id, actor=caller.actor)


class CurrentKey(BaseModel):
    """The key a request was sent with: what it may do, never its secret."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    id: str = Field(description="The key's id (`keys list`); `demo` with authentication off.")
    name: str | None = Field(description="The key's name, if it was given one.")
    role: Literal["admin", "tenant"] = Field(
        description="`admin`: every tenant and the admin routes; `tenant`: one tenant's runs."
    )
    tenant_id: str | None = Field(description="A tenant key's tenant; null for an admin key.")
    authentication: bool = Field(
        description="False when the API runs with authentication off (`serve --demo`): "
        "every request acts as an admin, with no key."
    )


@router.get(
    "/keys/current",
    response_model=CurrentKey,
    responses=error_responses(401, 503),
    summary="The key this request was sent with: its role, or the tenant it acts for",
)
async def get_current_key(caller: CallerDep, context: ContextDep) -> CurrentKey:
    """Any live key may ask: the monitor reads it to offer a tenant key only the pages it may
    open, and a script to check which key it holds."""
    return CurrentKey(
        id=caller.key_id,
        name=caller.name,
        role="admin" if caller.admin else "tenant",
        tenant_id=caller.tenant,
        authentication=context.auth,
    )
