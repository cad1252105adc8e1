"""A process whose clock is off the database server's says so when it starts, on both
backends: leases, timers and heartbeats are written by one process's wall clock and judged by
another's, so a worker 45 s behind was listed down while it ran, its claims read as expired
leases to the other workers, and nothing said why. On SQLite the database is this machine's:
nothing to compare."""

from __future__ import annotations

import time

import pytest

from api.cli import services
from engine.runtime import Runtime
from schemas.clock import FakeClock, SystemClock
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for


@pytest.mark.parametrize("skew_s", [-45.0, 120.0])
async def test_a_worker_whose_clock_is_off_the_databases_says_so(
    backend: Backend, caplog: pytest.LogCaptureFixture, skew_s: float
) -> None:
    runtime = await Runtime.open(settings_for(backend), clock=FakeClock(time.time() + skew_s))
    try:
        measured = await runtime.store.clock_offset_s()
        with caplog.at_level("WARNING", logger="schemabridge.service"):
            await services._warn_clock_skew(runtime, "worker w1")
    finally:
        await runtime.close()
    lines = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    if backend.database_url.startswith("sqlite"):
        assert measured is None and not lines
        return
    assert measured is not None
    offset, trip = measured
    assert abs(offset - skew_s) < 2.0 + trip, measured
    (line,) = lines
    side = "behind" if skew_s < 0 else "ahead of"
    assert line.startswith(f"worker w1: this machine's clock is {abs(skew_s):.0f} s {side} ")
    assert "sync the clocks (NTP)" in line


async def test_a_worker_in_time_says_nothing(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = await Runtime.open(settings_for(backend), clock=SystemClock())
    try:
        with caplog.at_level("WARNING", logger="schemabridge.service"):
            await services._warn_clock_skew(runtime, "worker w1")
        measured = await runtime.store.clock_offset_s()
    finally:
        await runtime.close()
    assert not [r for r in caplog.records if "clock" in r.getMessage()]
    if measured is not None:
        assert abs(measured[0]) < 1.0 + measured[1], measured
