"""Who is calling: the API key of a request, as the `Caller` routes act for.

A key is sent as `Authorization: Bearer <key>` or `X-API-Key: <key>` (Bearer wins when both
are sent). `Operations.keys.authenticate` checks it on every request (from memory while a
revocation would reach this process at once), so a revoked or expired key is refused at once by
every API process. No key, or an unknown, revoked or expired
one: 401 `unauthorized` (all alike). A tenant key on an admin route: 403 `forbidden`.

Routes take `CallerDep` (any live key) or `AdminDep` (an admin key). A tenant key's caller
has `tenant` set: routes pass it as the `tenant=` scope of the operations, so another
tenant's run reads as not found. With authentication off every request is `DEMO_CALLER`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.rest.deps import ContextDep, OperationsDep
from schemas.errors import ApiError


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    key_id: str
    """The API key's id ("demo" with authentication off)."""
    tenant: str | None
    """A tenant key's tenant: pass it as the operations' `tenant=` scope. None for admins."""
    admin: bool

    @property
    def actor(self) -> str:
        """Who did it, for operator actions' logs: `key:<id>`, or `demo`."""
        return "demo" if self == DEMO_CALLER else f"key:{self.key_id}"


DEMO_CALLER = Caller(key_id="demo", tenant=None, admin=True)
"""Every request's caller while authentication is off."""

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer sbk_…`.")
_api_key = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="An API key: `X-API-Key: sbk_…`."
)

BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
ApiKeyHeaderDep = Annotated[str | None, Depends(_api_key)]


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


async def current_caller(
    request: Request,
    context: ContextDep,
    ops: OperationsDep,
    bearer: BearerDep,
    api_key: ApiKeyHeaderDep,
) -> Caller:
    """The caller of this request; refuses with 401 `unauthorized`."""
    if not context.auth:
        caller = DEMO_CALLER
    else:
        secret = bearer.credentials if bearer is not None else api_key
        if not secret:
            raise _unauthorized(
                "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
            )
        key = await ops.keys.authenticate(secret)
        if key is None:
            raise _unauthorized("the API key is unknown, revoked or expired")
        caller = Caller(key_id=key.id, tenant=key.tenant, admin=key.role == "admin")
    # For the access log (api.rest.middleware.RequestObserver reads it after the answer).
    request.state.key_id = caller.key_id
    return caller


CallerDep = Annotated[Caller, Depends(current_caller)]


async def admin_caller(caller: CallerDep) -> Caller:
    """The caller, who must hold an admin key; refuses a tenant key with 403 `forbidden`."""
    if not caller.admin:
        raise ApiError(
            403, "forbidden", "this route needs an admin key; a tenant key cannot use it"
        )
    return caller


AdminDep = Annotated[Caller, Depends(admin_caller)]
