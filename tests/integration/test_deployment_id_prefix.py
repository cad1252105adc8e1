"""A prefix of a deployment's id (the 8 characters the monitor's deployments pages show)
resolved by the operations layer, on both backends, with the same range of the primary key as
a run id's prefix (engine/operations/id_prefixes.py, engine.store.listing.ids_in_range)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import insert, select

from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.deployment_rows import deployments
from schemas.errors import InvalidRequest
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

UNREACHABLE = "http://127.0.0.1:9/never"
# Copies of a real deployment's row under ids chosen so that prefixes meet (uuid4 ids meet
# once in 4 billion): two share their first 8 digits, one is right after them.
PAIR = ("5b0c7e2d-0000-4000-8000-000000000001", "5b0c7e2d-9000-4000-8000-000000000002")
NEIGHBOUR = "5b0c7e2e-0000-4000-8000-000000000003"


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


@pytest.fixture
async def started(runtime: Runtime) -> str:
    """The id of a deployment started for real, and its copies under `PAIR` and `NEIGHBOUR`
    (ended, so that the one-running-deployment index lets them be)."""
    ops = Operations(runtime)
    await ops.workflows.publish(single("dep-prefixed", UNREACHABLE, description="v1"))
    await ops.workflows.publish(single("dep-prefixed", UNREACHABLE, description="v2"))
    view = await ops.deployments.start("dep-prefixed", 2, actor="test")
    async with runtime.store._engines.write.begin() as conn:
        row = (await conn.execute(select(deployments).where(deployments.c.id == view.id))).one()
        for deployment_id in (*PAIR, NEIGHBOUR):
            copy = {**row._mapping, "id": deployment_id, "status": "ABORTED"}
            await conn.execute(insert(deployments).values(copy))
    return view.id


async def test_a_unique_prefix_names_its_deployment(runtime: Runtime, started: str) -> None:
    ops = Operations(runtime)
    found = await ops.deployments.match_prefix(started[:8].upper())
    assert (found.prefix, found.ids, found.more) == (started[:8], [started], False)
    assert (await ops.deployments.match_prefix("5b0c7e2e")).ids == [NEIGHBOUR]
    assert (await ops.deployments.match_prefix("5b0c7e2d9")).ids == [PAIR[1]]
    assert (await ops.deployments.match_prefix(started)).ids == [started]  # a whole id too


async def test_an_ambiguous_prefix_lists_its_deployments(runtime: Runtime, started: str) -> None:
    ops = Operations(runtime)
    found = await ops.deployments.match_prefix("5b0c7e2d")
    assert (found.ids, found.more) == (list(PAIR), False)
    first = await ops.deployments.match_prefix("5b0c7e2d", limit=1)
    assert (first.ids, first.more) == ([PAIR[0]], True)
    assert (await ops.deployments.match_prefix("5b0c7e2c")).ids == []


async def test_what_is_not_a_prefix_is_refused(runtime: Runtime, started: str) -> None:
    ops = Operations(runtime)
    for given in ("5b0c7e2", "5b0c7e2g", ""):
        with pytest.raises(InvalidRequest) as refused:
            await ops.deployments.match_prefix(given)
        assert refused.value.code == "invalid_deployment_id_prefix", given
    for limit in (0, 21):
        with pytest.raises(InvalidRequest) as refused:
            await ops.deployments.match_prefix("5b0c7e2d", limit=limit)
        assert refused.value.code == "invalid_limit"
