"""A command that follows a run rides out the API going away (real subprocesses): `runs watch`
and `runs logs --follow` through a proxy that answers 503 and drops connections, and through a
real `serve` that is killed and started again. They reconnect, print nothing twice, say each
outage in one warning line, and after `--reconnect-for` give up with exit 4 and one `error:`
line; an `api` stopped on purpose (SIGTERM) is a restart: one calm line, no outage. The
watched run waits on a gate the test opens, so no step depends on timing."""

from __future__ import annotations

import functools
import json
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from api.cli.reconnect import RESTARTING_LINE
from tests.conftest import Backend
from tests.e2e.cli_harness import SCHEMABRIDGE, Stack, _admin_key
from tests.e2e.outage_harness import Follower, Gate, gate, proxy, wait_until
from tests.e2e.rest_harness import Service, process_env, service, upgraded

WORKFLOW = "reconnect-gate"


@pytest.fixture(scope="module")
def held() -> Iterator[Gate]:
    with gate() as running:
        yield running


def workflow_file(directory: Path, gate_url: str) -> Path:
    path = directory / "gate.json"
    path.write_text(
        json.dumps(
            {
                "name": WORKFLOW,
                "vertices": {
                    "wait": {
                        "type": "GATEWAY",
                        "config": {
                            "url": gate_url + "/hold/{{ input.gate }}",
                            "timeoutMs": 600_000,
                        },
                    }
                },
            }
        )
    )
    return path


def submit(run: Stack, name: str) -> str:
    submitted = run.json("runs", "submit", WORKFLOW, "--input", json.dumps({"gate": name}))
    return str(submitted["run"]["id"])


def follower(stack: Stack, api_url: str, name: str, *args: str) -> Follower:
    env = dict(stack.env)
    env["SCHEMABRIDGE_API_URL"] = api_url
    env["SCHEMABRIDGE_API_KEY"] = stack.admin_key
    return Follower([SCHEMABRIDGE, *args], env, stack.tmp, name)


def warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning: ")]


@pytest.fixture(scope="module")
def published(serve_api: Stack, held: Gate) -> None:
    serve_api.ok("workflows", "publish", str(workflow_file(serve_api.tmp, held.url)))


@pytest.mark.usefixtures("published")
def test_watch_rides_out_503s_and_dropped_connections(serve_api: Stack, held: Gate) -> None:
    run = submit(serve_api, "outage-503")
    with proxy(serve_api.url) as front:
        watch = follower(serve_api, front.url, "watch-503", "runs", "watch", run)
        try:
            wait_until(lambda: "RUNNING" in watch.stdout(), "the first progress line")
            front.switch("503")
            wait_until(lambda: front.answered >= 2, "two tries answered 503")
            front.switch("drop")
            wait_until(lambda: front.answered >= 2, "two tries dropped")
            front.switch("forward")
            wait_until(lambda: "reconnected" in watch.stderr(), "the watch to reconnect")
            held.open("outage-503")
            assert watch.wait() == 0, (watch.stdout(), watch.stderr())
        finally:
            watch.kill()
    out, err = watch.stdout(), watch.stderr()
    assert "Traceback" not in out + err
    assert out.splitlines()[-1] == f"run {run} SUCCEEDED"
    # Nothing said twice: a new stream starts with the progress the last one ended on.
    progress = [line.split("  ", 1)[1] for line in out.splitlines()[:-1]]
    assert progress == ["RUNNING  steps 0/1", "SUCCEEDED  steps 1/1"], out
    (warning,) = warnings(err)  # one outage, one warning, however many tries
    # The outage began with the event stream cut mid-way.
    assert warning.startswith("warning: the connection to the SchemaBridge API at")
    assert warning.endswith("reconnecting for up to 1 min")
    assert len([line for line in err.splitlines() if line.startswith("reconnected")]) == 1


@pytest.mark.usefixtures("published")
@pytest.mark.parametrize("mode", ["503", "drop"])
def test_watch_gives_up_after_reconnect_for(serve_api: Stack, held: Gate, mode: str) -> None:
    name = f"give-up-{mode}"
    run = submit(serve_api, name)
    try:
        with proxy(serve_api.url) as front:
            watch = follower(
                serve_api, front.url, f"watch-{name}", "runs", "watch", run, "--reconnect-for", "2"
            )
            try:
                wait_until(lambda: "RUNNING" in watch.stdout(), "the first progress line")
                front.switch("503" if mode == "503" else "drop")
                assert watch.wait() == 4, (watch.stdout(), watch.stderr())
            finally:
                watch.kill()
    finally:
        held.open(name)
    err = watch.stderr()
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 2, err  # the outage's warning, then the one error line
    assert lines[0].startswith("warning: ")
    assert lines[1].startswith("error: gave up after ")
    assert lines[1].endswith(f"the run goes on: `schemabridge runs watch {run}`")
    assert ("answered 503" if mode == "503" else "the connection to the SchemaBridge API") in lines[
        1
    ]


