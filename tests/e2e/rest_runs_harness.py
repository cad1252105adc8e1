"""An API on a real runtime for the workflow and run route tests: uvicorn on a free loopback
port, an admin key and two tenant keys, and (when asked) a worker in the same loop running
the runs against the demo downstream."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import running_worker, settings_for


@dataclass
class Api:
    url: str
    ops: Operations
    runtime: Runtime
    admin: str
    acme: str
    """A tenant key of "acme"."""
    globex: str
    """A tenant key of "globex"."""

    def http(self, key: str | None) -> httpx.AsyncClient:
        return client(self.url, key)


@contextlib.asynccontextmanager
async def api_on(backend: Backend, *, worker: bool, **settings: Any) -> AsyncIterator[Api]:
    """The API (and a worker when `worker`) on a fresh runtime on `backend`."""
    runtime = await Runtime.open(settings_for(backend, **settings))
    try:
        ops = Operations(runtime)
        admin = await ops.keys.create(admin=True, name="admin")
        acme = await ops.keys.create(tenant="acme")
        globex = await ops.keys.create(tenant="globex")
        app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
        async with contextlib.AsyncExitStack() as stack:
            if worker:
                await stack.enter_async_context(running_worker(runtime))
            url = await stack.enter_async_context(serving(app))
            yield Api(url, ops, runtime, admin.key, acme.key, globex.key)
    finally:
        await runtime.close()


def assert_error(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error body of `answer`, after checking its status, code and message."""
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body
