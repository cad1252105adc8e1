"""PostgreSQL writes a flush's rows as arrays (one `unnest` statement per kind of write) and
SQLite, or a single row, with an executemany: both paths must leave exactly the same rows. Each
test runs the same flush on both paths of PostgreSQL (the array path forced off with a
threshold no batch reaches) and compares every column; the store contract covers SQLite."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import event, text

from engine.store import Store, results
from engine.store.records import LogLine, StepFailed, StepParked, StepSucceeded, Waiting
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from schemas.waiting import WaitReason

ONE = Workflow.model_validate(
    {
        "name": "one",
        "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}}},
    }
)
TWO = Workflow.model_validate(
    {
        "name": "two",
        "vertices": {
            "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/a"}},
            "b": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/b"}},
        },
    }
)
STEP_COLUMNS = (
    "status, output IS NULL, output::text, error IS NULL, error::text, not_before, ended_at, "
    "auto_retries, tenant_item_taken, children_total, wait_reason, wait_message, claim_token, "
    "lease_expires_at"
)
RUN_COLUMNS = "status, steps_remaining, output IS NULL, output::text, ended_at"
ARRAYS, EXECUTEMANY = 2, 10**9
"""`results.BATCH_FROM_ROWS` for each path."""

Flush = Callable[[Store, FakeClock], Awaitable[Any]]


async def _rows(store: Store, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with store._engines.read.connect() as conn:
        return [tuple(row) for row in (await conn.execute(text(sql), params)).all()]


async def _both_paths(url: str, flush: Flush, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    outcomes = []
    for threshold in (ARRAYS, EXECUTEMANY):
        monkeypatch.setattr(results, "BATCH_FROM_ROWS", threshold)
        clock = FakeClock()
        store = await Store.open(url, clock)
        try:
            async with store._engines.write.begin() as conn:
                await conn.execute(text("TRUNCATE run_log, step, run RESTART IDENTITY CASCADE"))
            outcomes.append(await flush(store, clock))
        finally:
            await store.close()
    return outcomes


async def _every_kind(store: Store, clock: FakeClock) -> Any:
    version = await store.publish(ONE)
    runs = [(await store.create_run(version, {"n": n}))[0] for n in range(6)]
    claimed = {step.run_id: step for step in await store.claim(10, lease_s=30)}
    steps = [claimed[run.id] for run in runs]
    now = clock.now()
    waiting = Waiting(WaitReason.TENANT_RATE_LIMIT, "the tenant's rate window is full")
    await store.complete(
        [
            StepSucceeded(steps[0], {"answer": 1}),
            StepSucceeded(steps[1], None),
            StepFailed(steps[2], {"kind": "http", "status": 503}, retry_at=now + 5),
            StepParked(steps[3], now + 7, "rate", tenant_item_taken=True, waiting=waiting),
            StepFailed(steps[4], {"kind": "http", "status": 400}),
            StepSucceeded(steps[5], "x" * 10),
        ]
    )
    found = []
    for run in runs:
        found += await _rows(store, f"SELECT {STEP_COLUMNS} FROM step WHERE run_id = :r", r=run.id)
        found += await _rows(store, f"SELECT {RUN_COLUMNS} FROM run WHERE id = :r", r=run.id)
    return found


async def test_every_kind_of_result_is_written_alike(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays, executemany = await _both_paths(pg_database_url, _every_kind, monkeypatch)
    assert arrays == executemany
    assert len(arrays) == 12


async def _counted_down(store: Store, clock: FakeClock) -> Any:
    """Two-step runs counted down (one of them FAILED meanwhile), then 500 one-step runs
    ending in one flush (FLUSH_BATCH_MAX)."""
    two = await store.publish(TWO)
    runs = [(await store.create_run(two, None))[0] for _ in range(4)]
    claimed = {(s.run_id, s.vertex_id): s for s in await store.claim(10, lease_s=30)}
    await store.complete([StepFailed(claimed[(runs[0].id, "b")], {"kind": "http"})])
    await store.complete(
        [StepSucceeded(claimed[(run.id, "a")], {"i": i}) for i, run in enumerate(runs)]
    )
    counted = [
        (await _rows(store, f"SELECT {RUN_COLUMNS} FROM run WHERE id = :r", r=run.id))[0]
        for run in runs
    ]
    one = await store.publish(ONE)
    many = [(await store.create_run(one, {"n": n}))[0] for n in range(500)]
    big = await store.claim(500, lease_s=30)
    report = await store.complete([StepSucceeded(step, {"n": step.run_input}) for step in big])
    ended = await _rows(
        store,
        "SELECT status, count(*), sum(steps_remaining) FROM run "
        "WHERE id = ANY(:ids) GROUP BY status",
        ids=[run.id for run in many],
    )
    return counted, report.recorded, ended


async def test_count_downs_and_a_full_flush_are_written_alike(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays, executemany = await _both_paths(pg_database_url, _counted_down, monkeypatch)
    assert arrays == executemany
    counted, recorded, ended = arrays
    assert [row[:2] for row in counted] == [
        ("FAILED", 1),
        ("RUNNING", 1),
        ("RUNNING", 1),
        ("RUNNING", 1),
    ]
    assert (recorded, ended) == (500, [("SUCCEEDED", 500, 0)])


async def _one_claim_twice(store: Store, clock: FakeClock) -> Any:
    """The same claim's result twice in one flush, and a step claimed again after its lease
    expired, with its late result and its new one in the same flush."""
    version = await store.publish(TWO)
    run, _ = await store.create_run(version, None)
    a, b = sorted(await store.claim(10, lease_s=30), key=lambda s: s.vertex_id)
    clock.advance(20)
    await store.renew([a.claim_token], 30)  # a's worker still holds it; b's lease runs out
    clock.advance(15)
    await store.requeue_expired()
    b_again = next(s for s in await store.claim(10, lease_s=30) if s.vertex_id == "b")
    now = clock.now()
    report = await store.complete(
        [
            StepFailed(a, {"try": 1}, retry_at=now + 5),
            StepFailed(a, {"try": 2}, retry_at=now + 9),
            StepSucceeded(b, {"late": True}),
            StepSucceeded(b_again, {"late": False}),
        ]
    )
    steps = await _rows(
        store,
        "SELECT vertex_id, status, error::text, not_before, auto_retries, output::text "
        "FROM step WHERE run_id = :r ORDER BY vertex_id",
        r=run.id,
    )
    return (
        report.recorded,
        sorted(report.dropped),
        steps,
        await _rows(store, f"SELECT {RUN_COLUMNS} FROM run WHERE id = :r", r=run.id),
    )


async def test_one_result_per_live_claim(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the first result of a live claim is recorded; a duplicate and the late result of
    a claim that expired are dropped (and said so), on both paths."""
    arrays, executemany = await _both_paths(pg_database_url, _one_claim_twice, monkeypatch)
    assert arrays == executemany
    recorded, dropped, steps, run = arrays
    assert (recorded, len(dropped)) == (2, 2)
    (a_status, a_error, _, a_retries, _), (b_status, _, _, _, b_output) = (row[1:] for row in steps)
    assert (a_status, json.loads(a_error), a_retries) == ("READY", {"try": 1}, 1)
    assert (b_status, json.loads(b_output)) == ("SUCCEEDED", {"late": False})
    assert run[0][:2] == ("RUNNING", 1)


