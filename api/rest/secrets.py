"""`/secrets`: set, list and delete the secrets workflows reference as `{{ secrets.NAME }}`
(admin keys only).

A value goes in (`PUT /secrets/{name}`) and never comes out: answers carry names and metadata
only, and a refusal never quotes a value. Setting needs the API process to hold a usable
encryption key (`SCHEMABRIDGE_SECRET_KEYS`); without one it is 503 `secret_key_missing`, with
the command that makes a key in the message. Re-encrypting under a new key is `schemabridge
secrets rotate` (docs/security.md, 'Rotating the encryption key').
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from api.rest.auth import AdminDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import COMMON_CODES, error_responses, in_words
from api.rest.renamed import OLD_TENANT_PARAMETER, one_of, renamed_fields, required
from engine.operations.secrets import MAX_VALUE_CHARS, MIN_VALUE_CHARS, SHORT_VALUE_REASON
from engine.operations.secrets_views import SecretList, SecretRef, StoredSecret
from schemas.tenant_ids import MAX_TENANT_CHARS, TENANT_ID_PATTERN

router = APIRouter(tags=["secrets"], route_class=JsonBodyRoute)

NAME_PATTERN = in_words(
    r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
    "a letter or _, then up to 127 letters, digits or _ (as {{ secrets.NAME }} writes it)",
)
TENANT_PATTERN = in_words(TENANT_ID_PATTERN, "a tenant id without spaces at its ends or any '/'")
"""No surrounding spaces (the operations refuse them too)."""

SecretName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="The secret's name, as workflows write it: `{{ secrets.NAME }}`.",
    ),
]
TenantQuery = Annotated[
    str | None,
    Query(
        alias="tenantId",
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        pattern=TENANT_PATTERN,
        description="The tenant the secret belongs to.",
    ),
]
OldTenantQuery = Annotated[
    str | None,
    Query(
        alias="tenant",
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        pattern=TENANT_PATTERN,
        deprecated=True,
        description=OLD_TENANT_PARAMETER,
    ),
]


def _long_enough(value: str) -> str:
    """A short value refused with the reason (pydantic's own words would give only the count).
    The value itself is never quoted."""
    if len(value) < MIN_VALUE_CHARS:
        raise PydanticCustomError("string_too_short", SHORT_VALUE_REASON)
    return value


class SecretRequest(BaseModel):
    """A secret's value for one tenant."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tenant_id: str = Field(
        alias="tenantId",
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        pattern=TENANT_PATTERN,
        description="The tenant whose runs may use the secret (`tenant`, its old name, is "
        "still taken).",
    )
    value: Annotated[str, AfterValidator(_long_enough)] = Field(
        max_length=MAX_VALUE_CHARS,
        description="The value. Stored encrypted; no answer ever shows it again.",
        # Checked by `_long_enough` (for its message); still documented as a bound.
        json_schema_extra={"minLength": MIN_VALUE_CHARS},
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return renamed_fields(data)


SECRET_KEY_503 = (
    COMMON_CODES[503] + " Or this API process has no usable encryption key "
    "(`secret_key_missing`, `secret_key_invalid`: `SCHEMABRIDGE_SECRET_KEYS` unset or "
    "malformed where the API runs): sending it again helps only once that is set, or on "
    "another API process that has it."
)
"""A set's 503: beside the outages a retry rides out, the key it encrypts with."""


@router.put(
    "/secrets/{name}",
    response_model=StoredSecret,
    responses={
        201: {"model": StoredSecret, "description": "Created."},
        **error_responses(401, 403, 422, 503, codes={503: SECRET_KEY_503}),
    },
    summary="Set a secret (created: 201, its value replaced: 200); the value is never shown",
)
async def set_secret(
    name: SecretName,
    body: SecretRequest,
    response: Response,
    ops: OperationsDep,
    caller: AdminDep,
) -> StoredSecret:
    stored = await ops.secrets.set(body.tenant_id, name, body.value, actor=caller.actor)
    response.status_code = status.HTTP_201_CREATED if stored.created else status.HTTP_200_OK
    return stored


@router.get(
    "/secrets",
    response_model=SecretList,
    responses=error_responses(401, 403, 422, 503),
    summary="List secrets: names and metadata, never values",
)
async def list_secrets(
    ops: OperationsDep,
    _caller: AdminDep,
    tenant_id: Annotated[
        str | None,
        Query(
            alias="tenantId",
            min_length=1,
            max_length=MAX_TENANT_CHARS,
            pattern=TENANT_PATTERN,
            description="Only this tenant's secrets.",
        ),
    ] = None,
    tenant: OldTenantQuery = None,
) -> SecretList:
    return await ops.secrets.list(one_of(tenant_id, tenant, name="tenantId", old_name="tenant"))


@router.delete(
    "/secrets/{name}",
    response_model=SecretRef,
    responses=error_responses(401, 403, 404, 422, 503),
    summary="Delete a secret (runs that reference it then fail with secret_not_found)",
)
async def delete_secret(
    name: SecretName,
    ops: OperationsDep,
    caller: AdminDep,
    tenant_id: TenantQuery = None,
    tenant: OldTenantQuery = None,
) -> SecretRef:
    """`tenantId` is required (or `tenant`, its deprecated name): 422 without either."""
    chosen = one_of(tenant_id, tenant, name="tenantId", old_name="tenant")
    return await ops.secrets.delete(required(chosen, name="tenantId"), name, actor=caller.actor)
