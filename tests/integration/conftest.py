"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.deploy_harness import Deploying, deploying
from tests.integration.engine_harness import settings_for
from tests.integration.scripts.helpers import BACKENDS


@pytest.fixture(params=BACKENDS)
def coord_url(request: pytest.FixtureRequest) -> str | None:
    """The coordination backend of a test: None = the embedded server; else the URL of the
    flushed test Redis."""
    if request.param == "embedded":
        return None
    url: str = request.getfixturevalue("redis_url")
    return url


@pytest.fixture
async def env(backend: Backend) -> AsyncIterator[Deploying]:
    """A runtime on a `FakeClock` with a worker, for the deployment tests
    (tests/integration/deploy_harness.py)."""
    async with deploying(backend) as deploying_env:
        yield deploying_env


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    """A runtime on the test's backend, closed after it (no worker: a test starts its own)."""
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


@pytest.fixture
def ops(runtime: Runtime) -> Operations:
    """The operations layer over `runtime`."""
    return Operations(runtime)
