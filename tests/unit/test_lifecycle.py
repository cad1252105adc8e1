"""engine.lifecycle: the supervisor with real tasks, and the signal state machine.

Real signals sent to a real process are tested in tests/integration/test_health.py; here the
handler is invoked directly, and handler installation is checked on the running loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from engine.lifecycle import ServiceLifecycle, Supervisor


async def wait_for_stop(stop: asyncio.Event) -> str:
    await stop.wait()
    return "stopped"


async def fail_after(gate: asyncio.Event, message: str) -> None:
    await gate.wait()
    raise RuntimeError(message)


async def ignore_stop() -> None:
    await asyncio.Event().wait()


async def refuse_cancellation(release: asyncio.Event) -> None:
    # Models a task that swallows cancellation (a bug); `shutdown` must still return.
    while not release.is_set():
        try:
            await release.wait()
        except asyncio.CancelledError:
            continue


# ── Supervisor ──────────────────────────────────────────────────────────────────────────────


async def test_tasks_run_under_their_names() -> None:
    supervisor = Supervisor()
    task = supervisor.start("poller", wait_for_stop(supervisor.stop))
    assert task.get_name() == "poller"
    assert supervisor.names == ["poller"]
    report = await supervisor.shutdown(1.0)
    assert task.result() == "stopped"
    assert report.finished == ("poller",)
    assert report.cancelled == report.stuck == ()
    assert supervisor.names == []


async def test_duplicate_live_names_are_refused() -> None:
    supervisor = Supervisor()
    supervisor.start("poller", wait_for_stop(supervisor.stop))
    with pytest.raises(ValueError, match="already running"):
        supervisor.start("poller", wait_for_stop(supervisor.stop))  # closed, never awaited
    await supervisor.shutdown(1.0)


async def test_a_name_can_be_reused_once_its_task_ended() -> None:
    supervisor = Supervisor()
    gate = asyncio.Event()
    first = supervisor.start("once", gate.wait())
    gate.set()
    await first
    supervisor.start("once", wait_for_stop(supervisor.stop))
    await supervisor.shutdown(1.0)


async def test_a_death_is_logged_recorded_and_stops_the_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor()
    gate = asyncio.Event()
    steady = supervisor.start("steady", wait_for_stop(supervisor.stop))
    doomed = supervisor.start("doomed", fail_after(gate, "boom"))
    with caplog.at_level(logging.ERROR, logger="engine.lifecycle"):
        gate.set()
        await asyncio.wait_for(supervisor.stop.wait(), 1.0)
    assert doomed.done()
    assert [failure.name for failure in supervisor.failures] == ["doomed"]
    assert "task doomed died unexpectedly" in caplog.text
    assert "RuntimeError: boom" in caplog.text, "the traceback is logged"
    report = await supervisor.shutdown(1.0)
    assert steady.result() == "stopped", "the stop reached the other tasks"
    assert report.cancelled == ()
    assert [failure.name for failure in report.failures] == ["doomed"]


async def test_a_normal_return_is_not_a_death() -> None:
    supervisor = Supervisor()
    gate = asyncio.Event()
    task = supervisor.start("one-shot", gate.wait())
    gate.set()
    await task
    assert not supervisor.stop.is_set()
    assert supervisor.failures == []


async def test_on_death_receives_the_reason() -> None:
    reasons: list[str] = []
    supervisor = Supervisor(on_death=reasons.append)
    gate = asyncio.Event()
    task = supervisor.start("doomed", fail_after(gate, "disk full"))
    gate.set()
    await asyncio.wait({task}, timeout=1.0)
    assert reasons == ["task doomed died: RuntimeError: disk full"]
    assert not supervisor.stop.is_set(), "on_death decides how to stop"


async def test_shutdown_cancels_what_outlives_the_grace_period() -> None:
    supervisor = Supervisor()
    supervisor.start("cooperative", wait_for_stop(supervisor.stop))
    stuck = supervisor.start("stuck", ignore_stop())
    report = await supervisor.shutdown(0.05)
    assert report.finished == ("cooperative",)
    assert report.cancelled == ("stuck",)
    assert report.stuck == ()
    assert stuck.cancelled()


async def test_force_cuts_the_grace_period_short() -> None:
    supervisor = Supervisor()
    supervisor.start("stuck", ignore_stop())
    force = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    shutting_down = asyncio.create_task(supervisor.shutdown(30.0, force=force))
    await asyncio.sleep(0)  # let it start waiting out the grace period
    assert not shutting_down.done()
    force.set()
    report = await asyncio.wait_for(shutting_down, 2.0)
    assert report.cancelled == ("stuck",)
    assert loop.time() - started < 2.0


async def test_a_force_already_set_skips_the_grace_period() -> None:
    supervisor = Supervisor()
    supervisor.start("stuck", ignore_stop())
    force = asyncio.Event()
    force.set()
    report = await asyncio.wait_for(supervisor.shutdown(30.0, force=force), 2.0)
    assert report.cancelled == ("stuck",)


async def test_a_task_that_swallows_cancellation_is_abandoned_in_bounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor(cancel_timeout_s=0.05)
    release = asyncio.Event()
    task = supervisor.start("stubborn", refuse_cancellation(release))
    with caplog.at_level(logging.ERROR, logger="engine.lifecycle"):
        report = await asyncio.wait_for(supervisor.shutdown(0.0), 2.0)
    assert report.stuck == ("stubborn",)
    assert "ignored cancellation" in caplog.text
    release.set()  # let it end, so the loop closes cleanly
    await asyncio.wait_for(task, 1.0)


async def test_no_task_starts_after_shutdown() -> None:
    supervisor = Supervisor()
    await supervisor.shutdown(0.0)
    with pytest.raises(RuntimeError, match="shutting down"):
        supervisor.start("late", ignore_stop())


async def test_a_failure_while_draining_is_recorded_without_a_new_stop() -> None:
    reasons: list[str] = []
    supervisor = Supervisor(on_death=reasons.append)
    supervisor.start("drain", fail_after(supervisor.stop, "lost a result"))
    report = await supervisor.shutdown(1.0)
    assert [failure.name for failure in report.failures] == ["drain"]
    assert report.finished == ("drain",)
    assert reasons == []


# ── ServiceLifecycle ────────────────────────────────────────────────────────────────────────


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


async def test_a_second_signal_forces_and_restores_default_handling() -> None:
    life = ServiceLifecycle()
    with life:
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


async def test_its_supervisor_requests_a_stop_when_a_task_dies() -> None:
    life = ServiceLifecycle()
    calls: list[str] = []
    life.on_stop(lambda: calls.append("marker removed"))
    supervisor = life.supervisor()
    gate = asyncio.Event()
    supervisor.start("worker", fail_after(gate, "boom"))
    gate.set()
    await asyncio.wait_for(life.wait(), 1.0)
    assert life.reason == "task worker died: RuntimeError: boom"
    assert calls == ["marker removed"]
    await supervisor.shutdown(0.0)
