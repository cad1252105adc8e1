"""Property-based tests of the whole REST API against its own /openapi.json (schemathesis):
generated requests, valid and invalid, to every route, once with an admin key and once with
none, with every check schemathesis has. Among them: no answer is a 5xx, uses a status the
route does not document or breaks the documented schema of its body; a schema-invalid request
is refused; and `ignored_auth`: a route that declares authentication refuses the same request
without credentials and with made-up ones (the check sends those probes itself).

A request the schema allows may still be refused with 422 where the rule cannot be said in
OpenAPI (`SEMANTIC_422`, each with its reason); everywhere else a schema-valid request must be
accepted.

Bounded: `MAX_EXAMPLES` per route and mode (a few hundred requests in all), each request
within `DEADLINE_MS`; the API is served on loopback (SQLite + embedded Redis), nothing else.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import schemathesis
from cryptography.fernet import Fernet
from fastapi import Depends, FastAPI
from fastapi.security import HTTPBearer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import FailureGroup

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from tests.e2e.rest_harness import serving

MAX_EXAMPLES = 8
"""Per route (positive and negative cases drawn together) and caller, fewer where a route has
fewer distinct requests: a few hundred requests in all (418 to the 54 routes per caller, the
deployment routes, `/deployment-ids` and `/audit` among them: 31 s for both callers on a
2-core machine at load 7)."""
DEADLINE_MS = 5_000
"""Per generated request (the machine may be loaded; the API answers in milliseconds)."""
START_TIMEOUT_S = 60.0
SCHEMA_TIMEOUT_S = 60.0
"""For the first GET of /openapi.json, which builds the document (schemathesis allows 10 s: a
CI run at load 8 took longer)."""
SEMANTIC_422 = {
    "POST /workflows": "a workflow is checked as a graph with expressions, beyond its JSON shape",
    "POST /workflows/{name}/runs": "the input is checked against the workflow's inputSchema",
    "POST /keys": "a key is for one tenant or is an admin key: exactly one of the two",
    "POST /runs/retry": "a batch names ids or a filter: exactly one of the two",
    "POST /runs/retry/preview": (
        "it names ids or a filter, exactly one of the two, as the batch does; its filter is a "
        "run list's: a status any case of a run status, a version needs its workflow, a "
        "parent's children are never roots (parent with roots=true), a parent is a whole id "
        "(a prefix of one is refused)"
    ),
    "GET /runs": (
        "a cursor is opaque: only one the API gave out is valid; a version needs its workflow; "
        "a parent's children are never roots (parent with roots=true); a parent is a whole "
        "id (a prefix of one is refused); `tenantId` and its deprecated name `tenant` must agree"
    ),
    "GET /runs/{run_id}/children": "a cursor is opaque: only one the API gave out is valid",
    "GET /runs/{run_id}/logs": "a cursor is opaque: only one the API gave out is valid",
    "GET /deployments": "a cursor is opaque: only one the API gave out is valid",
    "GET /workflows/{name}/deployments": "a cursor is opaque: only one the API gave out is valid",
    "PUT /destinations/{key}/caps": "a destination key must be one a call can have",
    "PATCH /destinations/{key}/caps": (
        "a destination key must be one a call can have, a change must name a cap, and a rate "
        "alone needs caps to change"
    ),
    "DELETE /destinations/{key}/caps": "a destination key must be one a call can have",
    "POST /workflows/{name}/deployments": "stages must rise in weight and end at 100",
    "POST /workflows/{name}/deployments/preview": "stages must rise in weight and end at 100",
    "GET /secrets": "`tenantId` and its deprecated name `tenant` must agree",
    "DELETE /secrets/{name}": (
        "the tenant is required under one of its names, `tenantId` or the deprecated `tenant`, "
        "and the two must agree"
    ),
    "POST /destinations/{key}/breakers/reset": (
        "`tenantId` and its deprecated name `tenant` must agree"
    ),
    "GET /audit": (
        "a cursor is opaque: only one the API gave out is valid; a subjectId needs its subjectKind"
    ),
}
"""Routes whose schema-valid requests may be refused with 422, and why."""
ACCEPTED = ["2xx", "401", "403", "404", "409", "429"]
"""What `positive_data_acceptance` accepts for a schema-valid request (its default set)."""
CONFIG = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-name": name,
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "422"]}},
            }
            for name in SEMANTIC_422
        ]
    }
)
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]


class ServedInThread:
    """The API served by uvicorn in a thread of its own (schemathesis calls it synchronously),
    with an admin key created before it starts."""

    def __init__(self, tmp_path: Path) -> None:
        self._settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}",
            secret_keys=Fernet.generate_key().decode(),
        )
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
    schema = schemathesis.openapi.from_url(
        f"{served.url}/openapi.json", config=CONFIG, timeout=SCHEMA_TIMEOUT_S
    )
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


careless = FastAPI()
"""An app whose one route declares a key and never checks it."""
_bearer = HTTPBearer(auto_error=False)
BearerDep = Annotated[Any, Depends(_bearer)]


@careless.get("/careless")
async def _careless(credentials: BearerDep) -> dict[str, str]:
    return {"status": "ok"}


def test_the_checks_catch_a_route_that_ignores_its_authentication(tmp_path: Path) -> None:
    """The harness above would pass vacuously if `ignored_auth` were not among its checks: a
    route that declares a key but never checks it must be caught."""
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    loop: list[asyncio.AbstractEventLoop] = []
    url: list[str] = []

    async def serve() -> None:
        loop.append(asyncio.get_running_loop())
        stop.append(asyncio.Event())
        async with serving(careless) as served_url:
            url.append(served_url)
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    try:
        assert ready.wait(START_TIMEOUT_S), "the careless app did not start"
        schema = schemathesis.openapi.from_url(
            f"{url[0]}/openapi.json", config=CONFIG, timeout=SCHEMA_TIMEOUT_S
        )
        [operation] = [result.ok() for result in schema.get_all_operations()]
        _, failures = _exercise(operation, url[0], {"Authorization": "Bearer made-up"})
    finally:
        if loop and stop:
            loop[0].call_soon_threadsafe(stop[0].set)
        thread.join(START_TIMEOUT_S)
    assert failures, "ignored_auth did not flag a route that ignores its key"
    assert any("API accepts requests without authentication" in f for f in failures), failures