@pytest.mark.usefixtures("published")
def test_logs_follow_gives_up_after_reconnect_for(serve_api: Stack, held: Gate) -> None:
    run = submit(serve_api, "logs-give-up")
    try:
        with proxy(serve_api.url) as front:
            args = ["runs", "logs", run, "--follow", "--reconnect-for", "2"]
            logs = follower(serve_api, front.url, "logs-give-up", *args)
            try:
                wait_until(lambda: logs.stdout() != "", "the first log line")
                front.switch("503")
                assert logs.wait() == 4, (logs.stdout(), logs.stderr())
            finally:
                logs.kill()
    finally:
        held.open("logs-give-up")
    lines = logs.stderr().splitlines()
    assert len(lines) == 2 and lines[0].startswith("warning: "), lines
    assert lines[1].startswith("error: gave up after ")
    assert f"`schemabridge runs logs {run} --follow`" in lines[1]


def test_a_refusal_is_not_retried(serve_api: Stack) -> None:
    """A 404 comes back the same however often it is asked: one line at once, exit 1."""
    result = serve_api.cli("runs", "logs", "no-such-run", "--follow", "--reconnect-for", "60")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: no run 'no-such-run'; `schemabridge runs list`")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_watch_and_logs_follow_a_serve_that_is_killed_and_restarted(
    tmp_path: Path, held: Gate
) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    # A short lease: the restarted serve takes the killed one's step back within seconds.
    env = process_env(Backend("embedded", database, None), tmp_path, lease_s="2")
    key = _admin_key(upgraded(env))
    port = free_port()
    args = ["serve", "--port", str(port), "--no-access-log"]
    with service(args, env, tmp_path / "serve1.log") as first:
        url = first.wait_for_url()
        stack = Stack("restart", url, key, env, "", tmp_path)
        stack.ok("workflows", "publish", str(workflow_file(tmp_path, held.url)))
        run = submit(stack, "restart")
        watch = follower(
            stack, url, "watch-restart", "runs", "watch", run, "--reconnect-for", "120"
        )
        logs = follower(
            stack,
            url,
            "logs-restart",
            "runs",
            "logs",
            run,
            "-f",
            "-o",
            "json",
            "--reconnect-for",
            "120",
        )
        try:
            wait_until(lambda: "RUNNING" in watch.stdout(), "the first progress line")
            wait_until(lambda: logs.stdout() != "", "the first log line")
            first.kill()
            wait_until(lambda: bool(warnings(watch.stderr())), "the watch to notice")
            wait_until(functools.partial(noticed, logs), "the logs to notice")
            with service(args, env, tmp_path / "serve2.log") as second:
                assert second.wait_for_url() == url
                held.open("restart")
                assert watch.wait() == 0, (watch.stdout(), watch.stderr())
                assert logs.wait() == 0, (logs.stdout(), logs.stderr())
                everything = stack.ok("runs", "logs", run, "-o", "json").stdout
                second.stop()
        finally:
            watch.kill()
            logs.kill()
    assert "Traceback" not in watch.stderr() + logs.stderr() + watch.stdout()
    assert watch.stdout().splitlines()[-1] == f"run {run} SUCCEEDED"
    assert len(warnings(watch.stderr())) == 1
    # A poller cannot tell a killed serve from a restarting one (nothing listens): it waits
    # for it calmly, under a restart's bound.
    assert logs.stderr().splitlines() == [RESTARTING_LINE], logs.stderr()
    followed = [json.loads(line)["id"] for line in logs.stdout().splitlines()]
    assert len(followed) == len(set(followed)), followed  # no line printed twice
    assert followed == [json.loads(line)["id"] for line in everything.splitlines()]


@dataclass
class Restartable:
    """A worker and an api (on a port that the next api takes again) over one database."""

    stack: Stack
    args: list[str]
    env: dict[str, str]
    tmp: Path
    api: Service

    def restart_after(self, pause_s: float) -> Service:
        """A new api on the same port, `pause_s` after the call (the old one stopped)."""
        time.sleep(pause_s)
        return Service(self.args, self.env, self.tmp / f"api-{time.monotonic_ns()}.log")


