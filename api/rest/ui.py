"""The web run monitor at `/ui`: its static files, served with a strict Content-Security-Policy.

The monitor is plain files (`ui.STATIC_DIR`) that talk to this API with `fetch`; nothing is
rendered on the server. The policy allows scripts, styles, images and connections from this
origin only, and no inline script or style, so text a downstream answered (an error body, an
output) can never run as code even if a bug put it in the page as markup. `GET /` redirects
to the monitor.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from starlette.responses import Response
from starlette.types import Scope

import ui
from api.rest.deps import ContextDep

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (the ETag makes that a 304), so an upgrade shows at once.
    "Cache-Control": "no-cache",
}
MOUNT_PATH = "/ui"


class MonitorFiles(StaticFiles):
    """`StaticFiles` whose every answer carries `SECURITY_HEADERS`."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


class MonitorConfig(BaseModel):
    """What the monitor's pages need to know about this server."""

    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel)

    demo_downstream: str | None = None
    """The demo downstream's URL under `serve --demo` (the editor's starter document calls
    it); null on any other server."""


def mount_monitor(app: FastAPI) -> None:
    """Serve the monitor at `/ui/` (its settings at `/ui/config`) and redirect `/` there."""

    # Declared before the mount, which would otherwise answer the path with a 404.
    @app.get(
        f"{MOUNT_PATH}/config",
        response_model=MonitorConfig,
        tags=["monitoring"],
        summary="The web monitor's settings (open: it holds no secret)",
    )
    async def monitor_config(context: ContextDep) -> MonitorConfig:
        return MonitorConfig(demo_downstream=context.demo_downstream)

    app.mount(MOUNT_PATH, MonitorFiles(directory=ui.STATIC_DIR, html=True), name="ui")

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse(f"{MOUNT_PATH}/")
