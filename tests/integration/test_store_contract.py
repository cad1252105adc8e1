"""The store's contract, run on SQLite and on PostgreSQL (docs/architecture.md, 'Testing')."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import event, text

from engine.store import Store, claims
from engine.store.records import StepFailed, StepParked, StepSucceeded, Waiting
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from schemas.waiting import WaitReason
from tests.conftest import Backend

CHAIN = Workflow.model_validate(
    {
        "name": "chain",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
            "b": {"type": "GATEWAY", "dependsOn": ["a"], "config": {"url": "http://127.0.0.1:1/b"}},
            "c": {"type": "GATEWAY", "dependsOn": ["a"], "config": {"url": "http://127.0.0.1:1/c"}},
            "d": {
                "type": "GATEWAY",
                "dependsOn": ["b", "c"],
                "config": {"url": "http://127.0.0.1:1/d"},
            },
        },
    }
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(backend: Backend, clock: FakeClock) -> AsyncIterator[Store]:
    store = await Store.open(backend.database_url, clock)
    yield store
    await store.close()


async def test_publish_is_versioned_and_idempotent(store: Store) -> None:
    v1 = await store.publish(CHAIN)
    again = await store.publish(CHAIN)
    changed = CHAIN.model_copy(update={"description": "changed"})
    v2 = await store.publish(changed)
    assert (v1.version, again.version, v2.version) == (1, 1, 2)
    assert (await store.get_version("chain")).version == 2
    assert (await store.get_version("chain", 1)).definition_hash == v1.definition_hash


async def test_diamond_runs_in_dependency_order(store: Store) -> None:
    version = await store.publish(CHAIN)
    run, created = await store.create_run(version, {"x": 1})
    assert created
    order: list[str] = []
    for _ in range(10):
        claimed = await store.claim(10, lease_s=30)
        if not claimed:
            break
        order.extend(sorted(c.vertex_id for c in claimed))
        report = await store.complete([StepSucceeded(c, {"v": c.vertex_id}) for c in claimed])
        assert report.recorded == len(claimed)
    assert order == ["a", "b", "c", "d"]
    final = await store.get_run(run.id)
    assert final is not None
    assert final.status == "SUCCEEDED"
    assert final.output == {"d": {"v": "d"}}


async def test_claim_is_exclusive_and_late_results_are_dropped(
    store: Store, clock: FakeClock
) -> None:
    version = await store.publish(CHAIN)
    await store.create_run(version, None)
    first = await store.claim(10, lease_s=5)
    assert [c.vertex_id for c in first] == ["a"]
    assert await store.claim(10, lease_s=5) == []
    clock.advance(6)
    requeued = await store.requeue_expired()
    assert [r[2] for r in requeued] == ["a"]
    second = await store.claim(10, lease_s=5)
    assert second[0].attempts == 2
    late = await store.complete([StepSucceeded(first[0], {"late": True})])
    assert late.dropped == [first[0].step_id]
    live = await store.complete([StepSucceeded(second[0], {"ok": True})])
    assert live.recorded == 1
    again = await store.complete([StepSucceeded(second[0], {"twice": True})])
    assert again.dropped == [second[0].step_id]
    steps = {s.vertex_id: s for s in await store.get_steps(second[0].run_id)}
    assert steps["a"].output == {"ok": True}


async def test_terminal_failure_fails_run_and_stops_claims(store: Store) -> None:
    version = await store.publish(CHAIN)
    run, _ = await store.create_run(version, None)
    (a,) = await store.claim(10, lease_s=30)
    await store.complete([StepFailed(a, {"kind": "http_error", "message": "400"})])
    final = await store.get_run(run.id)
    assert final is not None and final.status == "FAILED"
    assert final.error["vertexId"] == "a"
    assert await store.claim(10, lease_s=30) == []


async def test_a_claimed_step_carries_its_run(store: Store) -> None:
    version = await store.publish(CHAIN)
    run, _ = await store.create_run(
        version, {"x": [1, "two"]}, tenant_id="acme", timeout_tier="gateway", pinned_versions={}
    )
    (a,) = await store.claim(10, lease_s=30)
    assert (a.run_id, a.vertex_id, a.tenant_id, a.attempts, a.auto_retries) == (
        run.id,
        "a",
        "acme",
        1,
        0,
    )
    assert (a.workflow_name, a.workflow_version, a.timeout_tier, a.run_input) == (
        "chain",
        version.version,
        "gateway",
        {"x": [1, "two"]},
    )
    assert (a.parent_run_id, a.root_run_id, a.item_index, a.pinned_versions) == (
        None,
        run.id,
        None,
        {},
    )
    assert a.claim_token.endswith(str(a.step_id)) and not a.tenant_item_taken
    await store.complete([StepSucceeded(a, {"v": 1})])
    b, c = sorted(await store.claim(10, lease_s=30), key=lambda step: step.vertex_id)
    assert (b.vertex_id, c.vertex_id) == ("b", "c")
    assert b.outputs == c.outputs == {"a": {"v": 1}}


@pytest.mark.parametrize("after_a_short_claim", [False, True])
async def test_a_ready_step_of_a_stopped_run_is_held_back_not_executed(
    store: Store, after_a_short_claim: bool
) -> None:
    """The claim's backstop: a READY step whose run is no longer RUNNING (a race with a failing
    flush) is not handed out; it goes back to PENDING with its claim and attempt undone. The
    same for a claim after a short one (no tenant shares)."""
    version = await store.publish(CHAIN)
    if after_a_short_claim:
        assert await store.claim(10, lease_s=30) == []
    run, _ = await store.create_run(version, None)
    async with store._engines.write.begin() as conn:
        await conn.execute(text("UPDATE run SET status = 'FAILED' WHERE id = :r"), {"r": run.id})
    assert await store.claim(10, lease_s=30) == []
    async with store._engines.read.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT status, claim_token, lease_expires_at, attempts FROM step "
                    "WHERE run_id = :r AND vertex_id = 'a'"
                ),
                {"r": run.id},
            )
        ).one()
    assert tuple(row) == ("PENDING", None, None, 0)


async def test_redispatch_and_park_respect_not_before(store: Store, clock: FakeClock) -> None:
    version = await store.publish(CHAIN)
    await store.create_run(version, None)
    (a,) = await store.claim(10, lease_s=30)
    await store.complete([StepFailed(a, {"kind": "external_overload"}, retry_at=clock.now() + 5)])
    assert await store.claim(10, lease_s=30) == []
    clock.advance(5)
    (a2,) = await store.claim(10, lease_s=30)
    assert (a2.attempts, a2.auto_retries) == (2, 1)
    await store.complete([StepParked(a2, clock.now() + 10, "waiting")])
    clock.advance(9)
    assert await store.claim(10, lease_s=30) == []
    clock.advance(1)
    assert len(await store.claim(10, lease_s=30)) == 1


async def test_idempotency_key_returns_existing_run(store: Store) -> None:
    version = await store.publish(CHAIN)
    first, created = await store.create_run(version, {"n": 1}, idempotency_key="k1")
    second, created2 = await store.create_run(version, {"n": 2}, idempotency_key="k1")
    assert created and not created2
    assert second.id == first.id and second.input == {"n": 1}


async def test_claims_are_shared_fairly_across_tenants(store: Store) -> None:
    version = await store.publish(CHAIN)
    for _ in range(20):
        await store.create_run(version, None, tenant_id="flood")
    small, _ = await store.create_run(version, None, tenant_id="small")
    claimed = await store.claim(4, lease_s=30)
    assert len(claimed) == 4
    assert small.id in {c.run_id for c in claimed}
    # A lone tenant still gets full batches.
    rest = await store.claim(50, lease_s=30)
    assert len(rest) == 17


async def test_every_tenant_gets_its_turn_beyond_one_list_of_tenants(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More tenants than one claim lists (64): each is served within a few claims, not once
    the first 64 have nothing left (they would have kept their READY steps here)."""
    monkeypatch.setattr(claims, "TENANT_LIST_TTL_S", 0.0)  # a fresh list for every claim
    tenants = [f"tenant-{n:03d}" for n in range(claims.MAX_TENANTS_PER_CLAIM + 16)]
    version = await store.publish(CHAIN)
    for tenant in tenants:
        for _ in range(3):
            await store.create_run(version, None, tenant_id=tenant)
    served: set[str] = set()
    per_claim: list[int] = []
    for _ in range(6):  # 80 tenants, 16 steps a claim: 5 claims if no tenant is served twice
        claimed = await store.claim(16, lease_s=30)
        per_claim.append(len(claimed))
        served |= {step.tenant_id for step in claimed}
    assert per_claim == [16] * 6
    assert served == set(tenants)


