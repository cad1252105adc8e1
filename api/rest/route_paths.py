"""Which route a path names, read from the routes' templates rather than from routing.

Starlette answers a method the path's routes do not take with the first route whose template
fit (`/keys/current` also fits `/keys/{key_id}`), and a request refused before routing (the
key gate's 401) names no route at all. Both want the route the path spells out: of the
routes whose template matches (and, for a request's route, that take its method), those with
the fewest path parameters (a literal segment beats a parameter, as the routers' order has
it for every path here).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Route


def _fitting(path: str, routes: Sequence[BaseRoute], method: str | None = None) -> list[Route]:
    fitting = [
        route
        for route in routes
        if isinstance(route, Route)
        and route.path_regex.match(path)
        and (method is None or method in (route.methods or ()))
    ]
    if not fitting:
        return []
    fewest = min(len(route.param_convertors) for route in fitting)
    return [route for route in fitting if len(route.param_convertors) == fewest]


def methods_at(path: str, routes: Sequence[BaseRoute]) -> str:
    """The methods the route(s) at `path` take, as an `Allow` header says them; "" for none."""
    methods = {method for route in _fitting(path, routes) for method in route.methods or ()}
    return ", ".join(sorted(methods))


def route_for(path: str, method: str, routes: Sequence[BaseRoute]) -> Route | None:
    """The route that takes `method` at `path`, or None."""
    fitting = _fitting(path, routes, method)
    return fitting[0] if fitting else None
