"""The FastAPI application factory.

    app = create_app(settings)                                   # `schemabridge api`
    app = create_app(settings, runtime_factory=borrowed_runtime(runtime), auth=False)  # serve

The lifespan enters `runtime_factory()` (default: open a `Runtime` on `settings` without
migrating — API processes never run migrations — and close it at the end), builds the
`Operations` routes receive through `OperationsDep` and, with the monitor, runs the sampler of
the destinations' history (`engine.operations.destination_history`). The web run monitor is
served at `/ui` (`api.rest.ui`). Every answer is JSON (errors included:
`api.rest.errors`), every request is measured and logged (`api.rest.middleware`), and bodies
over `settings.max_body_bytes` are refused. OpenAPI: `/openapi.json`, `/docs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from fastapi import APIRouter, Depends, FastAPI
from fastapi.routing import APIRoute
from pydantic.alias_generators import to_camel

from api.rest import (
    audit,
    body_shape,
    keys,
    monitoring,
    routes_actions,
    routes_admin,
    routes_deployments,
    routes_runs,
    routes_workflows,
    secrets,
    sse,
    ui,
)
from api.rest.body_depth import BodyDepthLimit
from api.rest.deps import ApiContext
from api.rest.docs_pages import mount_docs
from api.rest.errors import install_error_handlers
from api.rest.head_requests import HeadAsGet
from api.rest.key_gate import KeyGate
from api.rest.metrics import ApiMetrics
from api.rest.middleware import BodyLimit, RequestObserver
from api.rest.route_inputs import RouteInputs
from api.rest.workflow_document import install_workflow_documents
from engine.operations import Operations
from engine.operations.metrics import WorkerMetrics
from engine.runtime import Runtime
from engine.settings import Settings

logger = logging.getLogger(__name__)

RuntimeFactory = Callable[[], AbstractAsyncContextManager[Runtime]]
"""Called once by the lifespan: the runtime the app's operations use while it runs."""

DEFAULT_ROUTERS: tuple[APIRouter, ...] = (
    # Submissions and run reads first: a request is matched against the routers in this
    # order, and each router it is not in costs it 7-80 µs of matching (bench/RESULTS.md).
    # No two routers share a path and method, so the order changes nothing else.
    routes_runs.router,
    monitoring.health_router,
    monitoring.metrics_router,
    keys.router,
    secrets.router,
    routes_workflows.router,
    routes_deployments.router,
    routes_actions.router,
    sse.router,
    routes_admin.router,
    audit.router,
)


NAMED_OPERATIONS = {
    "submit": "submitRun",
    "retry": "retryRun",
    "retry_preview": "previewRetry",
    "resolve": "resolveStep",
    "start_over": "startOverRun",
    "reprocess": "reprocessRun",
    "cancel": "cancelRun",
    "publish": "publishWorkflows",
    "validate": "validateWorkflows",
    "preview": "previewWorkflows",
    "long_tail": "getLongTail",
    "run_events": "streamRunEvents",
    "health": "getHealth",
    "metrics": "getMetrics",
    "worker_metrics": "getWorkerMetrics",
    # Verb first, as every other: a previewed action is `preview<Action>`.
    "batch_retry_preview": "previewBatchRetry",
    "start_over_preview": "previewStartOver",
    "reprocess_preview": "previewReprocess",
    "destinations_history": "getDestinationsHistory",
    "monitor_config": "getMonitorConfig",
    "list_deployments": "listWorkflowDeployments",
}
"""The operationIds of the routes whose function's name is a bare verb or does not start
with one; any other's is its function's name in camelCase (`list_runs` → `listRuns`)."""


