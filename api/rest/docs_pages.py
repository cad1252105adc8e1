"""The API's reference pages, `/docs` (Swagger UI) and `/redoc`, with their scripts served by
this process.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so on a machine with no way out (as
SchemaBridge's machines often are; the monitor fetches nothing from the network either) they
stayed blank. The scripts come from the `fastapi-offline` package: Swagger UI 5, which reads the
OpenAPI 3.1 documents FastAPI writes, and ReDoc 2. ReDoc's sidebar still drew Redocly's logo
from cdn.redoc.ly, and this ReDoc has no option to leave it out, so its script is served with
that image taken out (the "API docs by Redocly" link stays, as text). tests/e2e/test_ui_auth.py
opens `/docs` and `/redoc` in a browser that may not leave loopback and checks every request
either page makes goes to the API.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS_PATH = "/docs/assets"
DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
REDOC_JS = "redoc.standalone.js"
REDOC_LOGO = (
    'e?r.createElement("img",{alt:"redocly logo",onError:()=>t(!1),'
    'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"}):null'
)
"""The sidebar's logo in ReDoc's minified script: an image drawn once the page is up."""
PAGE_HEADERS = {
    # Never framed: Swagger UI takes a key ("Authorize") and sends requests with it, so a page
    # of another site that framed it could have an operator click through a request unseen.
    # Its scripts are inline, so the monitor's whole policy (api.rest.ui) would break it.
    "Content-Security-Policy": "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""The headers of `/docs` and `/redoc`, as the monitor's pages have them."""


@cache
def redoc_script() -> bytes:
    """ReDoc's script with its one outside request, the sidebar's logo, taken out."""
    script = (ASSETS_DIR / REDOC_JS).read_text(encoding="utf-8")
    if script.count(REDOC_LOGO) != 1:
        raise RuntimeError(f"{REDOC_JS} of fastapi-offline no longer draws the logo it did")
    return script.replace(REDOC_LOGO, "null").encode()


def mount_docs(app: FastAPI) -> None:
    """`/docs` and `/redoc` for `app` (created with `docs_url=None, redoc_url=None`)."""

    @app.get(f"{ASSETS_PATH}/{REDOC_JS}", include_in_schema=False)
    async def redoc_js() -> Response:
        # Before the mount below, so that the package's own copy of the file is never served.
        return Response(redoc_script(), media_type="text/javascript")

    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi = app.openapi_url or "/openapi.json"

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{openapi}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        )
        page.headers.update(PAGE_HEADERS)
        return page

    @app.get(REDOC_PATH, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{openapi}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_PATH}/{REDOC_JS}",
            redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
        page.headers.update(PAGE_HEADERS)
        return page
