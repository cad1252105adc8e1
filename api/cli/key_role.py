"""Whether the key a command sends may call the admin routes, read when what the command
prints depends on it: a tenant key is offered no command the API would refuse it (403). A run
a deployment routed names its deployment to every key that reads the run (its id is no
secret: `GET /workflows/{name}/serving` gives it), but `deployments show` is an admin's. The
monitor applies the same rule (`opensAdminPages`, ui/static/js/who.js)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from api.cli.client_errors import ApiFailure

if TYPE_CHECKING:
    from api.cli.client import ApiClient


async def opens_admin_routes(api: ApiClient) -> bool:
    """Whether the key `api` sends is answered on the admin routes (`GET /keys/current`).
    True when that cannot be read (the route failed, or an older API has none): the command
    prints what it printed before, as the monitor offers every page then."""
    try:
        return (await api.settings.current_key()).opens_admin_routes
    except ApiFailure:
        return True
