"""A prefix of a run id (the 8 characters the web monitor shows) resolved by the operations
layer, on both backends: one run, several, none, another tenant's never, and the range read
from the primary key (engine/operations/id_prefixes.py, engine.store.listing.ids_in_range)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.dialects import sqlite

from engine.operations import Operations
from engine.runtime import Runtime
from engine.store import db, listing
from schemas.errors import InvalidRequest
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

UNREACHABLE = "http://127.0.0.1:9/never"

# Ids chosen so that prefixes meet: two share their first 8 digits (and differ at the 9th),
# one shares 7 of them, one is another tenant's with the same 8 as the pair.
PAIR = ("3f2a9c1e-0000-4000-8000-000000000001", "3f2a9c1e-9000-4000-8000-000000000002")
NEIGHBOUR = "3f2a9c1f-0000-4000-8000-000000000003"
OTHER_TENANTS = "3f2a9c1e-5000-4000-8000-000000000004"
LAST = "ffffffff-ffff-4fff-bfff-ffffffffffff"
NINE = "0000000a-0000-4000-8000-000000000005"
"""Right after `00000009…`: a bound computed as "the last character plus one" (`0000000:`)
would hold it under a linguistic collation, where `:` sorts apart from the digits."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


@pytest.fixture
async def ops(runtime: Runtime) -> Operations:
    ops = Operations(runtime)
    await ops.workflows.publish(single("prefixed", UNREACHABLE))
    version = await runtime.store.get_version("prefixed", None)
    for run_id in (*PAIR, NEIGHBOUR, LAST, NINE):
        await runtime.store.create_run(version, {}, tenant_id="acme", run_id=run_id)
    await runtime.store.create_run(version, {}, tenant_id="globex", run_id=OTHER_TENANTS)
    return ops


async def test_a_unique_prefix_names_its_run(ops: Operations) -> None:
    found = await ops.runs.match_prefix("3f2a9c1f")
    assert (found.prefix, found.ids, found.more) == ("3f2a9c1f", [NEIGHBOUR], False)
    # More of the id, in capitals, with or without its hyphens, reads the same.
    for given in ("3F2A9C1E-0", "3f2a9c1e0", "3f2a9c1e-0000-4000-8000-00000000000"):
        found = await ops.runs.match_prefix(given)
        assert found.ids == [PAIR[0]], given
    assert (await ops.runs.match_prefix("3f2a9c1e0")).prefix == "3f2a9c1e-0"
    assert (await ops.runs.match_prefix(PAIR[1])).ids == [PAIR[1]]  # a whole id is a prefix


async def test_an_ambiguous_prefix_lists_its_runs_in_id_order(ops: Operations) -> None:
    found = await ops.runs.match_prefix("3f2a9c1e")
    assert found.ids == sorted([*PAIR, OTHER_TENANTS]) and not found.more
    first = await ops.runs.match_prefix("3f2a9c1e", limit=2)
    assert (first.ids, first.more) == ([PAIR[0], OTHER_TENANTS], True)


async def test_a_tenant_never_resolves_another_tenants_run(ops: Operations) -> None:
    assert (await ops.runs.match_prefix("3f2a9c1e", tenant="acme")).ids == list(PAIR)
    assert (await ops.runs.match_prefix("3f2a9c1e-5", tenant="acme")).ids == []
    assert (await ops.runs.match_prefix("3f2a9c1e-5", tenant="globex")).ids == [OTHER_TENANTS]
    assert (await ops.runs.match_prefix("3f2a9c1f", tenant="globex")).ids == []


async def test_the_range_ends_where_the_prefix_does(ops: Operations) -> None:
    assert (await ops.runs.match_prefix("ffffffff")).ids == [LAST]  # no upper bound
    assert (await ops.runs.match_prefix("00000009")).ids == []
    assert (await ops.runs.match_prefix("0000000a")).ids == [NINE]
    assert (await ops.runs.match_prefix("3f2a9c1d")).ids == []


@pytest.mark.parametrize("given", ["3f2a9c1", "3f2a-9c1", "3f2a9c1g", "", "3f2a9c1e%", "x" * 40])
async def test_what_is_not_a_prefix_is_refused(ops: Operations, given: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await ops.runs.match_prefix(given)
    assert refused.value.code == "invalid_run_id_prefix"


async def test_the_limit_is_bounded(ops: Operations) -> None:
    for limit in (0, 21):
        with pytest.raises(InvalidRequest) as refused:
            await ops.runs.match_prefix("3f2a9c1e", limit=limit)
        assert refused.value.code == "invalid_limit"


async def test_sqlite_reads_the_range_from_the_primary_key(tmp_path: Path) -> None:
    """SQLite picks an index by the query's shape alone: with the tenant compared plainly it
    would prefer `ix_run_tenant_created` (an equality) and read every run of the tenant.
    PostgreSQL chooses by its statistics, which put a key range of one id in 4 billion far
    below any tenant's runs."""
    statement = listing.ids_in_range_statement(
        listing.runs, "3f2a9c1e", "3f2a9c1f", 6, tenant="acme"
    )
    sql = str(statement.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    engines = db.create_engines(f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    try:
        await db.upgrade(engines)
        async with engines.read.connect() as conn:
            plan = [str(r[3]) for r in (await conn.execute(text(f"EXPLAIN QUERY PLAN {sql}")))]
    finally:
        await engines.dispose()
    assert any("sqlite_autoindex_run_1 (id>? AND id<?)" in line for line in plan), plan
    assert not any("tenant" in line for line in plan), plan
