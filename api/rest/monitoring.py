"""`GET /health` (open to everyone: load balancers and orchestrators call it; `HEAD /health`
too, as every GET route: `api.rest.head_requests`) and `GET /metrics` (Prometheus text; an
admin key, since it names destinations and tenants). A worker's health port serves `/health`
and its own `/metrics` (`worker_metrics_router`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from api.rest.auth import AdminDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import ContextDep, OperationsDep
from api.rest.errors import error_responses
from api.rest.metrics import render_worker
from engine.operations.health import HealthReport
from schemas.errors import ApiError

health_router = APIRouter(tags=["monitoring"], route_class=JsonBodyRoute)
metrics_router = APIRouter(tags=["monitoring"], route_class=JsonBodyRoute)
worker_metrics_router = APIRouter(tags=["monitoring"], route_class=JsonBodyRoute)

_PROMETHEUS_TEXT = {
    200: {
        "content": {"text/plain": {"schema": {"type": "string"}}},
        "description": "Prometheus text exposition.",
    },
    **error_responses(401, 403),
}


@health_router.get(
    "/health",
    response_model=HealthReport,
    response_model_exclude_defaults=True,
    responses={503: {"model": HealthReport, "description": "The database or Redis is failing."}},
    summary="Whether this process can reach the database and Redis",
)
async def health(ops: OperationsDep) -> Response:
    """200 `{"status": "ok"}`, or 503 `{"status": "unavailable", "failing": [...]}` naming
    `database` and/or `redis` when they do not answer within `SCHEMABRIDGE_HEALTH_TIMEOUT_S`
    (2 s)."""
    report = await ops.health.check()
    body = report.model_dump(by_alias=True, exclude_defaults=True)
    return JSONResponse(body, status_code=200 if report.status == "ok" else 503)


@metrics_router.get(
    "/metrics",
    response_class=Response,
    responses=_PROMETHEUS_TEXT,
    summary="Prometheus metrics: HTTP latency, runs, ready queue, admission, breakers",
)
async def metrics(
    request: Request, ops: OperationsDep, context: ContextDep, _caller: AdminDep
) -> Response:
    """The engine's figures are read at scrape time; a source that does not answer is
    reported by `schemabridge_dependency_up` = 0 and its series are left out."""
    snapshot = await ops.metrics.snapshot()
    body, content_type = context.metrics.render(snapshot, request.headers.get("accept"))
    return Response(body, media_type=content_type)


@worker_metrics_router.get(
    "/metrics",
    response_class=Response,
    responses=_PROMETHEUS_TEXT,
    summary="This worker's Prometheus metrics: GATEWAY attempts and latency, finished steps",
)
async def worker_metrics(request: Request, context: ContextDep, _caller: AdminDep) -> Response:
    """The worker's own counters, kept in its memory since it started: nothing is read from
    the database or Redis (the engine-wide figures are the api's `/metrics`). An admin key,
    as there: the series name destinations."""
    if context.worker_metrics is None:  # the router of an app built without a worker
        raise ApiError(404, "not_found", "this process runs no worker")
    body, content_type = render_worker(context.worker_metrics, request.headers.get("accept"))
    return Response(body, media_type=content_type)