API_DESCRIPTION = """Durable workflow graphs of HTTP calls.

What holds for every operation, which the operations do not repeat:

- **Keys**: `Authorization: Bearer <key>` or `X-API-Key: <key>` on every route but `/health`,
  this description (`/openapi.json`, `/docs`, `/redoc`) and the monitor's files under `/ui`.
  A tenant key sees its tenant's runs only; an admin route answers it 403 `forbidden`.
- **Errors** are JSON `{"code", "message", "details"}`: `code` stable, `details` an object
  (`{}` when there is nothing to add; `details.problems`, each `{pointer, code, message}`,
  for anything invalid). Each operation lists the statuses it answers with their codes;
  any route may also answer 404 `not_found` (no route for the path), 405
  `method_not_allowed` (with `Allow`), 400 `invalid_http` (not HTTP/1.1), 408
  `request_timeout` (the request's headers not whole 10 s after their first byte, or its
  body idle 10 s or not whole 120 s after them) and 431 `headers_too_large` (request line
  and headers over 64 KiB). A 429 or 503 with `Retry-After` says when to send it again; a
  503 changed nothing.
- **Times** are epoch seconds in UTC with a fraction (`1767225600.25`), in answers and in
  the time filters alike.
- **Lists** answer `{"items", "next"}`: send `next` back as `cursor` for the following page
  (`limit` sets its size); `next` is null on the last page. Short lists answer `{"items"}`.
- **Names**: a tenant is `tenantId` in bodies, answers and query strings (`tenant`, its
  former name, is still taken where it was, deprecated); `id` is the id of what an answer
  is, `runId` a run an answer about something else names.
- **Queries**: a query parameter a route does not take is a 422 `unknown_query_parameter`
  (`/health` and `/metrics` take any); every `GET` answers `HEAD` too.
- **Submissions** take an `Idempotency-Key` (its tenant's): sent again with the same
  request it answers the run it created (200, `created` false).
"""
"""The OpenAPI document's `info.description`: the conventions a generated client's user reads
first, and the statuses no operation declares because any route may answer them."""


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI `operationId`: readable (`submitRun`, `listRuns`, `getRun`), for the
    method names of a client generated from the document (FastAPI's own would be
    `submit_workflows__name__runs_post`)."""
    return NAMED_OPERATIONS.get(route.name) or to_camel(route.name)


def opened_runtime(settings: Settings) -> RuntimeFactory:
    """A factory opening a `Runtime` on `settings` without migrating, closed on exit."""

    @contextlib.asynccontextmanager
    async def factory() -> AsyncIterator[Runtime]:
        runtime = await Runtime.open(settings, migrate=False)
        try:
            yield runtime
        finally:
            await runtime.close()

    return factory


def borrowed_runtime(runtime: Runtime) -> RuntimeFactory:
    """A factory handing out a runtime its owner opened and will close (`serve`, the
    worker's health port, tests)."""

    @contextlib.asynccontextmanager
    async def factory() -> AsyncIterator[Runtime]:
        yield runtime

    return factory


async def _sample_destinations(operations: Operations, stop: asyncio.Event) -> None:
    """The history sampler, for the app's life. It only feeds a chart: should it die of an
    unexpected error, that is logged and the API goes on without it."""
    try:
        await operations.destination_history.run(stop)
    except Exception:
        logger.exception("the destinations' history sampler stopped; its chart stays empty")


@contextlib.asynccontextmanager
async def _monitor_sampler(operations: Operations) -> AsyncIterator[None]:
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        sampler = group.create_task(
            _sample_destinations(operations, stop), name="destination-history"
        )
        try:
            yield
        finally:
            stop.set()
            # A sample in progress is only a read for a chart: cancelled, not awaited, so a
            # process whose database hangs stops at once rather than after the connect's
            # own timeout (60 s).
            sampler.cancel()


def create_app(
    settings: Settings | None = None,
    *,
    runtime_factory: RuntimeFactory | None = None,
    auth: bool | None = None,
    routers: Sequence[APIRouter] = DEFAULT_ROUTERS,
    title: str = "SchemaBridge",
    monitor: bool = True,
    demo_downstream: str | None = None,
    worker_metrics: WorkerMetrics | None = None,
) -> FastAPI:
    """The REST API on `settings` (default: from the environment).

    `runtime_factory` defaults to `opened_runtime(settings)`. `auth` defaults to
    `settings.auth`; False makes every request the admin "demo". `routers` are the routes
    served (default: health, metrics, keys, secrets, workflows, deployments, runs and their
    events, operator actions, destinations, tenants and services); every app answers errors the
    same way.
    `monitor`: serve the web run monitor at `/ui` and sample the destinations' history.
    `demo_downstream`: the demo downstream's URL under `serve --demo` (`GET /ui/config`).
    `worker_metrics`: the figures of a worker running in this process (`serve`), served with
    the app's own at `/metrics`.
    """
    settings = settings or Settings()
    factory = runtime_factory or opened_runtime(settings)
    context = ApiContext(
        settings=settings,
        auth=settings.auth if auth is None else auth,
        demo_downstream=demo_downstream,
        metrics=ApiMetrics(worker_metrics),
        worker_metrics=worker_metrics,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with factory() as runtime, contextlib.AsyncExitStack() as stack:
            operations = Operations(runtime)
            if monitor:
                await stack.enter_async_context(_monitor_sampler(operations))
            context.operations = operations
            try:
                yield
            finally:
                context.operations = None

    app = FastAPI(
        title=title,
        version="1",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(RouteInputs())],
        docs_url=None,  # served by docs_pages, with their scripts: a CDN may be out of reach
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.schemabridge = context
    routes = [route for router in routers for route in router.routes]
    install_error_handlers(
        app, extra_models=sse.EVENT_MODELS if sse.router in routers else (), routes=routes
    )
    install_workflow_documents(app)
    for router in routers:
        body_shape.require_json_body_routes(router.routes)
        app.include_router(router)
    mount_docs(app)  # after the routers: requests for them are matched first
    if monitor:
        ui.mount_monitor(app)
    # Added last = outermost: the observer sees (and logs) the body limit's refusals too.
    # Innermost: every other layer sees (and logs) the request's own method.
    app.add_middleware(HeadAsGet)
    # Added first, so it runs inside BodyLimit: what it collects is already bounded.
    app.add_middleware(BodyDepthLimit, settings=settings)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    # Outside the body's limits: a request with a body and no live key is a 401 before any
    # of the body is read.
    app.add_middleware(KeyGate, context=context, routes=routes)
    app.add_middleware(RequestObserver, observe=context.metrics.observe)
    return app


def create_health_app(settings: Settings, runtime: Runtime, metrics: WorkerMetrics) -> FastAPI:
    """A worker's health port, on a runtime its owner manages: `/health`, and `/metrics` with
    the worker's `metrics` (an admin key, as the api's; none with `SCHEMABRIDGE_AUTH=off`)."""
    return create_app(
        settings,
        runtime_factory=borrowed_runtime(runtime),
        routers=(monitoring.health_router, monitoring.worker_metrics_router),
        title="SchemaBridge worker",
        monitor=False,
        worker_metrics=metrics,
    )
