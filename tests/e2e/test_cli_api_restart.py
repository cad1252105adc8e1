"""The commands that follow a run meet an API restart the way an operator does (real
`schemabridge api` and `worker` processes on loopback): `runs logs --follow`, which polls and
so hears no `event: stopping`, rides out a SIGTERM and a new api 2 s later with one calm line,
every log line printed exactly once. The run waits on a gate the test opens, so no step
depends on timing."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from api.cli.reconnect import RESTARTING_LINE
from tests.e2e.outage_harness import Gate, gate, wait_until
from tests.e2e.test_cli_reconnect import (
    follower,
    noticed,
    restartable,
    submit,
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
