"""The error answers a route gives by what it is made of, documented in one place.

Most refusals do not come from a route's own code but from what it is built with: the body
limits and the app-wide checks of a body (`api.rest.middleware.BodyLimit`,
`api.rest.body_depth`, `api.rest.body_shape`), the query check (`api.rest.route_inputs`),
authentication (`api.rest.auth`) and the operations' availability (`api.rest.deps`). A route
that forgot to list one of them in its `responses` documented less than it answers (an 11 MiB
body to `POST /keys` was a 413 its OpenAPI never named). So the statuses are read here from
the route itself, when the OpenAPI document is built (`api.rest.errors.errors_in_openapi`):

| the route                                   | answers                                   |
| ------------------------------------------- | ----------------------------------------- |
| takes a JSON body                           | 400, 413, 415, 422 (and 401: `KeyGate`)   |
| checks its query string (not `PROBED`)      | 422                                       |
| takes a caller (`CallerDep`, `AdminDep`)    | 401                                       |
| takes an admin caller (`AdminDep`)          | 403                                       |
| uses the operations (`OperationsDep`)       | 503                                       |
| any                                         | 500                                       |

A route's own `responses` still say its own codes for a status (they are kept); these only add
what it does not say.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from api.rest.auth import admin_caller, current_caller
from api.rest.deps import operations
from api.rest.query_params import dependants
from api.rest.route_inputs import PROBED

BODY_STATUSES = (400, 401, 413, 415, 422)
"""What any route that takes a body may answer about it (401: a body without a live key)."""


def route_statuses(route: APIRoute) -> set[int]:
    """The error statuses `route` can answer whatever its own code does (see the module
    docstring)."""
    calls = {current.call for current in dependants(route.dependant)}
    statuses = {500}
    if route.body_field is not None:
        statuses.update(BODY_STATUSES)
    if route.path_format not in PROBED:
        statuses.add(422)
    if current_caller in calls:
        statuses.add(401)
    if admin_caller in calls:
        statuses.add(403)
    if operations in calls:
        statuses.add(503)
    return statuses


def operation_statuses(routes: Sequence[BaseRoute]) -> dict[tuple[str, str], set[int]]:
    """By (OpenAPI path, lower-case method): the statuses `route_statuses` finds, for the
    routes of an app that are in its OpenAPI document."""
    found: dict[tuple[str, str], set[int]] = {}
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            found[(route.path_format, method.lower())] = route_statuses(route)
    return found
