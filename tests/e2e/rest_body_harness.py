"""The app the REST body tests post to: authentication off, one plain workflow published
(`PLAIN`), over real HTTP on loopback, with the operations beside it to check that a refused
body stored nothing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import settings_for

JSON = {"content-type": "application/json"}

PLAIN = {
    "name": "plain",
    "vertices": {"v": {"type": "GATEWAY", "config": {"url": "https://api.example.com/"}}},
}


@dataclass
class Served:
    http: httpx.AsyncClient
    ops: Operations


@contextlib.asynccontextmanager
async def plain_api(backend: Backend) -> AsyncIterator[Served]:
    """The app on `backend` with `PLAIN` published."""
    settings = settings_for(backend)
    runtime = await Runtime.open(settings)
    app = create_app(settings, runtime_factory=borrowed_runtime(runtime), auth=False)
    try:
        async with serving(app) as url, client(url) as http:
            ops = Operations(runtime)
            await ops.workflows.publish(PLAIN)
            yield Served(http, ops)
    finally:
        await runtime.close()
