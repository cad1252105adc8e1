"""The commands that follow a run meet an API restart the way an operator does (real
`schemabridge api` and `worker` processes on loopback): `runs logs --follow`, which polls and
so hears no `event: stopping`, rides out a SIGTERM and a new api 2 s later with one calm line,
every log line printed exactly once; `runs watch` and `runs submit --wait` typed while the
api is down wait for it (one warning line) under `--reconnect-for`, give up on a port nothing
listens on within that bound with the usual one-line error, and fail at once on a refused key.
The run waits on a gate the test opens, so no step depends on timing."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from api.cli.reconnect import RESTARTING_LINE
from tests.conftest import Backend
from tests.e2e.cli_harness import Stack
from tests.e2e.outage_harness import Follower, Gate, gate, wait_until
from tests.e2e.rest_harness import process_env
from tests.e2e.test_cli_reconnect import (
    WORKFLOW,
    Restartable,
    follower,
    free_port,
    noticed,
    restartable,
    submit,
    warnings,
)

RESTART_PAUSE_S = 2.0
"""How long the api stays down: past the `--reconnect-for 1` of the followers."""


@pytest.fixture(scope="module")
def held() -> Iterator[Gate]:
    with gate() as running:
        yield running


def test_logs_follow_rides_out_an_api_restart(tmp_path: Path, held: Gate) -> None:
    """SIGTERM, then a new api 2 s later (past `--reconnect-for 1`): the restarting line once,
    no warning, and the whole log printed once, in order, then exit 0 as the run ends."""
    with restartable(tmp_path, held) as stacked, ExitStack() as later:
        stack = stacked.stack
        run = submit(stack, "logs-restart")
        args = ["runs", "logs", run, "-f", "-o", "json", "--reconnect-for", "1"]
        logs = follower(stack, stack.url, "logs-restart", *args)
        later.callback(logs.kill)
        later.callback(held.open, "logs-restart")
        wait_until(lambda: logs.stdout() != "", "the first log line")
        assert stacked.api.stop(signal.SIGTERM) == 0
        wait_until(lambda: noticed(logs), "the follower to notice the stop")
        second = stacked.restart_after(RESTART_PAUSE_S)
        later.callback(second.kill)
        assert second.wait_for_url() == stack.url
        held.open("logs-restart")
        assert logs.wait() == 0, (logs.stdout(), logs.stderr())
        everything = stack.ok("runs", "logs", run, "-o", "json").stdout
    assert logs.stderr().splitlines() == [RESTARTING_LINE], logs.stderr()
    followed = [json.loads(line)["id"] for line in logs.stdout().splitlines()]
    assert followed == [json.loads(line)["id"] for line in everything.splitlines()]
    assert len(followed) == len(set(followed)) >= 2, followed  # lines before and after


def back_once_it_waits(
    stacked: Restartable, later: ExitStack, running: Follower, progress: Callable[[], str]
) -> None:
    """Once `running` said it waits for the stopped api, a new api after the pause, and the
    follower's first progress line (on `progress`: stdout for a watch, stderr for a wait)."""
    wait_until(lambda: bool(warnings(running.stderr())), "the follower to say it waits")
    second = stacked.restart_after(RESTART_PAUSE_S)
    later.callback(second.kill)
    assert second.wait_for_url() == stacked.stack.url
    wait_until(lambda: "RUNNING" in progress(), "the follower's first progress line")


def test_watch_typed_while_the_api_is_down_waits_for_it(tmp_path: Path, held: Gate) -> None:
    """The api stopped before `runs watch` starts and back 2 s later: one warning saying what
    the watch waits for, then the run followed to its end (exit 0)."""
    with restartable(tmp_path, held) as stacked, ExitStack() as later:
        stack = stacked.stack
        run = submit(stack, "watch-down")
        later.callback(held.open, "watch-down")
        assert stacked.api.stop(signal.SIGTERM) == 0
        watch = follower(stack, stack.url, "watch-down", "runs", "watch", run)
        later.callback(watch.kill)
        back_once_it_waits(stacked, later, watch, watch.stdout)
        held.open("watch-down")
        assert watch.wait() == 0, (watch.stdout(), watch.stderr())
    said = watch.stderr().splitlines()
    assert "Traceback" not in watch.stderr()
    (waiting,) = warnings(watch.stderr())
    assert waiting.startswith(f"warning: cannot reach the SchemaBridge API at {stack.url}: ")
    assert waiting.endswith("; waiting up to 1 min for it to answer"), waiting
    assert said[1].startswith("the API answered after "), said
    assert watch.stdout().splitlines()[-1] == f"run {run} SUCCEEDED"


