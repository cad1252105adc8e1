"""What routes receive through FastAPI dependencies (`Annotated` aliases, no globals).

The app's one piece of state is an `ApiContext`, built by `create_app` and completed by its
lifespan (which opens the `Runtime` and builds the `Operations` on it); routes take
`OperationsDep` (and `ContextDep` when they need the settings or the metrics).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from api.rest.metrics import ApiMetrics
from engine.operations import Operations
from engine.operations.metrics import WorkerMetrics
from engine.settings import Settings
from schemas.errors import Unavailable


@dataclass
class ApiContext:
    """Everything an app's routes share: settings, whether keys are checked, the metrics, and
    (between the lifespan's start and end) the operations."""

    settings: Settings
    auth: bool
    """False: every request acts as the admin "demo" (`--demo`, `SCHEMABRIDGE_AUTH=off`)."""
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    operations: Operations | None = None
    demo_downstream: str | None = None
    """The demo downstream's URL when this API serves `serve --demo` (the monitor's editor
    starts new documents with a call to it); None otherwise."""
    worker_metrics: WorkerMetrics | None = None
    """The figures of the worker in this process (`serve`, a worker's health port)."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server serving the app stops (`stop_streams`): the open event streams
    end, telling their clients to reconnect, instead of holding the drain for its grace."""


def stop_streams(app: FastAPI) -> None:
    """Tell `app`'s open event streams to end: its server stops. Any other app (no
    `ApiContext`) has none."""
    context = getattr(app.state, "schemabridge", None)
    if isinstance(context, ApiContext):
        context.stopping.set()


async def api_context(request: Request) -> ApiContext:
    # async (though it awaits nothing): FastAPI runs a plain `def` dependency in its thread
    # pool, which cost 18 % of an api process's samples under submission load.
    context: ApiContext = request.app.state.schemabridge
    return context


ContextDep = Annotated[ApiContext, Depends(api_context)]


async def operations(context: ContextDep) -> Operations:
    if context.operations is None:  # a request before the lifespan started, or after it ended
        raise Unavailable("the API is starting or stopping; try again", code="not_ready")
    return context.operations


OperationsDep = Annotated[Operations, Depends(operations)]
