"""Who is calling: the API key of a request, as the `Caller` routes act for.

A key is sent as `Authorization: Bearer <key>` or `X-API-Key: <key>` (both, with two different
keys, or one of them repeated with two different values: 401, `key_from_headers` and
`sole_header`). `Operations.keys.authenticate` checks it on every request (from memory while a
revocation would reach this process at once), so a revoked or expired key is refused at once
by every API process. No key, or an unknown, revoked or expired one: 401
`unauthorized` (all alike). A tenant key on an admin route: 403 `forbidden`.

Routes take `CallerDep` (any live key) or `AdminDep` (an admin key). A tenant key's caller
has `tenant` set: routes pass it as the `tenant=` scope of the operations, so another
tenant's run reads as not found. With authentication off every request is `DEMO_CALLER`.

A request that carries a body is authenticated before any of it is read
(`api.rest.key_gate`): without a live key it is a 401, never a 400, 413 or 422 about a body
nobody was allowed to send. An event stream checks its key again as it goes (`LiveKeyDep`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from api.rest.deps import ContextDep, OperationsDep
from engine.operations import Operations
from schemas.errors import ApiError


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    key_id: str
    """The API key's id ("demo" with authentication off)."""
    tenant: str | None
    """A tenant key's tenant: pass it as the operations' `tenant=` scope. None for admins."""
    admin: bool
    name: str | None = None
    """The key's name, if it was given one (`keys create --name`)."""

    @property
    def actor(self) -> str:
        """Who did it, for operator actions' logs: `key:<id>`, or `demo`."""
        return "demo" if self == DEMO_CALLER else f"key:{self.key_id}"

    @property
    def named_actor(self) -> str:
        """`actor` with the key's name when it has one, `key:410577f5e3b5 (release-bot)`:
        what a deployment records as who started or stopped it, which people read in its
        timeline and the logs (a bare key id says nothing without `keys list`)."""
        if self.name is None or self == DEMO_CALLER:
            return self.actor
        name = " ".join(self.name.split())
        if len(name) > NAME_SHOWN_CHARS:  # the recorded actor fits its column (200)
            name = name[: NAME_SHOWN_CHARS - 1] + "…"
        return f"{self.actor} ({name})"

    def own_tenant(self, named: str | None, acting: str) -> str | None:
        """`named` (a request's tenant filter or `tenantId`) when this caller may name it. A
        tenant key naming another tenant is a 403 `tenant_forbidden`: it names a tenant it
        knows is not its own, so saying so reveals nothing, where an empty answer would read
        as "that tenant has no runs". `acting`: what the key does, "reads" or "submits for"."""
        if self.tenant is None or named is None or named == self.tenant:
            return named
        raise ApiError(
            403,
            "tenant_forbidden",
            f"this key {acting} tenant {self.tenant!r} only, not {named!r}: leave the "
            "tenant out, or use an admin key",
        )


NAME_SHOWN_CHARS = 60


