"""Gradual deployments and serving versions (admin keys; reading a workflow's serving version
needs any key).

`POST /workflows/{name}/deployments` starts moving new runs to a candidate version stage by
stage; `GET /workflows/{name}/deployments`, `GET /deployments` (every workflow's) and
`GET /deployments/{id}` show its stage, weight,
per-version figures, exposure and timeline; `POST /deployments/{id}/abort|rollback` stop it
(optional body `{"reason"}`); `GET /deployment-ids?prefix=` resolves the short ids the monitor
shows, and a 404 for such a short id in a path points to it. Who starts or stops a deployment
is recorded as the key's id with its name (`key:<id> (<name>)`).
`POST /workflows/{name}/serving` switches the serving version by hand (logged with the key).
A second deployment of a workflow while one runs is a 409 `deployment_running`; stages that
cannot work a 422 `invalid_deployment` with the problems.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response, status
from pydantic import BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from api.rest.auth import AdminDep, CallerDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from api.rest.id_prefix_params import MatchLimit, prefix_query
from api.rest.page_params import Cursor, page_limit
from engine.operations.deployment_views import (
    DEFAULT_CHECK_INTERVAL_S,
    MAX_CHECK_INTERVAL_S,
    MIN_CHECK_INTERVAL_S,
    DeploymentChange,
    DeploymentPreview,
    DeploymentView,
    RollbackSpec,
    ServingChange,
    ServingView,
    StageSpec,
)
from engine.operations.deployments import MAX_REASON_CHARS
from engine.operations.pagination import MAX_INTEGER
from engine.operations.views import DeploymentIdMatches, Page, View

router = APIRouter(tags=["deployments"], route_class=JsonBodyRoute)

Name = Annotated[str, Path(description="The workflow's name.", max_length=200)]
DeploymentId = Annotated[str, Path(description="The deployment's id.", max_length=64)]
_FORBID = ConfigDict(extra="forbid")


def _json_integer(value: Any) -> Any:
    """A version as JSON writes an integer: `"1"` (and `true`) were read as 1 and started a
    deployment. A number without a fraction (`2.0`) is an integer to JSON Schema, so it is
    taken, as the published schema says."""
    if isinstance(value, str | bool):
        raise PydanticCustomError(
            "int_type",
            "Input should be a valid integer (a JSON number), not {kind}",
            {"kind": "text" if isinstance(value, str) else "true or false"},
        )
    return value


Version = Annotated[int, BeforeValidator(_json_integer)]


class StageBody(StageSpec):
    model_config = _FORBID


class RollbackBody(RollbackSpec):
    model_config = _FORBID


class DeploymentRequest(View):
    """A deployment to start. Left out: the defaults (10 → 25 → 50 → 100 %, each for at least
    20 runs and 60 s; roll back over a 0.05 failure ratio once 20 runs have finished)."""

    model_config = _FORBID

    version: Version = Field(
        ge=1, le=MAX_INTEGER, description="The candidate: a published version."
    )
    stages: list[StageBody] | None = Field(
        default=None,
        min_length=1,
        max_length=10,
        description="In order, weights rising, the last at 100.",
    )
    rollback: RollbackBody | None = None
    check_interval_seconds: float = Field(
        default=DEFAULT_CHECK_INTERVAL_S,
        ge=MIN_CHECK_INTERVAL_S,
        le=MAX_CHECK_INTERVAL_S,
        description="How often a stage's runs are judged while it holds.",
    )


class ServingRequest(View):
    model_config = _FORBID

    version: Version = Field(
        ge=1, le=MAX_INTEGER, description="A published version: new runs get it at once."
    )


class StopRequest(View):
    """An abort or a rollback by hand; the body may be left out."""

    model_config = _FORBID

    reason: str | None = Field(
        default=None,
        max_length=MAX_REASON_CHARS,
        description="Why (optional): shown in the deployment's outcome and timeline, in the "
        "log of its run and in the process log, with who did it.",
    )


class DeploymentList(Page[DeploymentView]):
    """A page of deployments, newest first; `next` continues the list."""


def deployment_url(deployment_id: str) -> str:
    return f"/deployments/{deployment_id}"


@router.post(
    "/workflows/{name}/deployments",
    status_code=status.HTTP_201_CREATED,
    response_model=DeploymentView,
    responses=error_responses(401, 403, 404, 409, 422, 503),
    summary="Start a gradual deployment of a version (automatic rollback)",
)
async def start_deployment(
    name: Name, body: DeploymentRequest, response: Response, ops: OperationsDep, caller: AdminDep
) -> DeploymentView:
    """201 with the deployment (`Location` too); from then on the candidate gets the first
    stage's weight. Its `gradual_deploy` run (`runId`) shows in the run list. 409
    `deployment_running` (`details.deploymentId`) while another deployment of the workflow
    runs, or `candidate_is_serving`; 404 `workflow_not_found` for an unknown version."""
    view = await ops.deployments.start(
        name,
        body.version,
        actor=caller.named_actor,
        stages=body.stages,
        rollback=body.rollback,
        check_interval_s=body.check_interval_seconds,
    )
    response.headers["Location"] = deployment_url(view.id)
    return view


@router.post(
    "/workflows/{name}/deployments/preview",
    response_model=DeploymentPreview,
    responses=error_responses(401, 403, 404, 409, 422, 503),
    summary="What a deployment's start would do and warn about, starting nothing",
)
async def preview_deployment(
    name: Name, body: DeploymentRequest, ops: OperationsDep, _caller: AdminDep
) -> DeploymentPreview:
    """The same body as the start, and the same refusals (409 `deployment_running`,
    `candidate_is_serving`; 404 `workflow_not_found`; 422 `invalid_deployment`); answers the
    share the candidate would get and the start's `warnings` (a version rolled back before,
    an inputSchema that refuses recent inputs, …), so a confirm step says them first."""
    return await ops.deployments.start_preview(
        name,
        body.version,
        stages=body.stages,
        rollback=body.rollback,
        check_interval_s=body.check_interval_seconds,
    )


@router.get(
    "/workflows/{name}/deployments",
    response_model=DeploymentList,
    responses=error_responses(401, 403, 404, 422, 503),
    summary="A workflow's deployments, newest first",
)
async def list_deployments(
    name: Name,
    ops: OperationsDep,
    _caller: AdminDep,
    limit: Annotated[int, page_limit("Deployments")] = 20,
    cursor: Cursor = None,
) -> DeploymentList:
    page = await ops.deployments.list(name, limit=limit, cursor=cursor)
    return DeploymentList(items=page.items, next=page.next)


@router.get(
    "/deployments",
    response_model=DeploymentList,
    responses=error_responses(401, 403, 422, 503),
    summary="Every workflow's deployments, newest first",
)
async def list_all_deployments(
    ops: OperationsDep,
    _caller: AdminDep,
    limit: Annotated[int, page_limit("Deployments")] = 20,
    cursor: Cursor = None,
) -> DeploymentList:
    page = await ops.deployments.recent(limit=limit, cursor=cursor)
    return DeploymentList(items=page.items, next=page.next)


@router.get(
    "/deployment-ids",
    response_model=DeploymentIdMatches,
    responses=error_responses(401, 403, 422, 503),
    summary="The ids of the deployments whose id starts with a prefix (the monitor's short ids)",
)
async def match_deployment_ids(
    *,
    ops: OperationsDep,
    _caller: AdminDep,
    prefix: Annotated[str, prefix_query("deployment")],
    limit: MatchLimit = 5,
) -> DeploymentIdMatches:
    """One id: the prefix names that deployment; several: it is ambiguous (`more`: even more
    match than listed); none: no deployment starts with it. Admin keys only, as every
    deployment route. 422 `invalid_request` for anything but 8 to 32 hex digits and hyphens.
    Not under `/deployments/`, where the segment after it is a deployment's id."""
    return await ops.deployments.match_prefix(prefix, limit=limit)


