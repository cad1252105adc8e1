"""`/workflows`: publish (admin keys), validate, and read workflows, versions and graphs.

Workflows are shared by every tenant: any live key reads and validates them; only an admin key
publishes. An invalid document is a 422 `invalid_workflow` listing every problem with its JSON
pointer and code (pointers into a list start with the document's index).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response, status

from api.rest.auth import AdminDep, CallerDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from api.rest.run_models import (
    PreviewReport,
    ProblemView,
    ValidationReport,
    VersionList,
    WorkflowList,
)
from engine.operations.pagination import MAX_INTEGER
from engine.operations.views import GraphView, PublishResult, VersionDetail

router = APIRouter(tags=["workflows"], route_class=JsonBodyRoute)

Documents = Annotated[
    dict[str, Any] | list[dict[str, Any]],
    Body(description="One workflow document, or a list (a parent with the child workflows)."),
]
Name = Annotated[str, Path(description="The workflow's name.", max_length=200)]
Version = Annotated[int, Path(description="A published version (1 or more).", ge=1, le=MAX_INTEGER)]
SystemQuery = Annotated[
    bool,
    Query(
        description="Also list the engine's own system workflows (`gradual_deploy`, the "
        "workflow of a deployment's run); left out by default."
    ),
]


@router.post(
    "/workflows",
    status_code=status.HTTP_201_CREATED,
    response_model=PublishResult | list[PublishResult],
    responses={
        200: {
            "model": PublishResult | list[PublishResult],
            "description": "Every workflow was identical to its latest version: that one.",
        },
        **error_responses(401, 403, 422, 503),
    },
    summary="Publish a workflow (or a list) as new immutable versions",
)
async def publish(
    documents: Documents, response: Response, ops: OperationsDep, caller: AdminDep
) -> PublishResult | list[PublishResult]:
    """201 when this publish created a version (of any workflow given), 200 when every
    workflow was identical to its latest version. A single document answers a single result,
    a list one result per workflow, in order.

    Publishing moves no traffic: a workflow's first version serves new runs at once, a later
    one only once a deployment promotes it (`POST /workflows/{name}/deployments`) or an admin
    switches to it (`POST /workflows/{name}/serving`). Each result says which: `serving`
    (this version serves now), `servingVersion` (the one that does) and, when it is not this
    one, a `hint` saying how to make it serve."""
    results = await ops.workflows.publish(documents, actor=caller.actor)
    if not any(result.created for result in results):
        response.status_code = status.HTTP_200_OK
    return results if isinstance(documents, list) else results[0]


@router.post(
    "/workflows/validate",
    response_model=ValidationReport,
    responses=error_responses(401, 422, 503),
    summary="Validate workflow documents without publishing them",
)
async def validate(
    documents: Documents, ops: OperationsDep, _caller: CallerDep
) -> ValidationReport:
    """200 with every problem found (`valid` false) or none; nothing is stored. The 422 is
    for a body that is not a document or a list of documents at all."""
    problems = await ops.workflows.validate(documents)
    return ValidationReport(
        valid=not problems, problems=[ProblemView(**p.as_dict()) for p in problems]
    )


@router.post(
    "/workflows/preview",
    response_model=PreviewReport,
    responses=error_responses(401, 422, 503),
    summary="Validate workflow documents and lay out their graphs, without publishing",
)
async def preview(documents: Documents, ops: OperationsDep, _caller: CallerDep) -> PreviewReport:
    """What the monitor's editor shows: `validate`'s answer plus each document's graph as
    written, drawn even when invalid (unknown dependencies left out, a cycle's vertices in
    one layer), so each problem's pointer can be shown on its vertex."""
    problems, graphs = await ops.workflows.preview(documents)
    return PreviewReport(
        valid=not problems,
        problems=[ProblemView(**p.as_dict()) for p in problems],
        graphs=graphs,
    )


@router.get(
    "/workflows",
    response_model=WorkflowList,
    responses=error_responses(401, 503),
    summary="List published workflows",
)
async def list_workflows(
    ops: OperationsDep, _caller: CallerDep, system: SystemQuery = False
) -> WorkflowList:
    """The workflows users publish, by name. The engine's own (`gradual_deploy`, which drives
    deployments) only with `system=true`; its versions and runs answer by name either way."""
    return WorkflowList(items=await ops.workflows.list(system=system))


@router.get(
    "/workflows/{name}",
    response_model=VersionDetail,
    responses=error_responses(401, 404, 422, 503),
    summary="A workflow's latest version, with its document and the serving version",
)
async def get_workflow(name: Name, ops: OperationsDep, _caller: CallerDep) -> VersionDetail:
    """The latest version published, which is not always the one new runs get:
    `servingVersion` is (as in `GET /workflows`)."""
    return await ops.workflows.get(name)


@router.get(
    "/workflows/{name}/versions",
    response_model=VersionList,
    responses=error_responses(401, 404, 422, 503),
    summary="Every version of a workflow, newest first",
)
async def list_versions(name: Name, ops: OperationsDep, _caller: CallerDep) -> VersionList:
    return VersionList(items=await ops.workflows.versions(name))


@router.get(
    "/workflows/{name}/versions/{version}",
    response_model=VersionDetail,
    responses=error_responses(401, 404, 422, 503),
    summary="One version of a workflow, with its document",
)
async def get_version(
    name: Name, version: Version, ops: OperationsDep, _caller: CallerDep
) -> VersionDetail:
    return await ops.workflows.get(name, version)


@router.get(
    "/workflows/{name}/versions/{version}/graph",
    response_model=GraphView,
    responses=error_responses(401, 404, 422, 503),
    summary="The DAG of one version, laid out in layers",
)
async def get_graph(
    name: Name, version: Version, ops: OperationsDep, _caller: CallerDep
) -> GraphView:
    return await ops.workflows.graph(name, version)
