"""The app-wide dependency that refuses a request its route does not take, before the route's
own parameters and body are validated (FastAPI solves an app's dependencies first):

1. a query parameter the route does not declare: 422 `unknown_query_parameter`
   (`api.rest.query_params`);
2. a query parameter given twice: 422 `invalid_request` (`api.rest.query_params`);
3. a body that is not JSON on a route that takes one: 415 `unsupported_media_type`
   (`api.rest.body_shape`);
4. a JSON body with a string or key holding an unpaired UTF-16 surrogate: 422 `not_utf8`,
   or else one with a key written twice in one object: 422 `duplicate_key`
   (`api.rest.body_shape`), whichever route it is sent to.

What each route declares is read once, from its FastAPI dependant, on its first request, and
kept by the `RouteInputs` of that app (one per `create_app`: no process-wide state). Routes left
out of the OpenAPI document (the `/docs` and `/redoc` pages, the `/` redirect) are pages for
a browser, whose links may carry any query string, and so may the probes' and scrapers'
(`/health`, `/metrics`): their query strings are not checked at all (neither by name nor for
a repeated parameter: they read none, so none is dropped), and their OpenAPI declares no 422
(`api.rest.route_errors`). Starlette's own
routes (`/openapi.json`, the mounted monitor and docs assets) do not run the app's
dependencies at all. A route's path is its own: no router is included with a prefix here.

A query string is refused only once the request has shown a live key, on a route that needs
one: without it the answer is 401, as for a body (`api.rest.key_gate`), not a 422 telling
anyone who reaches the port which parameters the route takes; a tenant key on an admin route
is told 403, as the route would tell it, before what is wrong with its query string or body;
with a key, the access log names the key of the refused request.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from api.rest import body_shape, query_params
from api.rest.auth import admin_caller, current_caller
from api.rest.deps import ApiContext
from schemas.errors import ApiError

PROBED = frozenset({"/health", "/metrics"})
"""Routes that monitoring probes and scrapers call, whose configurations may add a query
string of their own (`/health?full=1`): it is not checked by name there."""


@dataclass(frozen=True)
class Declared:
    """What one route takes."""

    query: tuple[str, ...] | None
    """The query parameters it reads; None: any (a page, not in the OpenAPI document)."""
    keyed: bool = False
    """It needs a key (its dependencies include `auth.current_caller`)."""
    admin: bool = False
    """It needs an admin key (its dependencies include `auth.admin_caller`)."""


def _needs(dependant: Dependant, call: object) -> bool:
    """Whether `call` is among the dependencies of `dependant`, at any depth."""
    return any(
        dependency.call is call or _needs(dependency, call) for dependency in dependant.dependencies
    )


async def _caller_first(request: Request, declared: Declared) -> None:
    """Before a query string is refused: 401 without a live key, 403 for a tenant key on an
    admin route, else the caller's key id left for the access log (`auth.current_caller` and
    `auth.admin_caller`, as the route would have run them). A key that cannot be checked now
    (the store unreachable) leaves the refusal as it is."""
    context = getattr(request.app.state, "schemabridge", None)
    if not isinstance(context, ApiContext) or not context.auth or context.operations is None:
        return
    try:
        caller = await current_caller(request, context, context.operations, None, None)
    except ApiError:
        raise
    except Exception:  # the route's refusal stands; its own authentication reports outages
        return
    if declared.admin:
        await admin_caller(caller)


class RouteInputs:
    """`Depends(RouteInputs())` in an app's `dependencies`: refuses what the request's route
    does not take (see the module docstring)."""

    def __init__(self) -> None:
        self._routes: dict[int, Declared] = {}
        """By `id` of the route (Starlette routes define `__eq__`, so they do not hash); the
        routes live as long as the app that holds this."""

    def declared(self, route: APIRoute) -> Declared:
        found = self._routes.get(id(route))
        if found is None:
            names = query_params.declared_names(route.dependant)
            any_query = not route.include_in_schema or route.path in PROBED
            found = Declared(
                None if any_query else names,
                keyed=_needs(route.dependant, current_caller),
                admin=_needs(route.dependant, admin_caller),
            )
            self._routes[id(route)] = found
        return found

    async def __call__(self, request: Request) -> None:
        route = request.scope.get("route")
        # Most requests (a submission among them) carry no query string: nothing to check.
        if request.scope.get("query_string"):
            query = request.query_params
            if not isinstance(route, APIRoute):
                query_params.refuse_repeated(query)
            elif (declared := self.declared(route)).query is not None:
                try:
                    query_params.refuse_unknown(request.method, route.path, declared.query, query)
                    query_params.refuse_repeated(query)
                except (ApiError, RequestValidationError):
                    if declared.keyed:
                        await _caller_first(request, declared)
                    raise
            # else a page or a probed route: it reads no query parameter, so none is dropped
        if isinstance(route, APIRoute):
            try:
                await body_shape.refuse_non_json(request, route)
                await body_shape.refuse_body_problems(request, route)
            except (ApiError, RequestValidationError):
                # The key gate checked the key before the body; an admin route's own check
                # comes first too, as for a query string.
                if (declared := self.declared(route)).admin:
                    await _caller_first(request, declared)
                raise