@router.get(
    "/deployments/{deployment_id}",
    response_model=DeploymentView,
    responses=error_responses(401, 403, 404, 503),
    summary="A deployment: stage, weight, per-version figures, exposure, timeline",
)
async def get_deployment(
    deployment_id: DeploymentId, ops: OperationsDep, _caller: AdminDep
) -> DeploymentView:
    return await ops.deployments.get(deployment_id)


DEPLOYMENT_ENDED_409 = (
    "The deployment ended otherwise already (`deployment_ended`: promoted, or rolled back for "
    "an abort, aborted for a rollback; `details.state` its status, `details.deploymentId` it)."
)


@router.post(
    "/deployments/{deployment_id}/abort",
    response_model=DeploymentChange,
    responses=error_responses(401, 403, 404, 409, 503, codes={409: DEPLOYMENT_ENDED_409}),
    summary="Abort a deployment: the candidate gets no new runs, nothing is promoted",
)
async def abort_deployment(
    deployment_id: DeploymentId,
    ops: OperationsDep,
    caller: AdminDep,
    body: StopRequest | None = None,
) -> DeploymentChange:
    """Runs already on the candidate finish on it. 409 `deployment_ended` once it ended
    otherwise; an aborted one answers `changed` false. Optional body `{"reason": "…"}`."""
    reason = None if body is None else body.reason
    return await ops.deployments.abort(deployment_id, actor=caller.named_actor, reason=reason)


@router.post(
    "/deployments/{deployment_id}/rollback",
    response_model=DeploymentChange,
    responses=error_responses(401, 403, 404, 409, 503, codes={409: DEPLOYMENT_ENDED_409}),
    summary="Roll a deployment back by hand",
)
async def rollback_deployment(
    deployment_id: DeploymentId,
    ops: OperationsDep,
    caller: AdminDep,
    body: StopRequest | None = None,
) -> DeploymentChange:
    """As abort, but it ends ROLLED_BACK with the figures at that moment. Optional body
    `{"reason": "…"}`."""
    reason = None if body is None else body.reason
    return await ops.deployments.rollback(deployment_id, actor=caller.named_actor, reason=reason)


@router.get(
    "/workflows/{name}/serving",
    response_model=ServingView,
    responses=error_responses(401, 404, 503),
    summary="Which version a workflow's new runs get",
)
async def get_serving(name: Name, ops: OperationsDep, caller: CallerDep) -> ServingView:
    """Any key reads it; `updatedBy` (who set the serving version: an admin's key id, a
    deployment) is null for a tenant key."""
    return await ops.deployments.serving(name, tenant=caller.tenant)


@router.post(
    "/workflows/{name}/serving",
    response_model=ServingChange,
    responses=error_responses(401, 403, 404, 409, 422, 503),
    summary="Switch a workflow's serving version by hand",
)
async def set_serving(
    name: Name, body: ServingRequest, ops: OperationsDep, caller: AdminDep
) -> ServingChange:
    """Every new run that names no version gets it at once; recorded with the key
    (`updatedBy`) and in the audit. The version that serves already answers 200 too, with
    `changed: false` and a `message` saying so: nothing is done (`updatedAt` and
    `updatedBy` stay those of whoever made it serve, and no audit event is written), as
    every action with nothing to do answers. 409 `deployment_running` while a deployment of
    the workflow runs."""
    return await ops.deployments.set_serving(name, body.version, actor=caller.actor)
