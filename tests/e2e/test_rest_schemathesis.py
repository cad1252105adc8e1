"""Property-based tests of the whole REST API against its own /openapi.json (schemathesis):
generated requests, valid and invalid, to every route, once with an admin key and once with
none. No answer may be a 5xx, use a status the route does not document, or break the
documented schema of its body.

Bounded: `MAX_EXAMPLES` per route and mode (a few hundred requests in all), each request
within `DEADLINE_MS`; the API is served on loopback (SQLite + embedded Redis), nothing else.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from tests.e2e.rest_harness import serving

MAX_EXAMPLES = 8
"""Per route (positive and negative cases drawn together) and caller, fewer where a route has
fewer distinct requests: a few hundred requests in all (about 480 once the 31 routes with the
run routes are served: 40 to 100 s on a loaded 2-core machine)."""
DEADLINE_MS = 5_000
"""Per generated request (the machine may be loaded; the API answers in milliseconds)."""
START_TIMEOUT_S = 60.0
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]


class ServedInThread:
    """The API served by uvicorn in a thread of its own (schemathesis calls it synchronously),
    with an admin key created before it starts."""

    def __init__(self, tmp_path: Path) -> None:
        self._settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self.admin_key = ""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runtime = await Runtime.open(self._settings)
        try:
            self.admin_key = (await Operations(runtime).keys.create(admin=True)).key
            app = create_app(self._settings, runtime_factory=borrowed_runtime(runtime), auth=True)
            async with serving(app) as url:
                self.url = url
                self._ready.set()
                await self._stop.wait()
        finally:
            await runtime.close()
            self._ready.set()

    def __enter__(self) -> ServedInThread:
        self._thread.start()
        assert self._ready.wait(START_TIMEOUT_S) and self.url, "the API did not start"
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_S)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedInThread]:
    with ServedInThread(tmp_path_factory.mktemp("schemathesis")) as running:
        yield running


def _exercise(operation: Any, url: str, headers: dict[str, str]) -> tuple[int, list[str]]:
    """Run the checks on generated requests to one operation: how many were sent, and the
    failures, described."""
    failures: list[str] = []
    sent = [0]
    strategy = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in MODES))

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=DEADLINE_MS,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        sent[0] += 1
        try:
            case.call_and_validate(base_url=url, headers=headers, timeout=30)
        except (AssertionError, FailureGroup) as failure:  # one check failed, or several
            failures.append(f"{operation.label}: {failure}")

    run()
    return sent[0], failures


@pytest.mark.timeout(240)
@pytest.mark.parametrize("with_key", [True, False], ids=["admin-key", "no-key"])
def test_every_route_keeps_to_its_documented_answers(
    served: ServedInThread, with_key: bool
) -> None:
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    headers = {"Authorization": f"Bearer {served.admin_key}"} if with_key else {}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    sent = 0
    for operation in operations:
        count, found = _exercise(operation, served.url, headers)
        sent, failures = sent + count, failures + found
    assert not failures, "\n\n".join(failures[:10])
    assert sent >= len(operations) * 2, sent  # every route was exercised
    print(f"{sent} requests to {len(operations)} routes")
