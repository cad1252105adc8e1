"""`GET /runs/{id}/events` over real HTTP, on both backends: a fan-out's stream delivers
progress events as children end, then `end`, then closes — driven by run events, with the
fallback poll out of reach; streams on an idle run read it no more often than the fallback; a
quiet run gets heartbeats; an ended run's stream is its state and `end`; another tenant's run
is a 404. Writers other than a worker's flush reach a stream through run events too: a
deployment's abort, a cancel, a start over (its old run's watchers), a reaper requeuing an
expired lease, a change landing while the stream reads its first event."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from api.rest import sse
from demo.downstream import RunningDownstream
from engine.execution.worker import Worker, WorkerConfig
from engine.operations.runs import RunOperations
from engine.operations.views import RunProgress
from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on, assert_error
from tests.integration.actions_harness import statements
from tests.integration.operations_harness import ended, fanout, items, single

STREAM_TIMEOUT_S = 60.0
MAX_LINES = 10_000


async def read_stream(
    http: httpx.AsyncClient, path: str, *, stop_after_heartbeat: bool = False
) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """The events of the stream at `path` until it closes (or its first heartbeat), and the
    heartbeats seen. Bounded by `STREAM_TIMEOUT_S` and `MAX_LINES`."""
    events: list[tuple[str, dict[str, Any]]] = []
    heartbeats = 0
    name = ""
    async with http.stream("GET", path, timeout=STREAM_TIMEOUT_S) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.aiter_lines()
        for _ in range(MAX_LINES):
            line = await anext(lines, None)
            if line is None:
                break
            if line.startswith(": heartbeat"):
                heartbeats += 1
                if stop_after_heartbeat:
                    break
            elif line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events, heartbeats


@pytest.fixture
async def api(backend: Backend, downstream: RunningDownstream) -> AsyncIterator[Api]:
    async with api_on(backend, worker=True) as served:
        # Each child's call takes 150 ms, so the fan-out ends over several polls.
        parent, child = fanout(downstream.url)
        child["vertices"]["call"]["config"]["headers"]["X-Demo-Sleep-Ms"] = "150"
        await served.ops.workflows.publish([parent, child])
        # The same, each child taking as long as its item says: their ends spread over
        # seconds, so a stream opened late on a stalled host still sees them one by one.
        staggered, late_child = fanout(downstream.url)
        staggered["name"], late_child["name"] = "staggered", "staggered-child"
        staggered["vertices"]["each"]["config"]["workflow"] = "staggered-child"
        late_child["vertices"]["call"]["config"]["headers"]["X-Demo-Sleep-Ms"] = "{{ item.sleep }}"
        await served.ops.workflows.publish([staggered, late_child])
        yield served


@pytest.fixture
async def idle(backend: Backend) -> AsyncIterator[Api]:
    """No worker: a submitted run stays RUNNING, nothing changes it."""
    async with api_on(backend, worker=False) as served:
        await served.ops.workflows.publish(single("stuck", "http://127.0.0.1:9/never"))
        yield served


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fallback read is out of the tests' reach: whatever a stream shows came from events.
    monkeypatch.setattr(sse, "FALLBACK_S", 120.0)
    monkeypatch.setattr(sse, "MIN_READ_S", 0.05)
    monkeypatch.setattr(sse, "HEARTBEAT_S", 0.3)


async def test_a_fanout_streams_progress_then_the_end(api: Api, quick: None) -> None:
    async with api.http(api.acme) as http:
        spread = [{**item, "sleep": 150 + 250 * i} for i, item in enumerate(items(12, {5}))]
        submitted = await http.post("/workflows/staggered/runs", json={"input": {"items": spread}})
        run_id = submitted.json()["id"]
        events, _ = await read_stream(http, f"/runs/{run_id}/events")
    names = [name for name, _ in events]
    assert names[-1] == "end" and names.count("end") == 1
    assert set(names[:-1]) == {"progress"} and len(names) >= 3, names
    final = events[-1][1]
    assert (final["id"], final["status"], final["ended"]) == (run_id, "FAILED", True)
    assert final["fanout"]["total"] == 12
    assert (final["fanout"]["succeeded"], final["fanout"]["failed"]) == (11, 1)
    done = [d["fanout"]["succeeded"] + d["fanout"]["failed"] for _, d in events]
    assert done == sorted(done), "progress only moves forward"
    assert len(set(done)) >= 2, "the stream showed children ending, not only the result"
    assert all(a != b for a, b in itertools.pairwise(events)), "no repeats"


async def test_a_quiet_run_gets_heartbeats(idle: Api, quick: None) -> None:
    """Nothing changes the run (no worker), however late the stream opens on a busy host: its
    first heartbeat comes after the run as it is, and no sooner than `HEARTBEAT_S`."""
    loop = asyncio.get_running_loop()
    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        opened = loop.time()
        events, heartbeats = await read_stream(
            http, f"/runs/{run_id}/events", stop_after_heartbeat=True
        )
        waited_s = loop.time() - opened
    assert heartbeats == 1
    assert [name for name, _ in events] == ["progress"]
    assert (events[0][1]["status"], events[0][1]["ended"]) == ("RUNNING", False)
    assert waited_s >= sse.HEARTBEAT_S, f"a heartbeat {waited_s:.3f} s after the stream opened"


async def test_an_ended_run_streams_its_state_and_end(api: Api, quick: None) -> None:
    async with api.http(api.admin) as http:
        run_id = (
            await http.post("/workflows/parent/runs", json={"input": {"items": items(2)}})
        ).json()["id"]
        await ended(api.ops, run_id)
        events, heartbeats = await read_stream(http, f"/runs/{run_id}/events")
    assert [name for name, _ in events] == ["progress", "end"]
    assert events[1][1]["status"] == "SUCCEEDED"
    assert heartbeats == 0


async def test_another_tenants_run_has_no_stream(idle: Api) -> None:
    async with idle.http(idle.acme) as acme, idle.http(idle.globex) as globex:
        run_id = (await acme.post("/workflows/stuck/runs", json={})).json()["id"]
        refused = await globex.get(f"/runs/{run_id}/events")
    async with idle.http(None) as nobody:
        anonymous = await nobody.get(f"/runs/{run_id}/events")
    assert_error(refused, 404, "run_not_found")
    assert_error(anonymous, 401, "unauthorized")


async def test_a_key_revoked_mid_stream_ends_the_stream(
    idle: Api, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is checked as the stream goes (every `KEY_CHECK_S`): revoked while its stream
    is open, the stream's next check answers `event: error` (401), and the stream closes."""
    monkeypatch.setattr(sse, "KEY_CHECK_S", 0.2)
    key = await idle.ops.keys.authenticate(idle.acme)
    assert key is not None
    async with idle.http(idle.acme) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        names: list[str] = []
        data: list[dict[str, Any]] = []
        async with http.stream("GET", f"/runs/{run_id}/events", timeout=STREAM_TIMEOUT_S) as answer:
            assert answer.status_code == 200
            lines = answer.aiter_lines()
            for _ in range(MAX_LINES):
                line = await anext(lines, None)
                if line is None:
                    break
                if line.startswith("event: "):
                    names.append(line.removeprefix("event: "))
                elif line.startswith("data: "):
                    data.append(json.loads(line.removeprefix("data: ")))
                elif line.startswith(": heartbeat") and key.state == "live":
                    key = await idle.ops.keys.revoke(key.id)  # after one heartbeat: mid-stream
        after = await http.get(f"/runs/{run_id}")
    assert names == ["progress", "error"], names
    assert (data[-1]["code"], data[-1]["message"]) == ("unauthorized", sse.KEY_ENDED)
    assert_error(after, 401, "unauthorized")


