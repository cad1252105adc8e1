"""A GATEWAY step's stop signal (its run was cancelled): nothing is sent after it, wherever the
step is — waiting for admission, admitted, between attempts — and a request already on the
wire finishes (docs/architecture.md, 'Cancelling a run')."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.execution.stops import CANCELLED, StepStop
from tests.integration.test_gateway import (
    FAST,
    LogRecorder,
    RecordingGuard,
    gateway_config,
    gateway_ctx,
    wait_until,
)
from vertices import gateway
from vertices.contract import StepContext, StepStopped
from vertices.http_client import HttpClient, build_http_client, close_http_client


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = build_http_client(max_connections=16)
    yield http
    await close_http_client(http)


def stoppable(log: LogRecorder | None = None) -> tuple[StepContext, StepStop]:
    stop = StepStop()
    return dataclasses.replace(gateway_ctx(log), stop=stop), stop


@dataclasses.dataclass
class WaitingGuard(RecordingGuard):
    """Admission that has no slot: `before_attempt` waits until cancelled."""

    waiting: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None:
        self.waiting.set()
        await asyncio.Event().wait()


@dataclasses.dataclass
class StopOnAdmit(RecordingGuard):
    """Admission that grants the slot just as the step is stopped."""

    stop: StepStop = dataclasses.field(default_factory=StepStop)

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None:
        await super().before_attempt(destination, retry, timeout_s=timeout_s)
        self.stop.stop(CANCELLED)


async def test_a_stop_ends_the_wait_for_admission(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    ctx, stop = stoppable()
    guard = WaitingGuard()
    call = asyncio.create_task(
        gateway.execute(gateway_config(downstream.url), ctx, client, FAST, guard=guard)
    )
    await guard.waiting.wait()
    stop.stop(CANCELLED)
    with pytest.raises(StepStopped, match="attempt 1/4 not sent"):
        async with asyncio.timeout(10):  # bounded: without the stop it waits for ever
            await call
    assert downstream.stats.total == 0
    assert guard.after == []  # nothing was admitted, so nothing to settle


async def test_a_step_stopped_as_it_is_admitted_sends_nothing_and_gives_the_slot_back(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    ctx, stop = stoppable()
    guard = StopOnAdmit(stop=stop)
    with pytest.raises(StepStopped, match="attempt 1/4 not sent"):
        await gateway.execute(gateway_config(downstream.url), ctx, client, FAST, guard=guard)
    assert downstream.stats.total == 0
    assert [(status, kind) for _, status, kind in guard.after] == [(None, "cancelled")]


async def test_a_stop_ends_the_wait_between_attempts(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([500, 500])
    log = LogRecorder()
    ctx, stop = stoppable(log)
    config = gateway_config(downstream.url, base_delay_ms=60_000)  # a real minute's wait
    call = asyncio.create_task(gateway.execute(config, ctx, client, FAST))
    await wait_until(lambda: log.field("retryInMs") == [60_000])
    stop.stop(CANCELLED)
    with pytest.raises(StepStopped, match="attempt 2/4 not sent"):
        async with asyncio.timeout(10):  # bounded: without the stop it waits a minute
            await call
    assert downstream.stats.total == 1


async def test_a_request_on_the_wire_finishes_and_no_retry_follows(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([{"status": 500, "sleep_ms": 300}, 200])
    log = LogRecorder()
    ctx, stop = stoppable(log)
    call = asyncio.create_task(gateway.execute(gateway_config(downstream.url), ctx, client, FAST))
    await wait_until(lambda: downstream.stats.in_flight == 1)
    stop.stop(CANCELLED)
    with pytest.raises(StepStopped, match="attempt 2/4 not sent"):
        await call
    assert downstream.stats.by_outcome == {"500": 1}  # answered, not cut off
    assert log.field("retryInMs") == [None]  # no wait announced for a retry that won't come


async def test_a_step_stopped_before_it_starts_sends_nothing(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    ctx, stop = stoppable()
    stop.stop(CANCELLED)
    guard = RecordingGuard()
    with pytest.raises(StepStopped, match="attempt 1/4 not sent"):
        await gateway.execute(gateway_config(downstream.url), ctx, client, FAST, guard=guard)
    assert (downstream.stats.total, guard.before, guard.after) == (0, [], [])
