"""The order of the REST routers: the submission and run reads are matched first, and no two
routers share a path and method, so that order decides nothing but the cost of matching."""

from __future__ import annotations

from starlette.routing import Match

from api.rest.app import DEFAULT_ROUTERS


def test_no_two_routes_share_a_path_and_method() -> None:
    seen: dict[tuple[str, str], str] = {}
    for router in DEFAULT_ROUTERS:
        for route in router.routes:
            for method in getattr(route, "methods", None) or {"*"}:
                key = (getattr(route, "path", ""), method)
                assert key not in seen, f"{key} in two routes: {seen[key]} and {route.name}"
                seen[key] = getattr(route, "name", "")


def test_submissions_and_run_reads_are_in_the_first_router() -> None:
    first = DEFAULT_ROUTERS[0]
    for method, path in [
        ("POST", "/workflows/orders/runs"),
        ("GET", "/runs/3f2a"),
        ("GET", "/runs"),
        ("GET", "/runs/3f2a/children"),
    ]:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        assert any(route.matches(scope)[0] == Match.FULL for route in first.routes), path