BATCHED_LOGS: list[str] = []
"""The statements that wrote log lines as arrays (`results.INSERT_LOGS_BATCH`), as executed."""


async def _log_lines(store: Store, clock: FakeClock) -> Any:
    """A flush's log lines of every shape (a vertex or none, data or none, a time of their
    own or the flush's), then what the run's log reads back, in its order."""

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "INTO run_log" in statement and "unnest" in statement:
            BATCHED_LOGS.append(statement)

    event.listen(store._engines.write.sync_engine, "before_cursor_execute", seen)
    version = await store.publish(ONE)
    run, _ = await store.create_run(version, None)
    (step,) = await store.claim(10, lease_s=30)
    lines = [
        LogLine(run.id, "info", "first", "a", {"n": 1, "nested": [None, "é"]}),
        LogLine(run.id, "warning", "second, no vertex"),
        LogLine(run.id, "error", "third, at a time of its own", "a", None, at=12.5),
        LogLine(run.id, "info", "fourth", "a", {"list": [1, 2]}),
    ]
    await store.complete([StepSucceeded(step, {"ok": True})], lines)
    return await _rows(
        store,
        "SELECT id, vertex_id, at, level, message, data IS NULL, data::text FROM run_log "
        "WHERE run_id = :r ORDER BY id",
        r=run.id,
    )


async def test_log_lines_are_written_alike_and_in_order(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    BATCHED_LOGS.clear()
    arrays, executemany = await _both_paths(pg_database_url, _log_lines, monkeypatch)
    assert arrays == executemany
    assert len(BATCHED_LOGS) >= 1  # the array path did write them (the other path never does)
    # The run's "created" line, the flush's four in the order given, then "run succeeded".
    assert [row[4] for row in arrays][1:] == [
        "first",
        "second, no vertex",
        "third, at a time of its own",
        "fourth",
        "run succeeded",
    ]
    assert [row[0] for row in arrays] == sorted(row[0] for row in arrays)
    first, second, third = arrays[1:4]
    assert json.loads(first[6]) == {"n": 1, "nested": [None, "é"]}
    assert (second[1], third[2], third[3]) == (None, 12.5, "error")
    assert json.loads(third[6]) is None  # no data: JSON null, as SQLAlchemy's JSON type binds
