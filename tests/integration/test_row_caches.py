"""The rows an API process keeps in memory, seen from two runtimes ("two processes") on one
database and one Redis: API keys (`KeyOperations.authenticate`), refused on the very next call
after a revocation anywhere, and by the clock at expiry; the routing rows of submissions
(`RunOperations.submit`), current on the very next submission after whatever change another
process commits (an operator's switch, a deployment's start); and what follows from them, the
workflows that spawn a deployed one (`DeploymentOperations.get`'s warning). Nothing is kept
with the embedded Redis, which no other process reaches."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
import redis.asyncio as redis

from engine.coordination import invalidations
from engine.coordination.invalidations import Invalidations
from engine.operations import Operations
from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.operations.keys import KEY_CACHE_MAX_AGE_S
from engine.runtime import Runtime
from schemas.clock import Clock, FakeClock, SystemClock
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single, spawner_of
from tests.integration.scripts.helpers import unique


def counting(runtime: Runtime, read: str) -> list[int]:
    """A counter (its one item) of the calls of `runtime.store`'s method `read` from now on."""
    counter = [0]
    method: Callable[[str], Awaitable[Any]] = getattr(runtime.store, read)

    async def counted(key: str) -> Any:
        counter[0] += 1
        return await method(key)

    setattr(runtime.store, read, counted)
    return counter


def counting_key_reads(runtime: Runtime) -> list[int]:
    return counting(runtime, "find_api_key")


def on_own_tokens(runtime: Runtime, prefix: str) -> None:
    """Give `runtime` change tokens of this test's own: another test's revocation on the
    same Redis must not drop this test's copies."""
    runtime.invalidations = Invalidations(runtime.invalidations_redis, prefix=prefix)


@contextlib.asynccontextmanager
async def processes(backend: Backend, clock: Clock) -> AsyncIterator[tuple[Operations, Operations]]:
    """Two API processes' operations over one database and one Redis, on one clock."""
    prefix = unique("sb:rows-epoch-test") + ":"
    async with AsyncExitStack() as stack:
        pair = []
        for _ in range(2):
            runtime = await Runtime.open(settings_for(backend), clock=clock)
            stack.push_async_callback(runtime.close)
            on_own_tokens(runtime, prefix)
            pair.append(Operations(runtime))
        yield pair[0], pair[1]


