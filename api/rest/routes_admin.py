"""Operator settings: destinations (admission state and caps), tenants (rate limits and
quotas), services (heartbeats).

Admin keys only, except that a tenant key may read its own tenant (`GET /tenants/{id}`).
Every change is applied to all workers at once and is idempotent; while Redis cannot be
reached a change is refused with 503 `coordination_unavailable` and may be sent again.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api.rest.auth import AdminDep, CallerDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from api.rest.renamed import OLD_TENANT_PARAMETER, one_of
from engine.operations.destination_history import DestinationHistoryView
from engine.operations.settings import MAX_SETTING, UNSET
from engine.operations.settings_views import (
    BreakersReset,
    CapsView,
    DestinationView,
    ServiceView,
    TenantView,
)
from engine.operations.views import View
from schemas.errors import ApiError
from schemas.tenant_ids import MAX_TENANT_CHARS, TENANT_ID_PATTERN, TENANT_ID_RULE

TenantId = Annotated[
    str,
    Path(
        description=f"The tenant's id: {TENANT_ID_RULE}.",
        # In the schema only: the route refuses any other id itself, as `invalid_tenant`.
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_TENANT_CHARS,
            "pattern": TENANT_ID_PATTERN,
        },
    ),
]

router = APIRouter(route_class=JsonBodyRoute)

DESTINATION_KEY = (
    "The destination key, percent-encoded as one path segment: `http://billing:8080` is "
    "`http%3A%2F%2Fbilling%3A8080` (a client's `quote(key, safe='')`). A key is a GATEWAY "
    "URL's lower-case `scheme://host:port`, or a vertex's explicit `destination` name."
)

DestinationKey = Annotated[str, Path(description=DESTINATION_KEY)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class CapsRequest(_Body):
    max_concurrency: int = Field(
        ge=1, le=MAX_SETTING, description="Calls in flight at most, on all workers."
    )
    rate_per_second: float | None = Field(
        default=None, gt=0, description="Calls started per second at most; omitted: unlimited."
    )


class CapsChange(_Body):
    """Fields left out are left as they are; `ratePerSecond: null` removes the rate."""

    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SETTING,
        description="Calls in flight at most, on all workers; left out: kept (null is "
        "refused: DELETE the caps to go back to the default).",
    )
    rate_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Calls started per second at most; null: unlimited; left out: kept.",
    )


class LimitsRequest(_Body):
    """Fields left out are left as they are; `null` puts one back to its default."""

    rate_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SETTING,
        description="GATEWAY steps a minute; null: the default (`TENANT_RATE_PER_MINUTE`).",
    )
    max_runs: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SETTING,
        description="Runs the tenant may create, counted as they are created and never "
        "given back: root runs submitted (`POST /workflows/{name}/runs`), start overs and the "
        "child runs its fan-outs start (a spawner that has fewer left than it needs fails "
        "with `quota_exceeded`, a submission is refused with 429 `quota_exceeded`); null: "
        "unlimited. Changing it keeps the count of runs used.",
    )


class DestinationList(View):
    """Every destination admission has seen or that has stored caps, by key."""

    items: list[DestinationView]


class CapsRemoved(View):
    destination: str
    removed: bool
    """False: the destination had no caps (nothing changed)."""


class TenantList(View):
    """Every tenant seen by the rate limiter or with stored settings, by id."""

    items: list[TenantView]


class ServiceList(View):
    """Every service that ever sent a heartbeat, by name."""

    items: list[ServiceView]


# ── destinations ───────────────────────────────────────────────────────────────────────────


@router.get(
    "/destinations",
    tags=["destinations"],
    response_model=DestinationList,
    responses=error_responses(401, 403, 503),
    summary="Every destination: AIMD limit, in flight, cap, breakers, retry budget",
)
async def list_destinations(ops: OperationsDep, _caller: AdminDep) -> DestinationList:
    return DestinationList(items=await ops.settings.destinations())


@router.get(
    "/destinations/history",
    tags=["destinations"],
    response_model=DestinationHistoryView,
    responses=error_responses(401, 403, 503),
    summary="The last minutes of every destination's AIMD limit and calls in flight",
)
async def destinations_history(
    ops: OperationsDep,
    _caller: AdminDep,
    destination: Annotated[
        str | None,
        Query(
            description="Only this destination's series, its key spelled as `GET "
            "/destinations` lists it (`http://billing:8080`); left out: every destination's."
        ),
    ] = None,
) -> DestinationHistoryView:
    """Samples taken every few seconds by the API process that answers (kept in its memory
    for the last 10 minutes; each API process samples the same shared state). `destination`:
    that one's series only (empty when it was never seen)."""
    return ops.destination_history.view(destination)


# `{key:path}`: a percent-encoded slash reaches the router decoded, so the key may hold "/".
@router.put(
    "/destinations/{key:path}/caps",
    tags=["destinations"],
    response_model=CapsView,
    responses=error_responses(401, 403, 422, 503),
    summary="Cap a destination (every worker, at once)",
    description=DESTINATION_KEY,
)
async def set_caps(
    key: DestinationKey, body: CapsRequest, ops: OperationsDep, caller: AdminDep
) -> CapsView:
    """422 `invalid_destination` for a key no call can have (the answer says which key was
    meant), `invalid_caps` for bounds out of range."""
    return await ops.settings.set_caps(
        key, body.max_concurrency, body.rate_per_second, actor=caller.actor
    )


