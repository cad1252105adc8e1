"""engine.lifecycle: the signal state machine of a service process.

Real signals sent to a real process are tested in tests/integration/test_health.py; here the
handler is invoked directly, and handler installation is checked on the running loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from engine.lifecycle import ServiceLifecycle


async def test_the_first_stop_request_wins_and_runs_callbacks_once() -> None:
    life = ServiceLifecycle()
    calls: list[str] = []
    life.on_stop(lambda: calls.append("marker"))
    life.request_stop("deploy")
    life.request_stop("again")
    assert life.stopping
    assert not life.forced
    assert life.reason == "deploy"
    assert calls == ["marker"]
    await asyncio.wait_for(life.wait(), 1.0)


async def test_a_callback_added_after_the_stop_runs_at_once() -> None:
    life = ServiceLifecycle()
    life.request_stop("deploy")
    calls: list[str] = []
    life.on_stop(lambda: calls.append("late"))
    assert calls == ["late"]


async def test_a_failing_callback_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    life = ServiceLifecycle()
    calls: list[str] = []

    def broken() -> None:
        raise OSError("read-only file system")

    life.on_stop(broken)
    life.on_stop(lambda: calls.append("second"))
    with caplog.at_level(logging.ERROR, logger="engine.lifecycle"):
        life.request_stop("deploy")
    assert calls == ["second"]
    assert "read-only file system" in caplog.text


async def test_handlers_are_installed_on_the_loop_and_restored() -> None:
    life = ServiceLifecycle()
    with life:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def test_a_second_signal_forces_and_restores_default_handling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    life = ServiceLifecycle()
    with life, caplog.at_level(logging.WARNING, logger="engine.lifecycle"):
        life.handle_signal(signal.SIGTERM)
        assert life.stopping
        assert not life.forced
        assert life.reason == "received SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "still ours"

        life.handle_signal(signal.SIGINT)
        assert life.forced
        assert life.reason == "received SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "a third signal kills"
        life.handle_signal(signal.SIGTERM)  # a late callback already queued: harmless
    assert life.signals_received == 3
    # The drain does not watch force_event (it lasts up to the grace period): the line said
    # "cancelling in-flight work now" and the worker then waited its whole grace period.
    (said,) = [record.getMessage() for record in caplog.records]
    assert said.startswith("received SIGINT again: in-flight work still has the rest of the ")
    assert "cancel" not in said and "a third signal ends the process at once" in said