@pytest.fixture(autouse=True)
def _patient_token_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token read may take 10 s here, not 50 ms: these tests are about when copies are kept
    and dropped, not how fast Redis answers. In a full CI run a read once took over 50 ms,
    read None (copies not used, as meant) and failed "kept" (as in test_invalidations)."""
    monkeypatch.setattr(invalidations, "READ_TIMEOUT_S", 10.0)


@pytest.fixture
async def two(backend: Backend) -> AsyncIterator[tuple[Operations, Operations, FakeClock]]:
    clock = FakeClock()
    async with processes(backend, clock) as (api, operator):
        yield api, operator, clock


async def kept(ops: Operations, secret: str) -> None:
    """Authenticate once, so that the key is kept."""
    assert await ops.keys.authenticate(secret) is not None


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_a_key_is_read_once_then_kept(two: tuple[Operations, Operations, FakeClock]) -> None:
    api, _, clock = two
    key = await api.keys.create(tenant="acme")
    await kept(api, key.key)
    reads = counting_key_reads(api.runtime)
    for _ in range(5):
        assert (await api.keys.authenticate(key.key)) is not None
    assert reads[0] == 0
    clock.advance(KEY_CACHE_MAX_AGE_S)
    assert (await api.keys.authenticate(key.key)) is not None
    assert reads[0] == 1, "a kept key is read again at its age limit"


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_a_revocation_elsewhere_is_refused_on_the_next_call(
    two: tuple[Operations, Operations, FakeClock],
) -> None:
    api, operator, _ = two
    key = await api.keys.create(tenant="acme")
    await kept(api, key.key)
    await operator.keys.revoke(key.id)  # nothing waited for after it
    assert await api.keys.authenticate(key.key) is None


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_a_kept_key_is_refused_at_its_expiry(
    two: tuple[Operations, Operations, FakeClock],
) -> None:
    api, _, clock = two
    key = await api.keys.create(admin=True, expires_in_days=1.0)
    await kept(api, key.key)
    reads = counting_key_reads(api.runtime)
    clock.advance(86_400.0 - 1.0)
    assert await api.keys.authenticate(key.key) is not None
    clock.advance(1.0)
    assert await api.keys.authenticate(key.key) is None
    assert reads[0] <= 1


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_with_the_embedded_redis_every_call_reads_the_store(backend: Backend) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        key = await ops.keys.create(tenant="acme")
        reads = counting_key_reads(runtime)
        for _ in range(3):
            assert await ops.keys.authenticate(key.key) is not None
        assert reads[0] == 3
    finally:
        await runtime.close()


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_routing_follows_changes_committed_by_another_process(
    two: tuple[Operations, Operations, FakeClock],
) -> None:
    api, operator, _ = two
    for url in ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v2", "http://127.0.0.1:9/v3"):
        await operator.workflows.publish(single("orders", url))
    assert (await api.runs.submit("orders", {})).run.version == 1  # read, and kept
    reads = counting(api.runtime, "serving")
    assert (await api.runs.submit("orders", {})).run.version == 1
    assert reads[0] == 0, "the routing row is kept"

    await operator.deployments.set_serving("orders", 2, actor="test")  # then nothing waited for
    assert not operator.runtime.invalidations._sending, "its token replaced before it returned"
    assert (await api.runs.submit("orders", {})).run.version == 2
    assert reads[0] == 1

    await operator.deployments.start(
        "orders",
        3,
        actor="test",
        stages=[StageSpec(weight=100, min_runs=1000, min_duration_seconds=3600)],
        rollback=RollbackSpec(),
    )
    routed = (await api.runs.submit("orders", {})).run
    assert (routed.version, routed.route) == (3, "candidate")


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_a_revocation_redis_did_not_take_waits_out_the_copies(backend: Backend) -> None:
    async with processes(backend, SystemClock()) as (api, operator):
        key = await operator.keys.create(tenant="acme")
        await kept(api, key.key)

        async def refused(*_args: object, **_kwargs: object) -> int:
            raise redis.ConnectionError("the operator's connection to Redis dropped")

        operator.runtime.invalidations_redis.set = refused  # type: ignore[method-assign]
        started = time.monotonic()
        await operator.keys.revoke(key.id)
        assert time.monotonic() - started >= KEY_CACHE_MAX_AGE_S
        assert await api.runtime.invalidations.token("api-keys") is not None
        assert await api.keys.authenticate(key.key) is None, "yet revoked when revoke returned"


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_with_the_embedded_redis_every_submission_reads_its_routing_row(
    backend: Backend,
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(single("orders", "http://127.0.0.1:9/x"))
        reads = counting(runtime, "serving")
        for _ in range(3):
            await ops.runs.submit("orders", {})
        assert reads[0] == 3
    finally:
        await runtime.close()


HOLD = [StageSpec(weight=10, min_runs=1000), StageSpec(weight=100)]


async def parents_said(ops: Operations, deployment_id: str) -> str | None:
    """The spawning parents a running deployment's view names (None: none)."""
    view = await ops.deployments.get(deployment_id)
    assert view.status == "RUNNING"
    said = [w for w in view.warnings if w.startswith("orders is a SPAWNER's child")]
    return None if not said else said[0].split(" in the serving version of ")[1].split(":")[0]


@pytest.mark.parametrize("backend", ["server"], indirect=True)
async def test_a_deployments_view_names_its_parents_as_another_process_changes_them(
    two: tuple[Operations, Operations, FakeClock],
) -> None:
    """A running deployment's view, polled every few seconds, keeps which workflows spawn the
    deployed one while no routing row changes (they depend on nothing else), and names them
    anew on the next poll after another process commits a change."""
    api, operator, _ = two
    for url in ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v2"):
        await operator.workflows.publish(single("orders", url))
    started = await operator.deployments.start(
        "orders", 2, actor="test", stages=HOLD, rollback=RollbackSpec()
    )
    reads = counting(api.runtime, "spawning_parents")
    assert await parents_said(api, started.id) is None
    assert await parents_said(api, started.id) is None
    assert reads[0] == 1, "kept"

    await operator.workflows.publish(spawner_of("parent", "orders"))  # its v1 serves at once
    assert await parents_said(api, started.id) == "parent v1"
    await operator.workflows.publish(single("parent", "http://127.0.0.1:9/p"))  # v2: not served
    assert await parents_said(api, started.id) == "parent v1"
    assert reads[0] == 2

    await operator.deployments.set_serving("parent", 2, actor="test")
    assert await parents_said(api, started.id) is None
    assert reads[0] == 3


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
async def test_with_the_embedded_redis_every_deployment_view_reads_its_parents(
    backend: Backend,
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        for url in ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v2"):
            await ops.workflows.publish(single("orders", url))
        await ops.workflows.publish(spawner_of("parent", "orders"))
        started = await ops.deployments.start(
            "orders", 2, actor="test", stages=HOLD, rollback=RollbackSpec()
        )
        reads = counting(runtime, "spawning_parents")
        for _ in range(3):
            assert await parents_said(ops, started.id) == "parent v1"
        assert reads[0] == 3
    finally:
        await runtime.close()