@router.patch(
    "/destinations/{key:path}/caps",
    tags=["destinations"],
    response_model=CapsView,
    responses=error_responses(401, 403, 422, 503),
    summary="Change some of a destination's caps, keeping the others (every worker, at once)",
    description=DESTINATION_KEY,
)
async def change_caps(
    key: DestinationKey, body: CapsChange, ops: OperationsDep, caller: AdminDep
) -> CapsView:
    """Answers the caps after the change. Each change is merged into the stored caps in one
    step: two changes of different caps at once both survive. 422 `caps_not_set` for a rate
    alone on a destination without caps of its own (give `maxConcurrency` too),
    `invalid_caps` for nothing to change or bounds out of range, `invalid_destination` for
    a key no call can have."""
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    return await ops.settings.change_caps(key, **changes, actor=caller.actor)


@router.delete(
    "/destinations/{key:path}/caps",
    tags=["destinations"],
    response_model=CapsRemoved,
    responses=error_responses(401, 403, 422, 503),
    summary="Remove a destination's caps: the default cap applies again",
    description=DESTINATION_KEY,
)
async def remove_caps(key: DestinationKey, ops: OperationsDep, caller: AdminDep) -> CapsRemoved:
    removed = await ops.settings.remove_caps(key, actor=caller.actor)
    return CapsRemoved(destination=key, removed=removed)


@router.post(
    "/destinations/{key:path}/breakers/reset",
    tags=["destinations"],
    response_model=BreakersReset,
    responses=error_responses(401, 403, 404, 422, 503),
    summary="Close a destination's open breakers (every worker, at once)",
    description=DESTINATION_KEY,
)
async def reset_breakers(
    key: DestinationKey,
    ops: OperationsDep,
    caller: AdminDep,
    tenant_id: Annotated[
        str | None,
        Query(
            alias="tenantId",
            description="Close only this tenant's layer (left out: the global layer and "
            "every tenant's).",
            max_length=200,
        ),
    ] = None,
    tenant: Annotated[
        str | None, Query(max_length=200, deprecated=True, description=OLD_TENANT_PARAMETER)
    ] = None,
) -> BreakersReset:
    """For a destination that is fixed: steps retried now call it at once instead of failing
    on its open breaker until the reset timeout, and the steps waiting behind what it closed
    run at once (`stepsReleased`). Answers the layers closed (empty: none was open). 404
    `destination_not_found` for a key no call has reached and `tenant_not_found` for a
    tenant no run, key or setting has (with the close ones in `details.meant`), 422 for a
    tenant id that cannot be one."""
    chosen = one_of(tenant_id, tenant, name="tenantId", old_name="tenant")
    return await ops.settings.reset_breakers(key, chosen, actor=caller.actor)


# ── tenants ────────────────────────────────────────────────────────────────────────────────


@router.get(
    "/tenants",
    tags=["tenants"],
    response_model=TenantList,
    responses=error_responses(401, 403, 503),
    summary="Every tenant: rate limit and its use, quota left",
)
async def list_tenants(ops: OperationsDep, _caller: AdminDep) -> TenantList:
    return TenantList(items=await ops.settings.tenants())


@router.get(
    "/tenants/{tenant_id}",
    tags=["tenants"],
    response_model=TenantView,
    responses=error_responses(
        401,
        403,
        422,
        503,
        codes={
            403: "A tenant key naming another tenant than its own (`tenant_forbidden`).",
            422: "An id no tenant can have (`invalid_tenant`, `details.allowed` the rule).",
        },
    ),
    summary="One tenant's rate limit, its use in the current window, and its quota",
)
async def get_tenant(tenant_id: TenantId, ops: OperationsDep, caller: CallerDep) -> TenantView:
    """Any id has settings (the defaults until an operator sets some). A tenant key reads its
    own tenant only (403 `tenant_forbidden` for another, as every route that a tenant key
    may call answers a tenant it names that is not its own; `forbidden` is an admin route's).
    An id no tenant can have (empty, spaces at either end, over 200 characters) is 422
    `invalid_tenant`, `details.allowed` the rule."""
    if caller.tenant is not None and caller.tenant != tenant_id:
        raise ApiError(
            403,
            "tenant_forbidden",
            f"this key reads tenant {caller.tenant!r} only, not {tenant_id!r}: read "
            f"/tenants/{caller.tenant}, or use an admin key",
        )
    return await ops.settings.tenant(tenant_id)


@router.put(
    "/tenants/{tenant_id}/limits",
    tags=["tenants"],
    response_model=TenantView,
    responses=error_responses(401, 403, 422, 503),
    summary="Set a tenant's rate limit and run quota (null: back to the default)",
)
async def set_limits(
    tenant_id: TenantId, body: LimitsRequest, ops: OperationsDep, caller: AdminDep
) -> TenantView:
    """Answers the tenant's settings after the change. Each field is applied on its own and
    idempotently: a request refused half-way (503) may be sent again as it is. The id follows
    a submission's `tenantId` rule: any other is 422 `invalid_tenant` (`details.allowed`
    says the rule) and nothing is stored; so is a limit set for the reserved tenant `system`
    (the engine's own runs, which no limit acts on; `null`, a reset, is taken)."""
    given = body.model_fields_set
    return await ops.settings.set_limits(
        tenant_id,
        rate_per_minute=body.rate_per_minute if "rate_per_minute" in given else UNSET,
        max_runs=body.max_runs if "max_runs" in given else UNSET,
        actor=caller.actor,
    )


# ── services ───────────────────────────────────────────────────────────────────────────────


@router.get(
    "/services",
    tags=["services"],
    response_model=ServiceList,
    responses=error_responses(401, 403, 503),
    summary="Every service's heartbeat: up while it is fresh, else down since when",
)
async def list_services(ops: OperationsDep, _caller: AdminDep) -> ServiceList:
    return ServiceList(items=await ops.settings.services())
