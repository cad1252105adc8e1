"""The reconnection policy of the commands that follow a run (`api.cli.reconnect`), fed
timestamps: backoff that grows to a cap, an outage bounded by time and by count, a success that
starts the count afresh, refusals that are never retried, and a restart (the API said it
stops) bounded apart from failures."""

from __future__ import annotations

import json

import pytest

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.first_contact import first_answer
from api.cli.reconnect import Reconnect

DOWN = ApiFailure("cannot reach the API: connection refused", ExitCode.UNREACHABLE, transient=True)
NOT_FOUND = ApiFailure("no run 'r'", ExitCode.FAILED, status=404)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_delay_doubles_up_to_its_cap() -> None:
    clock = Clock()
    policy = Reconnect(window_s=1_000, first_delay_s=0.5, max_delay_s=4, clock=clock)
    delays = [policy.delay_after(DOWN) for _ in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_an_outage_is_bounded_by_time() -> None:
    clock = Clock()
    policy = Reconnect(window_s=10, first_delay_s=4, max_delay_s=4, clock=clock)
    assert policy.delay_after(DOWN) == 4
    clock.now += 8
    assert policy.delay_after(DOWN) == 2  # never sleeps past the window
    clock.now += 2
    assert policy.delay_after(DOWN) is None
    gave_up = policy.gave_up(DOWN, "schemabridge runs watch r")
    assert gave_up.exit_code is ExitCode.UNREACHABLE
    assert gave_up.message == (
        "gave up after 3 tries in 10 s to get the API back (cannot reach the API: connection "
        "refused); the run goes on: `schemabridge runs watch r`"
    )


def test_an_outage_is_bounded_by_count() -> None:
    policy = Reconnect(window_s=1_000, max_attempts=3, clock=Clock())
    assert all(policy.delay_after(DOWN) is not None for _ in range(3))
    assert policy.delay_after(DOWN) is None


def test_a_success_ends_the_outage() -> None:
    clock = Clock()
    policy = Reconnect(window_s=10, max_attempts=2, first_delay_s=1, clock=clock)
    assert policy.recovered() is None  # nothing was lost
    policy.delay_after(DOWN)
    clock.now += 6
    policy.delay_after(DOWN)
    assert policy.lost
    assert policy.recovered() == 6
    assert not policy.lost
    clock.now += 100
    assert policy.delay_after(DOWN) == 1  # a new outage: its own window and count
    assert policy.delay_after(DOWN) == 2


def test_a_refusal_is_never_retried() -> None:
    policy = Reconnect(clock=Clock())
    assert policy.delay_after(NOT_FOUND) is None
    assert not policy.lost
    assert policy.gave_up(NOT_FOUND, "schemabridge runs watch r") is NOT_FOUND


def test_the_warning_names_the_reason_and_the_window() -> None:
    policy = Reconnect(window_s=60)
    assert policy.lost_line(DOWN) == (
        "warning: cannot reach the API: connection refused; reconnecting for up to 1 min"
    )


def test_one_try_is_counted_in_the_singular() -> None:
    clock = Clock()
    policy = Reconnect(window_s=0, clock=clock)
    assert policy.delay_after(DOWN) is None
    gave_up = policy.gave_up(DOWN, "schemabridge runs watch r")
    assert gave_up.message.startswith("gave up after 1 try in "), gave_up.message


def test_a_restart_is_bounded_apart_from_the_failure_window() -> None:
    """The API said it stops: what follows counts against the restart's window, not
    `--reconnect-for` (1 s here), and still ends when the API never comes back."""
    clock = Clock()
    policy = Reconnect(window_s=1, restart_window_s=30, first_delay_s=4, max_delay_s=4, clock=clock)
    policy.stopped()
    assert policy.restarting and policy.attempts == 0
    clock.now += 10
    assert policy.delay_after(DOWN) == 4
    clock.now += 18
    assert policy.delay_after(DOWN) == 2  # never sleeps past the restart's window
    clock.now += 2
    assert policy.delay_after(DOWN) is None
    assert policy.gave_up(DOWN, "schemabridge runs watch r").message == (
        "gave up after 3 tries in 30 s to get the API back after it stopped (cannot reach the "
        "API: connection refused); the run goes on: `schemabridge runs watch r`"
    )


def test_a_restart_is_bounded_by_count_and_by_a_longer_failure_window() -> None:
    policy = Reconnect(window_s=1_000, restart_window_s=30, max_attempts=3, clock=Clock())
    policy.stopped()
    assert all(policy.delay_after(DOWN) is not None for _ in range(3))
    assert policy.delay_after(DOWN) is None
    clock = Clock()
    policy = Reconnect(window_s=100, restart_window_s=30, first_delay_s=4, clock=clock)
    policy.stopped()
    clock.now += 60
    assert policy.delay_after(DOWN) == 4  # --reconnect-for is longer: the restart has it too


def test_a_restart_that_ended_leaves_failures_their_own_count() -> None:
    clock = Clock()
    policy = Reconnect(window_s=10, first_delay_s=1, clock=clock)
    policy.stopped()
    policy.delay_after(DOWN)
    clock.now += 5
    assert policy.recovered() is None  # the restart's one line said it all
    assert not policy.lost and not policy.restarting
    assert policy.delay_after(DOWN) == 1  # a failure now: its own window and count
    clock.now += 10
    assert policy.delay_after(DOWN) is None
    assert "after it stopped" not in policy.gave_up(DOWN, "schemabridge runs watch r").message


def test_what_a_restart_looks_like_to_a_poller() -> None:
    """A poller hears no `event: stopping`: the API starting or stopping (503 `not_ready`)
    or nothing listening / the connection broken is a restart; a proxy's 503, the database's
    503, a timeout or a name that does not resolve are failures."""
    import socket

    import httpx

    from api.cli.client_errors import response_failure, transport_failure
    from api.cli.reconnect import looks_like_restart

    url = "http://127.0.0.1:8000"

    def answered(status: int, body: object, content_type: str = "application/json") -> bool:
        request = httpx.Request("GET", f"{url}/runs/r/logs")
        text = body if isinstance(body, str) else json.dumps(body)
        headers = {"content-type": content_type}
        response = httpx.Response(status, text=text, headers=headers, request=request)
        return looks_like_restart(response_failure(response, url))

    def unanswered(error: httpx.TransportError, cause: BaseException | None = None) -> bool:
        error.__cause__ = cause
        return looks_like_restart(transport_failure(error, url, 30))

    assert answered(503, {"code": "not_ready", "message": "the API is starting or stopping"})
    assert not answered(503, {"code": "store_unavailable", "message": "the database"})
    assert not answered(503, "<h1>restarting</h1>", "text/html")
    refused = ConnectionRefusedError(111, "Connection refused")
    assert unanswered(httpx.ConnectError("All connection attempts failed"), refused)
    assert unanswered(httpx.RemoteProtocolError("Server disconnected without a response"))
    assert not unanswered(httpx.ReadTimeout("timed out"))
    unknown = socket.gaierror(-2, "Name or service not known")
    assert not unanswered(httpx.ConnectError("name"), unknown)
    assert not looks_like_restart(DOWN) and not looks_like_restart(NOT_FOUND)


async def test_a_first_request_not_repeatable_after_its_failure_is_not_sent_again() -> None:
    """`first_answer` asks again after a failure worth another try only when `repeatable`
    says so: a submission whose connection broke may have made its run."""
    asked: list[int] = []

    async def ask() -> str:
        asked.append(1)
        raise DOWN

    policy = Reconnect(window_s=60, first_delay_s=0.01, max_delay_s=0.01)
    with pytest.raises(ApiFailure) as raised:
        await first_answer(policy, ask, lambda failure: False)
    assert raised.value is DOWN and len(asked) == 1

    answers = iter([DOWN, DOWN, "run"])

    async def then_answer() -> str:
        answer = next(answers)
        if isinstance(answer, ApiFailure):
            raise answer
        return answer

    assert await first_answer(policy, then_answer, lambda failure: True) == "run"
