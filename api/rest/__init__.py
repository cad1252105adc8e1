"""The REST API: the FastAPI app (`create_app`), its error answers, middleware, API-key
authentication, the health, metrics, keys, secrets, workflow and run routes (`routes_workflows`,
`routes_runs`, and the progress stream in `sse`), and `ApiServer` to serve it in a process."""

from api.rest.app import (
    RuntimeFactory,
    borrowed_runtime,
    create_app,
    create_health_app,
    opened_runtime,
)
from api.rest.auth import DEMO_CALLER, AdminDep, Caller, CallerDep
from api.rest.deps import ApiContext, ContextDep, OperationsDep
from api.rest.server import ApiServer

__all__ = [
    "DEMO_CALLER",
    "AdminDep",
    "ApiContext",
    "ApiServer",
    "Caller",
    "CallerDep",
    "ContextDep",
    "OperationsDep",
    "RuntimeFactory",
    "borrowed_runtime",
    "create_app",
    "create_health_app",
    "opened_runtime",
]