def test_submit_wait_typed_while_the_api_is_down_waits_for_it(tmp_path: Path, held: Gate) -> None:
    """`runs submit --wait` without an idempotency key while the api is down: a connection
    refused never reached a server, so the submission is sent again once the api is back (one
    warning), the run followed to its end, and exactly one run made."""
    with restartable(tmp_path, held) as stacked, ExitStack() as later:
        stack = stacked.stack
        later.callback(held.open, "submit-down")
        assert stacked.api.stop(signal.SIGTERM) == 0
        gated = json.dumps({"gate": "submit-down"})
        args = ["runs", "submit", WORKFLOW, "--input", gated, "--wait"]
        waiting = follower(stack, stack.url, "submit-down", *args)
        later.callback(waiting.kill)
        back_once_it_waits(stacked, later, waiting, waiting.stderr)
        held.open("submit-down")
        assert waiting.wait() == 0, (waiting.stdout(), waiting.stderr())
        made = stack.json("runs", "list", "--workflow", WORKFLOW)
    assert "Traceback" not in waiting.stderr()
    (said,) = warnings(waiting.stderr())
    assert said.startswith(f"warning: cannot reach the SchemaBridge API at {stack.url}: ")
    assert said.endswith("; waiting up to 1 min for it to answer"), said
    assert len(made["items"]) == 1, made


def test_submit_wait_gives_up_on_a_port_nothing_listens_on(tmp_path: Path) -> None:
    """As `runs watch`: tried again within `--reconnect-for` only, then the one-line error."""
    env = process_env(Backend("embedded", f"sqlite:///{tmp_path / 'x.db'}", None), tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    stack = Stack("nowhere", url, "sbk_unused", env, "", tmp_path)
    args = ["runs", "submit", WORKFLOW, "--wait", "--reconnect-for", "1"]
    waiting = follower(stack, url, "submit-nowhere", *args)
    try:
        assert waiting.wait(timeout_s=30) == 4, (waiting.stdout(), waiting.stderr())
    finally:
        waiting.kill()
    said, error = waiting.stderr().splitlines()
    assert said.endswith("; waiting up to 1.0 s for it to answer"), said
    assert error.startswith(f"error: cannot reach the SchemaBridge API at {url}: "), error


def test_watch_gives_up_on_a_port_nothing_listens_on(tmp_path: Path) -> None:
    """A wrong --api-url is tried again only within `--reconnect-for`, then the usual one-line
    error (exit 4), not "gave up getting the API back": it was never there."""
    env = process_env(Backend("embedded", f"sqlite:///{tmp_path / 'x.db'}", None), tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    stack = Stack("nowhere", url, "sbk_unused", env, "", tmp_path)
    started = time.monotonic()
    watch = follower(stack, url, "watch-nowhere", "runs", "watch", "x" * 36, "--reconnect-for", "1")
    try:
        assert watch.wait(timeout_s=30) == 4, (watch.stdout(), watch.stderr())
    finally:
        watch.kill()
    assert time.monotonic() - started < 15  # the process's start and 1 s of tries
    waiting, error = watch.stderr().splitlines()
    assert waiting.endswith("; waiting up to 1.0 s for it to answer"), waiting
    assert error == (
        f"error: cannot reach the SchemaBridge API at {url}: connection refused; start "
        "`schemabridge serve` or set --api-url (SCHEMABRIDGE_API_URL)"
    )


def test_watch_with_a_refused_key_fails_at_once(serve_api: Stack) -> None:
    """A 401 is not an outage: one line, exit 4, no waiting however long --reconnect-for."""
    started = time.monotonic()
    result = serve_api.cli("runs", "watch", "x" * 36, "--reconnect-for", "60", key="sbk_no")
    assert result.returncode == 4, result
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: the API refused the request: ")
    assert time.monotonic() - started < 30