DEMO_CALLER = Caller(key_id="demo", tenant=None, admin=True)
"""Every request's caller while authentication is off."""

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer sbk_…`.")
_api_key = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="An API key: `X-API-Key: sbk_…`."
)

BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
ApiKeyHeaderDep = Annotated[str | None, Depends(_api_key)]


NO_KEY = "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
UNKNOWN_KEY = "the API key is unknown, revoked or expired"
CALLER_STATE = "caller"
"""Where `api.rest.key_gate.KeyGate` leaves the caller it authenticated (the request's
state), so the route's dependency does not look the key up a second time."""


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


TWO_KEYS = (
    "the request sends two different keys, one in 'Authorization: Bearer' and one in "
    "'X-API-Key': send only one"
)


BEARER_IN_API_KEY = (
    "the X-API-Key header takes the key alone, without 'Bearer': send 'X-API-Key: <key>' "
    "(or 'Authorization: Bearer <key>')"
)


REPEATED_HEADER = (
    "the request sends the {header} header more than once, with different values: send it "
    "once, with one key"
)


def sole_header(values: Sequence[str], header: str) -> str | None:
    """The one value of a header a request may send once (`Authorization`, `X-API-Key`): None
    when absent, the value when every copy repeats it, and 401 when the copies differ. Reading
    the first of two keys (as Starlette's `headers.get` does) would act as a caller the client
    may not have meant, as two different keys in the two headers would (`TWO_KEYS`): a proxy
    that adds its own `Authorization` after the client's, say. No value is repeated in the
    message: either may be a key."""
    if not values:
        return None
    if any(value != values[0] for value in values[1:]):
        raise _unauthorized(REPEATED_HEADER.format(header=header))
    return values[0]


def key_from_headers(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request sends, as a Bearer credential or as `X-API-Key` (another scheme in
    `Authorization` is ignored, as FastAPI's `HTTPBearer(auto_error=False)` does). Two
    different keys are refused with 401: using either would act as a caller the client may
    not have meant, and hide the misconfiguration that sent both. `X-API-Key: Bearer <key>`
    (the two headers' forms mixed) is refused saying so, not as an unknown key."""
    if api_key is not None and api_key[:7].lower() == "bearer ":
        raise _unauthorized(BEARER_IN_API_KEY)
    scheme, credentials = get_authorization_scheme_param(authorization)
    if scheme.lower() == "bearer" and credentials:
        if api_key and api_key != credentials:
            raise _unauthorized(TWO_KEYS)
        return credentials
    return api_key


def no_key_message(authorization: str | None) -> str:
    """Why a request carries no key: an `Authorization` header without the Bearer scheme (a
    bare key, or `Token …`, `Basic …`) is the usual mistake, so it is named; the header's
    value is never repeated, since it may be the key itself."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not authorization or not authorization.strip():
        return NO_KEY
    if not credentials and scheme.lower() == "bearer":
        return "the Authorization header names the Bearer scheme but no key after it"
    if not credentials:
        return (
            "the Authorization header has no scheme: send 'Authorization: Bearer <key>' "
            "(or 'X-API-Key: <key>')"
        )
    if scheme.lower() != "bearer":
        shown = scheme if scheme.isalpha() and len(scheme) <= 20 else "another"
        return (
            f"the Authorization header uses the {shown!r} scheme: send "
            "'Authorization: Bearer <key>' (or 'X-API-Key: <key>')"
        )
    return NO_KEY


def request_key_headers(request: Request) -> tuple[str | None, str | None]:
    """The request's `Authorization` and `X-API-Key`, each once (`sole_header`)."""
    return (
        sole_header(request.headers.getlist("authorization"), "Authorization"),
        sole_header(request.headers.getlist("x-api-key"), "X-API-Key"),
    )


async def authenticate(
    ops: Operations, secret: str | None, authorization: str | None = None
) -> Caller:
    """The caller whose key `secret` is; 401 `unauthorized` without a live key.
    `authorization`: the request's header, to say what was wrong with it when it gave none."""
    if not secret:
        raise _unauthorized(no_key_message(authorization))
    key = await ops.keys.authenticate(secret)
    if key is None:
        raise _unauthorized(UNKNOWN_KEY)
    return Caller(key_id=key.id, tenant=key.tenant, admin=key.role == "admin", name=key.name)


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
        gated = getattr(request.state, CALLER_STATE, None)
        if isinstance(gated, Caller):
            caller = gated
        else:
            # The dependencies declare the two schemes in OpenAPI; the key is read as the gate
            # and a stream's check read it (`key_from_headers`), so all three agree.
            authorization, api_key = request_key_headers(request)
            secret = key_from_headers(authorization, api_key)
            caller = await authenticate(ops, secret, authorization)
    # For the access log (api.rest.middleware.RequestObserver reads it after the answer).
    request.state.key_id = caller.key_id
    return caller


KeyCheck = Callable[[], Awaitable[bool]]
"""Whether the key that opened a lasting answer is still live."""


async def live_key(request: Request, context: ContextDep, ops: OperationsDep) -> KeyCheck:
    """A check that this request's key is still live, for an answer that lasts (an event
    stream): a key revoked while it streams ends the stream (`api.rest.sse`)."""
    if not context.auth:
        return _always_live
    secret = key_from_headers(*request_key_headers(request))

    async def check() -> bool:
        return secret is not None and await ops.keys.authenticate(secret) is not None

    return check


async def _always_live() -> bool:
    return True


LiveKeyDep = Annotated[KeyCheck, Depends(live_key)]
CallerDep = Annotated[Caller, Depends(current_caller)]


async def admin_caller(caller: CallerDep) -> Caller:
    """The caller, who must hold an admin key; refuses a tenant key with 403 `forbidden`."""
    if not caller.admin:
        raise ApiError(
            403, "forbidden", "this route needs an admin key; a tenant key cannot use it"
        )
    return caller


AdminDep = Annotated[Caller, Depends(admin_caller)]