# ── reconnecting ───────────────────────────────────────────────────────────────────────────


async def first_block(
    http: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> list[str]:
    """The lines of the stream at `path` up to its first blank line (the first event)."""
    block: list[str] = []
    async with http.stream("GET", path, headers=headers, timeout=STREAM_TIMEOUT_S) as answer:
        assert answer.status_code == 200, await answer.aread()
        lines = answer.aiter_lines()
        for _ in range(MAX_LINES):
            line = await anext(lines, None)
            if not line:
                break
            block.append(line)
    return block


def _field(block: list[str], name: str) -> str:
    [value] = [line.removeprefix(f"{name}: ") for line in block if line.startswith(f"{name}: ")]
    return value


async def test_a_reconnect_gets_the_snapshot_with_ids_past_the_last_one_seen(
    idle: Api, quick: None
) -> None:
    """Every stream starts with the `retry:` hint and the run as it is, its event ids the
    time they were sent; one opened with `Last-Event-ID` (ahead of this process's clock, as
    after a reconnect from a process whose clock is ahead) numbers its events past it, and
    still starts with the whole run. A `Last-Event-ID` that is not ours is ignored."""
    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        path = f"/runs/{run_id}/events"
        first = await first_block(http, path)
        ahead = int(_field(first, "id")) + 10**12
        again = await first_block(http, path, {"Last-Event-ID": str(ahead)})
        foreign = await first_block(http, path, {"Last-Event-ID": "not-ours"})
    for block in (first, again, foreign):
        assert block[0] == f"retry: {sse.RECONNECT_MS}", block
        assert _field(block, "event") == "progress"
        snapshot = json.loads(_field(block, "data"))
        assert (snapshot["id"], snapshot["status"]) == (run_id, "RUNNING")
    assert int(_field(again, "id")) == ahead + 1
    assert int(_field(first, "id")) <= int(_field(foreign, "id")) < ahead


# ── an idle run: reads at the fallback rate only ───────────────────────────────────────────


async def hold_stream(http: httpx.AsyncClient, path: str, seconds: float) -> int:
    """Read the stream at `path` for `seconds` from its answer's start (a loaded machine may
    take a while to answer five requests at once); the heartbeats seen."""
    heartbeats = 0
    loop = asyncio.get_running_loop()
    async with http.stream("GET", path, timeout=STREAM_TIMEOUT_S) as answer:
        assert answer.status_code == 200
        deadline = loop.time() + seconds
        lines = answer.aiter_lines()
        for _ in range(MAX_LINES):
            line = await anext(lines, None)
            assert line is not None, "an idle run's stream stays open"
            heartbeats += line.startswith(": heartbeat")
            if loop.time() >= deadline:
                break
    return heartbeats


async def test_streams_on_an_idle_run_read_it_at_the_fallback_rate_only(
    idle: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams, window_s, fallback_s = 5, 3.0, 1.0
    monkeypatch.setattr(sse, "FALLBACK_S", fallback_s)
    monkeypatch.setattr(sse, "HEARTBEAT_S", 0.25)  # the streams speak; heartbeats read nothing
    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        with statements(idle.runtime) as one_read:
            await idle.ops.runs.progress(run_id)
        with statements(idle.runtime) as one_key:
            await idle.ops.keys.authenticate(idle.admin)
        with statements(idle.runtime, every_task=True) as executed:
            async with asyncio.TaskGroup() as group:
                held = [
                    group.create_task(hold_stream(http, f"/runs/{run_id}/events", window_s))
                    for _ in range(streams)
                ]
    # What is not the streams' reads: each stream's request looks its key up once.
    reads = (len(executed) - streams * len(one_key)) / len(one_read)
    # Each stream: its first read (before the answer starts), one per fallback period, and one
    # more for a read that may land as the client is closing it.
    most = streams * (2 + window_s / fallback_s)
    assert reads <= most, f"{reads:g} reads of the run by {streams} streams in {window_s} s"
    assert all(task.result() >= 4 for task in held), "every stream was alive throughout"


# ── writers other than the worker: a stream sees what they change through run events ────────


async def stream_across(
    http: httpx.AsyncClient, path: str, action: Any
) -> list[tuple[str, dict[str, Any]]]:
    """The events of the stream at `path`, calling `action()` once the stream has shown the
    run as it was (its watch is registered by then), until the stream ends."""
    return await stream_until(http, path, action, None)


async def stream_until(
    http: httpx.AsyncClient, path: str, action: Any, done: Any
) -> list[tuple[str, dict[str, Any]]]:
    """As `stream_across`, but stop reading once the async `done(events)` holds (None: at the
    end of the stream)."""
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    async with http.stream("GET", path, timeout=STREAM_TIMEOUT_S) as answer:
        assert answer.status_code == 200
        lines = answer.aiter_lines()
        for _ in range(MAX_LINES):
            line = await anext(lines, None)
            if line is None:
                break
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
                if len(events) == 1:
                    await action()
                if done is not None and await done(events):
                    break
    return events


async def test_a_deployment_abort_ends_its_runs_stream(idle: Api, quick: None) -> None:
    """No worker and the fallback read out of reach: the `gradual_deploy` run's stream ends
    CANCELLED only because the abort published a run event."""
    await idle.ops.workflows.publish(single("orders", "http://127.0.0.1:9/v1"))
    await idle.ops.workflows.publish(single("orders", "http://127.0.0.1:9/v2"))
    async with idle.http(idle.admin) as http:
        started = await http.post("/workflows/orders/deployments", json={"version": 2})
        assert started.status_code == 201, started.text
        deployment = started.json()

        async def abort() -> None:
            answer = await http.post(f"/deployments/{deployment['id']}/abort")
            assert answer.status_code == 200, answer.text

        async with asyncio.timeout(STREAM_TIMEOUT_S / 2):
            events = await stream_across(http, f"/runs/{deployment['runId']}/events", abort)
    assert [name for name, _ in events] == ["progress", "end"]
    assert events[0][1]["status"] == "RUNNING"
    assert events[1][1]["status"] == "CANCELLED"


async def test_a_start_over_is_shown_on_the_old_runs_detail_stream(idle: Api, quick: None) -> None:
    """The old run has ended, so its stream is over at once; what a client watching it sees
    is the cancel, then (read again after the event) the start over in its detail."""
    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]

        async def cancel() -> None:
            answer = await http.post(f"/runs/{run_id}/cancel")
            assert answer.status_code == 200, answer.text

        async with asyncio.timeout(STREAM_TIMEOUT_S / 2):
            events = await stream_across(http, f"/runs/{run_id}/events", cancel)
        assert [(n, d["status"]) for n, d in events] == [
            ("progress", "RUNNING"),
            ("end", "CANCELLED"),
        ]
        with idle.runtime.run_events.watch(run_id) as watch:
            started = await http.post(f"/runs/{run_id}/start-over")
            assert started.status_code == 200, started.text
            assert await watch.wait(5.0), "the start over told the old run's watchers"
        detail = (await http.get(f"/runs/{run_id}")).json()
    assert detail["restarts"] == [started.json()["newRunId"]]


async def test_a_change_during_the_streams_first_read_reaches_it(
    idle: Api, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is cancelled right after the read of the stream's first event (as a worker's
    claim can land while a stream opens): the stream ends CANCELLED only because its watch was
    open before that read, so the cancel's run event reached it (the fallback read is out of
    reach)."""
    read = RunOperations.progress
    changed: list[str] = []

    async def read_then_cancel(self: RunOperations, run_id: str, **kw: Any) -> RunProgress:
        progress = await read(self, run_id, **kw)
        if not changed:
            changed.append(run_id)
            await idle.ops.actions.cancel(run_id, actor="test")
        return progress

    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        monkeypatch.setattr(RunOperations, "progress", read_then_cancel)
        async with asyncio.timeout(STREAM_TIMEOUT_S / 2):
            events, _ = await read_stream(http, f"/runs/{run_id}/events")
    assert changed == [run_id]
    assert [(name, d["status"]) for name, d in events] == [
        ("progress", "RUNNING"),
        ("end", "CANCELLED"),
    ]


async def test_a_requeued_lease_reaches_the_stream(idle: Api, quick: None) -> None:
    """A worker died holding the run's step: when a reaper requeues it (a worker that claims
    nothing here), the stream shows the step READY again, told by a run event."""
    runtime = idle.runtime
    async with idle.http(idle.admin) as http:
        run_id = (await http.post("/workflows/stuck/runs", json={})).json()["id"]
        (held,) = await runtime.store.claim(1, lease_s=0.2)
        assert held.run_id == run_id
        reaping = WorkerConfig(concurrency=0, lease_s=0.3, idle_poll_s=0.05)
        reaper = Worker(
            runtime.store,
            runtime.executor_deps(),
            runtime.wakeup,
            reaping,
            run_events=runtime.run_events,
        )
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []

        async def start_reaper() -> None:
            tasks.append(asyncio.create_task(reaper.run(stop)))

        async def requeued(line_events: list[tuple[str, dict[str, Any]]]) -> bool:
            return any(d["steps"][0]["status"] == "READY" for _, d in line_events)

        try:
            async with asyncio.timeout(STREAM_TIMEOUT_S / 2):
                events = await stream_until(http, f"/runs/{run_id}/events", start_reaper, requeued)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    assert events[0][1]["steps"][0]["status"] == "RUNNING"
    assert events[-1][1]["steps"][0]["status"] == "READY"
    assert reaper.stats.requeued == 1