async def _claim_rounds(
    store: Store, tenants: list[str], rounds: int, limit: int, pause_s: float = 0.0
) -> set[str]:
    """Tenants served by `rounds` claims of `limit`, every tenant keeping READY steps."""
    version = await store.publish(CHAIN)
    for tenant in tenants:
        for _ in range(rounds):
            await store.create_run(version, None, tenant_id=tenant)
    served: set[str] = set()
    for _ in range(rounds):
        claimed = await store.claim(limit, lease_s=30)
        assert len(claimed) == limit
        served |= {step.tenant_id for step in claimed}
        await asyncio.sleep(pause_s)
    return served


async def test_claims_smaller_than_the_list_take_turns_across_refreshes(store: Store) -> None:
    """48 tenants, claims of 16 made further apart than the list is reused: each fresh list
    starts after the last tenant served, not at the first tenant again."""
    tenants = [f"tenant-{n:03d}" for n in range(48)]
    served = await _claim_rounds(store, tenants, rounds=4, limit=16, pause_s=0.3)
    assert served == set(tenants)


@pytest.mark.parametrize("count", [64, 128])
async def test_claims_of_a_batch_reach_every_tenant_of_full_lists(
    store: Store, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """Exactly one list (64 tenants) or two, claims of 32 (a worker's batch), a fresh list for
    every claim."""
    monkeypatch.setattr(claims, "TENANT_LIST_TTL_S", 0.0)
    tenants = [f"tenant-{n:03d}" for n in range(count)]
    served = await _claim_rounds(store, tenants, rounds=count // 32 + 1, limit=32)
    assert served == set(tenants)


async def test_claims_of_one_take_turns_across_tenants(store: Store) -> None:
    """A worker claims one step at a time when its steps are slow: those claims take turns
    too, instead of taking the oldest step (the flood's) every time."""
    version = await store.publish(CHAIN)
    for _ in range(20):
        await store.create_run(version, None, tenant_id="flood")
    await store.create_run(version, None, tenant_id="small")
    served = [step.tenant_id for _ in range(4) for step in await store.claim(1, lease_s=30)]
    assert "small" in served, served


async def test_a_claim_after_a_short_one_serves_every_tenant_within_two(store: Store) -> None:
    """A claim that found the queue shorter than it asked takes the next claim's steps oldest
    first (nothing to share out); a full claim brings the shares back at once."""
    assert await store.claim(10, lease_s=30) == []  # an empty queue: short
    version = await store.publish(CHAIN)
    for _ in range(20):
        await store.create_run(version, None, tenant_id="flood")
    small, _ = await store.create_run(version, None, tenant_id="small")
    first = await store.claim(4, lease_s=30)
    second = await store.claim(4, lease_s=30)
    assert len(first) == len(second) == 4
    assert small.id in {step.run_id for step in [*first, *second]}


async def test_a_claim_on_a_short_queue_is_one_statement(store: Store) -> None:
    """Once a claim came back short, the next has no shares to take: on PostgreSQL one
    statement in its transaction (the steps and their runs together); SQLite reads the runs
    after the fill."""
    version = await store.publish(CHAIN)
    assert await store.claim(10, lease_s=30) == []
    runs = [(await store.create_run(version, {"n": n}, tenant_id=f"t{n}"))[0] for n in range(3)]
    executed: list[str] = []

    def record(conn: object, cursor: object, statement: str, *_: object) -> None:
        executed.append(statement.split(maxsplit=1)[0])

    event.listen(store._engines.write.sync_engine, "before_cursor_execute", record)
    try:
        claimed = await store.claim(10, lease_s=30)
    finally:
        event.remove(store._engines.write.sync_engine, "before_cursor_execute", record)
    assert sorted(step.run_id for step in claimed) == sorted(run.id for run in runs)
    assert {step.run_input["n"] for step in claimed} == {0, 1, 2}
    if store._engines.dialect.is_postgresql:
        assert executed == ["WITH"]  # BEGIN and COMMIT are not cursor statements on asyncpg
    else:
        assert executed == ["BEGIN", "UPDATE", "SELECT"]


async def test_unusual_tenant_ids_take_their_turn(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skip scan orders tenant ids by the database's collation, its MIN and > alike."""
    monkeypatch.setattr(claims, "TENANT_LIST_TTL_S", 0.0)
    odd = [" ", "\u200b", "A", "a", "B", "b", "ß", "ss", "É", "e", "ä", "z", "😀", "'", "%", "_"]
    tenants = [*odd, "a b", "x" * 200, *(f"t{n:02d}" for n in range(60))]
    served = await _claim_rounds(store, tenants, rounds=3, limit=64)
    assert served == set(tenants)


async def test_concurrent_claimers_never_take_a_step_twice(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four claimers (stores, as four worker processes have) of different batch sizes over 70
    tenants, a fresh tenant list for every claim: every step claimed exactly once, no claim
    above its limit."""
    monkeypatch.setattr(claims, "TENANT_LIST_TTL_S", 0.0)
    stores = [await Store.open(backend.database_url, FakeClock()) for _ in range(4)]
    try:
        version = await stores[0].publish(CHAIN)
        for n in range(600):
            await stores[0].create_run(version, None, tenant_id=f"t{n % 70:02d}")
        seen: list[int] = []

        async def claim_all(claimer: Store, limit: int) -> None:
            for _ in range(600):
                got = await claimer.claim(limit, lease_s=30)
                assert len(got) <= limit
                if not got:
                    return
                seen.extend(step.step_id for step in got)

        limits = (7, 16, 32, 64)
        await asyncio.gather(*(claim_all(s, n) for s, n in zip(stores, limits, strict=True)))
        assert len(seen) == len(set(seen)) == 600
    finally:
        for claimer in stores:
            await claimer.close()


async def test_one_flush_records_every_kind_of_result(store: Store, clock: FakeClock) -> None:
    """Results of every kind in one `complete` (on PostgreSQL one statement per kind of write
    for the whole batch): each step and run ends up as it would alone."""
    version = await store.publish(CHAIN)
    runs = [(await store.create_run(version, {"n": n}))[0] for n in range(5)]
    claimed = {step.run_id: step for step in await store.claim(10, lease_s=30)}
    assert set(claimed) == {run.id for run in runs}
    ok, retried, parked, failed, also_ok = (claimed[run.id] for run in runs)
    now = clock.now()
    waiting = Waiting(WaitReason.TENANT_RATE_LIMIT, "the tenant's rate window is full")
    report = await store.complete(
        [
            StepSucceeded(ok, {"answer": 1}),
            StepFailed(retried, {"kind": "http", "status": 503}, retry_at=now + 5),
            StepParked(parked, now + 7, "rate", tenant_item_taken=True, waiting=waiting),
            StepFailed(failed, {"kind": "http", "status": 400, "message": "no"}),
            StepSucceeded(also_ok, None),
        ]
    )
    assert report.recorded == 5 and not report.dropped
    first = {run.id: (await store.get_steps(run.id))[0] for run in runs}
    assert [first[run.id].vertex_id for run in runs] == ["a"] * 5
    assert all(s.claim_token is None and s.lease_expires_at is None for s in first.values())
    done = first[ok.run_id]
    assert (done.status, done.output, done.ended_at) == ("SUCCEEDED", {"answer": 1}, now)
    again = first[retried.run_id]
    assert (again.status, again.not_before, again.auto_retries) == ("READY", now + 5, 1)
    assert again.error == {"kind": "http", "status": 503} and again.ended_at is None
    waits = first[parked.run_id]
    assert (waits.status, waits.not_before, waits.wait_reason) == (
        "READY",
        now + 7,
        "tenant_rate_limit",
    )
    assert waits.wait_message == "the tenant's rate window is full"
    assert (first[failed.run_id].status, first[failed.run_id].error["status"]) == ("FAILED", 400)
    assert first[also_ok.run_id].output is None
    statuses = {run.id: (await store.get_run(run.id)).status for run in runs}  # type: ignore[union-attr]
    assert list(statuses.values()) == ["RUNNING", "RUNNING", "RUNNING", "FAILED", "RUNNING"]
    # The successes made their dependants READY (b and c of the CHAIN).
    ready = {(s.run_id, s.vertex_id) for s in await store.claim(10, lease_s=30)}
    assert {(ok.run_id, "b"), (ok.run_id, "c"), (also_ok.run_id, "b")} <= ready


async def test_a_redispatch_in_a_batch_is_held_back_when_its_run_stopped(
    store: Store, clock: FakeClock
) -> None:
    """Two redispatched steps in one flush: the one whose run failed meanwhile goes back to
    PENDING (claims hold it back until an operator resumes the run), the other to READY."""
    version = await store.publish(CHAIN)
    stopped, _ = await store.create_run(version, None)
    going, _ = await store.create_run(version, None)
    for step in await store.claim(10, lease_s=30):
        await store.complete([StepSucceeded(step, {})])
    steps = {(s.run_id, s.vertex_id): s for s in await store.claim(10, lease_s=30)}
    await store.complete([StepFailed(steps[(stopped.id, "b")], {"kind": "http", "status": 400})])
    assert (await store.get_run(stopped.id)).status == "FAILED"  # type: ignore[union-attr]
    retry_at = clock.now() + 5
    await store.complete(
        [
            StepFailed(steps[(stopped.id, "c")], {"kind": "http", "status": 503}, retry_at),
            StepFailed(steps[(going.id, "c")], {"kind": "http", "status": 503}, retry_at),
        ]
    )
    held = {s.vertex_id: s.status for s in await store.get_steps(stopped.id)}
    moving = {s.vertex_id: s.status for s in await store.get_steps(going.id)}
    assert (held["c"], moving["c"]) == ("PENDING", "READY")


async def test_analyze_refreshes_statistics_without_touching_data(store: Store) -> None:
    version = await store.publish(CHAIN)
    run, _ = await store.create_run(version, None)
    await store.analyze()  # PostgreSQL: ANALYZE step, run; SQLite: nothing to do
    assert (await store.get_run(run.id)) == run
    assert len(await store.claim(10, lease_s=30)) == 1


PAIR = Workflow.model_validate(
    {
        "name": "pair",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
            "b": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/b"}},
        },
    }
)


async def test_a_run_ends_once_when_its_last_steps_are_recorded_by_concurrent_flushes(
    store: Store,
) -> None:
    # Two workers' flushes each record one of the run's two remaining steps at the same time:
    # exactly one of them sees the run end, and the run's output holds both sinks (the one
    # recorded by the other flush is read back).
    version = await store.publish(PAIR)
    run, _ = await store.create_run(version, None)
    claimed = {c.vertex_id: c for c in await store.claim(10, lease_s=30)}
    assert sorted(claimed) == ["a", "b"]
    reports = await asyncio.gather(
        store.complete([StepSucceeded(claimed["a"], {"v": "a"})]),
        store.complete([StepSucceeded(claimed["b"], {"v": "b"})]),
    )
    ended = [r.finished_runs for r in reports if r.finished_runs]
    assert ended == [[(run.id, "SUCCEEDED")]]
    final = await store.get_run(run.id)
    assert final is not None and final.status == "SUCCEEDED"
    assert final.output == {"a": {"v": "a"}, "b": {"v": "b"}}


async def test_a_batch_with_some_of_a_runs_steps_counts_it_down_without_ending_it(
    store: Store,
) -> None:
    version = await store.publish(PAIR)
    run, _ = await store.create_run(version, None)
    claimed = {c.vertex_id: c for c in await store.claim(10, lease_s=30)}
    first = await store.complete([StepSucceeded(claimed["a"], {"v": "a"})])
    assert first.finished_runs == []
    running = await store.get_run(run.id)
    assert running is not None and running.status == "RUNNING" and running.ended_at is None
    second = await store.complete([StepSucceeded(claimed["b"], {"v": "b"})])
    assert second.finished_runs == [(run.id, "SUCCEEDED")]
    final = await store.get_run(run.id)
    assert final is not None and final.status == "SUCCEEDED"
    assert final.output == {"a": {"v": "a"}, "b": {"v": "b"}}


ONE_CALL = Workflow.model_validate(
    {"name": "one", "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1"}}}}
)


async def test_renew_and_give_back_touch_only_the_claims_named(
    store: Store, clock: FakeClock
) -> None:
    version = await store.publish(ONE_CALL)
    for _ in range(4):
        await store.create_run(version, None)
    mine = await store.claim(2, lease_s=10)
    theirs = await store.claim(2, lease_s=10)
    assert len(mine) == len(theirs) == 2
    clock.advance(8)
    # A token of another step's id, or one not made by a claim, renews nothing.
    forged = f"{mine[0].claim_token.rpartition(':')[0]}:{theirs[0].step_id}"
    assert await store.renew([forged, "garbage", theirs[0].claim_token + "0"], lease_s=10) == 0
    assert await store.renew([c.claim_token for c in mine], lease_s=10) == 2
    clock.advance(4)  # past the first leases, within the renewed ones
    requeued = await store.requeue_expired()
    assert sorted(r[0] for r in requeued) == sorted(c.step_id for c in theirs)
    assert await store.give_back([mine[0].claim_token, forged]) == 1
    again = await store.claim(10, lease_s=10)
    assert sorted(c.step_id for c in again) == sorted(
        [mine[0].step_id, *(c.step_id for c in theirs)]
    )
    report = await store.complete([StepSucceeded(mine[1], {"ok": True})])
    assert report.recorded == 1


async def test_a_result_needs_its_own_token(store: Store) -> None:
    version = await store.publish(ONE_CALL)
    await store.create_run(version, None)
    await store.create_run(version, None)
    first, second = await store.claim(2, lease_s=10)
    swapped = StepSucceeded(dataclasses.replace(first, claim_token=second.claim_token), {"x": 1})
    report = await store.complete([swapped])
    assert (report.recorded, report.dropped) == (0, [first.step_id])
    # Beside the result that holds that token, the swapped one is still not the first's.
    report = await store.complete([swapped, StepSucceeded(second, {"y": 2})])
    assert (report.recorded, report.dropped) == (1, [first.step_id])
    (step,) = await store.get_steps(first.run_id)
    assert (step.status, step.output) == ("RUNNING", None)
