"""Which held steps a cancellation stops and how a stop interrupts a wait
(`engine.execution.stops`), and what a process remembers of the cancellations it heard
(`engine.coordination.cancellations`)."""

from __future__ import annotations

import asyncio
import contextlib

import fakeredis
import pytest

from engine.coordination.cancellations import Cancellations
from engine.execution.stops import CANCELLED, CLAIM_LOST, RUN_FAILED, StepStop, Stops
from engine.store.records import ClaimedStep
from vertices.contract import StepStopped


def step(token: str, run_id: str, parent: str | None = None) -> ClaimedStep:
    return ClaimedStep(
        step_id=1,
        claim_token=token,
        run_id=run_id,
        vertex_id="call",
        tenant_id="acme",
        attempts=1,
        auto_retries=0,
        workflow_name="w",
        workflow_version=1,
        timeout_tier="process",
        run_input={},
        outputs={},
        parent_run_id=parent,
    )


def cancellations(remembered: int = 100) -> Cancellations:
    """Not started: `announce` publishes inline to a fakeredis of its own."""
    return Cancellations(fakeredis.FakeAsyncRedis(), remembered=remembered)


async def test_a_cancellation_stops_the_steps_of_its_runs_and_their_children() -> None:
    heard = cancellations()
    stops = Stops(heard)
    since = stops.now()
    child = stops.start(step("a", "child-1", parent="fanout"), claimed_since=since)
    other = stops.start(step("b", "child-2", parent="elsewhere"), claimed_since=since)
    own = stops.start(step("c", "single"), claimed_since=since)
    with heard.listening(stops.runs_cancelled):
        assert await heard.announce(["fanout", "single"])
    assert (child.reason, own.reason, other.reason) == (CANCELLED, CANCELLED, None)
    assert stops.stopped == 2


async def test_a_claim_under_way_as_the_cancel_is_heard_is_stopped_as_it_starts() -> None:
    heard = cancellations()
    stops = Stops(heard)
    before = stops.now()
    await heard.announce(["run-1"])  # heard while the claim's statement ran
    assert stops.start(step("a", "run-1"), claimed_since=before).reason == CANCELLED
    # A claim that began after the cancel was heard cannot hold a step it cancelled.
    after = stops.now()
    assert stops.start(step("b", "run-1"), claimed_since=after).reason is None


def test_lost_claims_stop_their_steps_with_why() -> None:
    stops = Stops(None)
    since = stops.now()
    cancelled = stops.start(step("a", "r1"), claimed_since=since)
    expired = stops.start(step("b", "r2"), claimed_since=since)
    kept = stops.start(step("c", "r3"), claimed_since=since)
    stops.claims_lost({"a": True, "b": False, "gone-already": True})
    assert (cancelled.reason, expired.reason, kept.reason) == (CANCELLED, CLAIM_LOST, None)
    stops.end("c")
    assert stops.signal("c") is None


async def test_the_memory_of_cancellations_is_bounded() -> None:
    heard = cancellations(remembered=2)
    for run_id in ["r1", "r2", "r3"]:
        await heard.announce([run_id])
    assert not heard.heard_since(["r1"], 0.0)  # the oldest is forgotten
    assert heard.heard_since([None, "r3"], 0.0)


async def waiting_in(stop: StepStop, started: asyncio.Event) -> None:
    with stop.interruptible():
        started.set()
        await asyncio.Event().wait()


async def test_a_stop_interrupts_a_wait_as_step_stopped() -> None:
    stop, started = StepStop(), asyncio.Event()
    task = asyncio.create_task(waiting_in(stop, started))
    await started.wait()
    stop.stop(CANCELLED)
    with pytest.raises(StepStopped):
        await task
    assert task.cancelling() == 0  # the stop's cancellation was taken back


async def test_a_cancellation_from_elsewhere_passes_through_even_with_a_stop() -> None:
    for also_stopped in (False, True):
        stop, started = StepStop(), asyncio.Event()
        task = asyncio.create_task(waiting_in(stop, started))
        await started.wait()
        task.cancel()  # the worker stopping
        if also_stopped:
            stop.stop(CANCELLED)
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_swallowed_interruption_leaves_no_cancellation_behind() -> None:
    stop, started = StepStop(), asyncio.Event()

    async def swallowing() -> int:
        with stop.interruptible():
            started.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        await asyncio.sleep(0)  # a later await is not cancelled
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    task = asyncio.create_task(swallowing())
    await started.wait()
    stop.stop(CANCELLED)
    assert await task == 0
    assert stop.reason == CANCELLED  # what the caller checks next


async def test_a_failed_run_stops_its_own_steps_not_its_children() -> None:
    """A child run goes on: it counts in its parent's join, which a retry reopens."""
    heard = cancellations()
    stops = Stops(heard)
    since = stops.now()
    own = stops.start(step("a", "failed-run"), claimed_since=since)
    child = stops.start(step("b", "child-1", parent="failed-run"), claimed_since=since)
    other = stops.start(step("c", "other-run"), claimed_since=since)
    with heard.listening_failed(stops.runs_failed), heard.listening(stops.runs_cancelled):
        assert await heard.announce_failed(["failed-run"])
    assert (own.reason, child.reason, other.reason) == (RUN_FAILED, None, None)
    # A claim that was under way as the failure was heard is stopped as it starts.
    assert stops.start(step("d", "failed-run"), claimed_since=since).reason == RUN_FAILED
    assert stops.start(step("e", "failed-run"), claimed_since=stops.now()).reason is None


def test_a_failed_run_heard_from_another_process_stops_its_steps() -> None:
    """The message another worker publishes; a cancellation's listener does not take it."""
    heard = cancellations()
    stops = Stops(heard)
    held = stops.start(step("a", "r1"), claimed_since=stops.now())
    cancelled: list[frozenset[str]] = []
    with heard.listening_failed(stops.runs_failed), heard.listening(cancelled.append):
        heard._received(b"failed r1 r2")
    assert held.reason == RUN_FAILED
    assert cancelled == []
    assert not heard.heard_since(["r1", "failed"], 0.0)