@contextmanager
def restartable(tmp_path: Path, held: Gate) -> Iterator[Restartable]:
    database = f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"
    env = process_env(Backend("embedded", database, None), tmp_path)
    key = _admin_key(upgraded(env))
    args = ["api", "--port", str(free_port()), "--no-access-log"]
    with (
        service(["worker", "--name", "w1"], env, tmp_path / "worker.log"),
        service(args, env, tmp_path / "api1.log") as first,
    ):
        url = first.wait_for_url()
        stack = Stack("restart", url, key, env, "", tmp_path)
        stack.ok("workflows", "publish", str(workflow_file(tmp_path, held.url)))
        yield Restartable(stack, args, env, tmp_path, first)


def noticed(running: Follower) -> bool:
    """Whether a follower said on stderr that the API went: restarting (or, lost)."""
    said = running.stderr()
    return RESTARTING_LINE in said or bool(warnings(said))


def test_an_api_restart_is_one_calm_line_and_no_outage(tmp_path: Path, held: Gate) -> None:
    """`schemabridge api` stopped with SIGTERM (a rolling restart) ends its event streams with
    `event: stopping`: `runs watch` and `submit --wait` say once that the API is restarting (no
    warning: nothing failed), and the restart does not count against `--reconnect-for` (1 s,
    which the api stays down past): both follow the run on the next api until it ends."""
    with restartable(tmp_path, held) as stacked:
        stack, url, first = stacked.stack, stacked.stack.url, stacked.api
        run = submit(stack, "planned")
        watch = follower(stack, url, "watch-planned", "runs", "watch", run, "--reconnect-for", "1")
        wait_ = follower(
            stack, url, "wait-planned", "runs", "submit", WORKFLOW,
            "--input", json.dumps({"gate": "planned"}), "--wait", "--reconnect-for", "1",
        )  # fmt: skip
        followers = (watch, wait_)
        try:
            wait_until(lambda: "RUNNING" in watch.stdout(), "the watch's first progress line")
            wait_until(lambda: "RUNNING" in wait_.stderr(), "the wait's first progress line")
            assert first.stop(signal.SIGTERM) == 0
            for running in followers:
                wait_until(functools.partial(noticed, running), "a follower to notice the stop")
            time.sleep(2)  # down past --reconnect-for: a restart is not an outage
            with service(stacked.args, stacked.env, tmp_path / "api2.log") as second:
                assert second.wait_for_url() == url
                held.open("planned")
                for running in followers:
                    assert running.wait() == 0, (running.stdout(), running.stderr())
                second.stop()
        finally:
            for running in followers:
                running.kill()
            held.open("planned")
    assert watch.stderr().splitlines() == [RESTARTING_LINE], watch.stderr()
    assert watch.stdout().splitlines()[-1] == f"run {run} SUCCEEDED"
    said = wait_.stderr().splitlines()
    assert "Traceback" not in wait_.stderr() and not warnings(wait_.stderr()), said
    submitted = said[0].split()[1]  # "run ID submitted (...); following it"
    assert said.count(RESTARTING_LINE) == 1 and f"run {submitted} SUCCEEDED" in said, said


@pytest.mark.usefixtures("published")
def test_ctrl_c_on_a_follower_says_the_run_goes_on(serve_api: Stack, held: Gate) -> None:
    run = submit(serve_api, "ctrl-c-watch")
    waiting = json.dumps({"gate": "ctrl-c-submit"})
    try:
        watch = follower(serve_api, serve_api.url, "ctrl-c-watch", "runs", "watch", run)
        wait_ = follower(
            serve_api, serve_api.url, "ctrl-c-submit", "runs", "submit", WORKFLOW,
            "--input", waiting, "--wait",
        )  # fmt: skip
        try:
            wait_until(lambda: "RUNNING" in watch.stdout(), "the watch's first progress line")
            wait_until(lambda: "RUNNING" in wait_.stderr(), "the wait's first progress line")
            for running in (watch, wait_):
                running.process.send_signal(signal.SIGINT)
                assert running.wait() == 130, (running.stdout(), running.stderr())
        finally:
            watch.kill()
            wait_.kill()
    finally:
        held.open("ctrl-c-watch")
        held.open("ctrl-c-submit")
    submitted = wait_.stderr().splitlines()[0].split()[1]  # "run ID submitted (...)"
    for running, run_id in ((watch, run), (wait_, submitted)):
        assert "Traceback" not in running.stderr()
        assert running.stderr().splitlines()[-1] == (
            f"interrupted; run {run_id} goes on: follow it with `schemabridge runs watch {run_id}`"
        )
