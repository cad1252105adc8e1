"""What the run monitor reads through the operations layer: a fan-out's long tail, the progress
column of run lists, the destinations' history and the editor's preview. Both backends."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.destination_history import DestinationHistory
from engine.operations.settings_views import DestinationView
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from engine.store.models import Run
from schemas.errors import InvalidRequest, NotFound, Unavailable
from tests.integration.engine_harness import running_worker
from tests.integration.operations_harness import ended, eventually, fanout, items

runs = Run.__table__  # type: ignore[attr-defined]


async def set_durations(runtime: Runtime, parent: str, seconds_by_index: dict[int, float]) -> None:
    """Give children exact durations (the test fixes what a real fan-out leaves to timing)."""
    engines = runtime.store._engines
    async with engines.write.begin() as conn:
        for index, seconds in seconds_by_index.items():
            await conn.execute(
                update(runs)
                .where(runs.c.parent_run_id == parent, runs.c.item_index == index)
                .values(started_at=1_000.0, ended_at=1_000.0 + seconds)
            )


# ── long tail ───────────────────────────────────────────────────────────────────────────────


async def test_the_long_tail_of_a_fan_out(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    merge = {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 5}}
    await ops.workflows.publish(fanout(downstream.url, merge))
    submitted = await ops.runs.submit("parent", {"items": items(100, failing={7, 42})})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "SUCCEEDED", run.error
    # Durations 1 … 100 s by item; the nearest-rank percentiles are then the values.
    await set_durations(runtime, run.id, {i: float(i + 1) for i in range(100)})

    tail = await ops.runs.long_tail(run.id, "each", limit=3)
    assert (tail.total, tail.ended) == (100, 100)
    assert (tail.p50_s, tail.p95_s, tail.p99_s, tail.max_s) == (50.0, 95.0, 99.0, 100.0)
    assert tail.mean_s == pytest.approx(50.5)
    assert [(c.run.item_index, c.duration_s) for c in tail.slowest] == [
        (99, 100.0),
        (98, 99.0),
        (97, 98.0),
    ]
    assert tail.running_longest == []
    # FAILED children count (their time is real); a CANCELLED one's duration is not a duration.
    failed = await ops.runs.children(run.id, status="FAILED")
    assert {c.item_index for c in failed.items} == {7, 42}
    async with runtime.store._engines.write.begin() as conn:
        await conn.execute(
            update(runs)
            .where(runs.c.parent_run_id == run.id, runs.c.item_index == 99)
            .values(status="CANCELLED")
        )
    after = await ops.runs.long_tail(run.id, "each", limit=1)
    assert (after.ended, after.max_s, after.slowest[0].run.item_index) == (99, 99.0, 98)


async def test_the_long_tail_lists_the_children_running_longest(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    documents = fanout(downstream.url)
    child_call = documents[1]["vertices"]["call"]["config"]
    child_call["headers"]["X-Demo-Sleep-Ms"] = "{{ item.sleep }}"
    await ops.workflows.publish(documents)
    slow = [{"status": 200, "sleep": 20_000 if i == 3 else 0} for i in range(6)]
    submitted = await ops.runs.submit("parent", {"items": slow})
    run_id = submitted.run.id
    async with running_worker(runtime) as worker:

        async def only_the_slow_one_runs() -> bool:
            progress = await ops.runs.progress(run_id)
            return progress.fanout.total == 6 and progress.fanout.succeeded == 5

        await eventually(only_the_slow_one_runs, timeout_s=30)
        tail = await ops.runs.long_tail(run_id, "each")
        assert tail.ended == 5 and tail.p50_s is not None
        assert [c.run.item_index for c in tail.running_longest] == [3]
        assert tail.running_longest[0].run.status == "RUNNING"
        assert tail.running_longest[0].duration_s >= 0
        await ops.actions.cancel(run_id, actor="test")
        # The slow child's 20 s call would hold the worker's stop for its whole grace: all
        # is checked, so the stop cancels it at once (as an interrupted `schemabridge run`).
        worker.hurry()


async def test_the_long_tail_of_a_spawner_that_has_not_started(
    ops: Operations, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(fanout(downstream.url))
    submitted = await ops.runs.submit("parent", {"items": items(3)}, tenant_id="acme")
    tail = await ops.runs.long_tail(submitted.run.id, "each", tenant="acme")
    assert (tail.total, tail.ended, tail.p50_s, tail.slowest) == (0, 0, None, [])


async def test_the_long_tail_refuses_what_has_no_fan_out(
    ops: Operations, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(fanout(downstream.url))
    run_id = (await ops.runs.submit("parent", {"items": items(1)}, tenant_id="acme")).run.id
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"vertex_id": "join"}, InvalidRequest, "not_a_spawner"),
        ({"vertex_id": "nope"}, NotFound, "step_not_found"),
        ({"vertex_id": "each", "limit": 0}, InvalidRequest, "invalid_limit"),
        ({"vertex_id": "each", "limit": 51}, InvalidRequest, "invalid_limit"),
        ({"vertex_id": "each", "tenant": "globex"}, NotFound, "run_not_found"),
    ]
    for kwargs, error, code in cases:
        with pytest.raises(error) as refused:
            await ops.runs.long_tail(run_id, **kwargs)
        assert refused.value.code == code, kwargs  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        await ops.runs.long_tail("no-such-run", "each")


# ── the progress column ─────────────────────────────────────────────────────────────────────


async def test_run_lists_carry_each_runs_progress(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    merge = {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 1}}
    await ops.workflows.publish(fanout(downstream.url, merge))
    done = await ops.runs.submit("parent", {"items": items(5, failing={1})})
    async with running_worker(runtime):
        await ended(ops, done.run.id)
    waiting = await ops.runs.submit("parent", {"items": items(2)})

    page = await ops.runs.list(RunFilter(roots_only=True))
    by_id = {r.id: r.progress for r in page.items}
    finished, fresh = by_id[done.run.id], by_id[waiting.run.id]
    assert finished is not None and fresh is not None
    assert (finished.steps, finished.steps_done) == (2, 2)
    assert finished.children is not None
    assert finished.children.model_dump() == {
        "total": 5,
        "succeeded": 4,
        "failed": 1,
        "cancelled": 0,
    }
    assert (fresh.steps, fresh.steps_done, fresh.children) == (2, 0, None)
    # Children are runs too: a page of them carries their own progress (one step each).
    children = await ops.runs.list(RunFilter(parent=done.run.id), limit=10)
    assert {(c.progress.steps, c.progress.children) for c in children.items if c.progress} == {
        (1, None)
    }
    # Children pages (`children`) and single runs do not carry it.
    assert all(c.progress is None for c in (await ops.runs.children(done.run.id)).items)
    assert (await ops.runs.get(done.run.id)).progress is None


# ── destinations' history ───────────────────────────────────────────────────────────────────


class StepClock:
    def __init__(self) -> None:
        self.t = 10_000.0

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t


def destination(key: str, limit: float, in_flight: int) -> DestinationView:
    breaker = {"state": "closed", "failures": 0, "successes": 0, "probes": 0}
    return DestinationView.model_validate(
        {
            "destination": key,
            "cap": 20,
            "capConfigured": False,
            "limit": limit,
            "slots": int(limit),
            "inFlight": in_flight,
            "cuts": 0,
            "growthHeldS": 0.0,
            "globalBreaker": breaker,
            "tenantBreakers": {},
            "retryTokens": 10.0,
            "retryAllowed": True,
        }
    )


async def test_the_history_keeps_a_bounded_window_per_destination() -> None:
    clock = StepClock()
    answers: list[list[DestinationView] | Exception] = []

    async def read() -> list[DestinationView]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    history = DestinationHistory(read, clock, interval_s=2, window_s=10, max_destinations=2)
    for step in range(8):
        answers.append([destination("http://a:1", 1.0 + step, step)])
        await history.sample()
        clock.t += 2
    series = history.view().series
    assert [s.destination for s in series] == ["http://a:1"]
    points = series[0].points
    # The ring holds 10 / 2 + 1 samples; the view keeps those within the last 10 s.
    assert [p.limit for p in points] == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert [p.in_flight for p in points] == [3, 4, 5, 6, 7]

    answers.append(Unavailable("redis down", code="coordination_unavailable"))
    with pytest.raises(Unavailable):
        await history.sample()
    for key in ("http://b:1", "http://c:1"):
        answers.append([destination(key, 2.0, 0)])
        await history.sample()
    # At most two destinations: the one seen longest ago went first.
    assert [s.destination for s in history.view().series] == ["http://b:1", "http://c:1"]
    assert history.view("http://zz:1").series[0].points == []


async def test_the_sampler_fills_the_history_from_admission(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    await ops.settings.set_caps(downstream.url, 7, None)
    await ops.destination_history.sample()
    view = ops.destination_history.view(downstream.url)
    (point,) = view.series[0].points
    assert (point.cap, point.in_flight) == (7, 0) and 1 <= point.limit <= 7


# ── the editor's preview ────────────────────────────────────────────────────────────────────


async def test_the_preview_draws_even_an_invalid_document(ops: Operations) -> None:
    draft = {
        "name": "draft",
        "vertices": {
            "a": {"type": "GATEWAY", "dependsOn": ["c"], "config": {"url": "http://x:1/"}},
            "b": {"type": "GATEWAY", "dependsOn": ["a", "ghost"], "config": {"url": 3}},
            "c": {"type": "GATEWAY", "dependsOn": ["b"], "config": {"url": "http://x:1/"}},
        },
    }
    problems, graphs = await ops.workflows.preview(draft)
    pointers = {p.pointer for p in problems}
    assert "/vertices/b/config/url" in pointers
    assert any(p.pointer.startswith("/vertices/b/dependsOn") for p in problems)
    (graph,) = graphs
    assert (graph.name, graph.version) == ("draft", 0)
    assert {n.id for n in graph.nodes} == {"a", "b", "c"}
    # The unknown dependency is left out; the cycle a → b → c → a is drawn in one layer.
    assert {(e.source, e.target) for e in graph.edges} == {("a", "b"), ("b", "c"), ("c", "a")}
    assert graph.layers == 1

    problems, graphs = await ops.workflows.preview([draft, "not a document"])  # type: ignore[list-item]
    assert len(graphs) == 2 and graphs[1].nodes == []
