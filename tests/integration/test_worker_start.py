"""What a worker does before its first claim."""

from __future__ import annotations

from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.test_gateway import wait_until


async def test_a_worker_builds_its_http_session_before_any_call(backend: Backend) -> None:
    """The session's TLS context loads the CA certificates (about 20 ms with the event loop
    held): built when the worker starts, not on its first call, which would pay it with an
    admission slot held and every other answer waiting."""
    runtime = await Runtime.open(settings_for(backend))
    try:
        assert not runtime.http.is_open  # a process that only reads (an api) never builds it
        async with running_worker(runtime):
            await wait_until(lambda: runtime.http.is_open)
    finally:
        await runtime.close()
