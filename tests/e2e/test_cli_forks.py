"""The end-to-end tests run `schemabridge` forked from a process that imported the CLI once
(`tests/cli_forks.py`): each command must print, to stdout and stderr, and exit exactly as the
installed console script does."""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import api.cli
from tests import cli_forks
from tests.e2e.rest_harness import ROOT, SCHEMABRIDGE
from tests.e2e.test_cli_errors import free_port


def _script(args: list[str], env: dict[str, str], cwd: Path, stdin: str) -> tuple[int, str, str]:
    done = cli_forks.run_script([SCHEMABRIDGE, *args], env=env, cwd=cwd, timeout=120, stdin=stdin)
    return done.returncode, done.stdout, done.stderr


def _forked(args: list[str], env: dict[str, str], cwd: Path, stdin: str) -> tuple[int, str, str]:
    ran = cli_forks.server().run([SCHEMABRIDGE, *args], env=env, cwd=cwd, timeout=120, stdin=stdin)
    return ran.returncode, ran.stdout, ran.stderr


COMMANDS: list[tuple[str, list[str], str]] = [
    ("help", ["--help"], ""),
    ("a group's help", ["runs", "--help"], ""),
    ("an unknown command", ["version"], ""),
    ("an unknown option", ["runs", "list", "--bogus"], ""),
    ("a valid workflow", ["validate", "examples/support-ticket.json"], ""),
    ("a missing file", ["validate", "no-such-workflow.json"], ""),
    (
        "a workflow on stdin",
        ["validate", "-"],
        (ROOT / "examples" / "support-ticket.json").read_text(),
    ),
    ("garbage on stdin", ["validate", "-"], "{not json"),
    # Read as the script reads it: "\r\n" kept (a CRLF value counts its "\r"s).
    ("a CRLF value on stdin", ["secrets", "set", "NAME", "--tenant", "t"], "\r\n" * 40_000),
    ("an API that does not answer", ["runs", "list"], ""),
    ("an invalid setting", ["keys", "list"], ""),
]


@pytest.mark.parametrize(("what", "args", "stdin"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_forked_command_prints_and_exits_as_the_script(
    what: str, args: list[str], stdin: str, tmp_path: Path
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SCHEMABRIDGE_API_URL": f"http://127.0.0.1:{free_port()}",
        "SCHEMABRIDGE_API_KEY": "sb_not-a-key",
    }
    if what == "an invalid setting":
        env["SCHEMABRIDGE_BACKPRESSURE_MAX_DEPTH"] = "abc"
    script = _script(args, env, ROOT, stdin)
    forked = _forked(args, env, ROOT, stdin)
    assert forked == script
    assert "Traceback" not in script[2]


def test_a_forked_command_runs_where_it_is_told_with_only_its_environment(tmp_path: Path) -> None:
    """The working directory and environment are the command's, not the fork server's: a
    relative path is read from `cwd`, and a variable the test process has is absent."""
    (tmp_path / "here.json").write_text("{}", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin"}
    script = _script(["validate", "here.json"], env, tmp_path, "")
    forked = _forked(["validate", "here.json"], env, tmp_path, "")
    assert forked == script
    assert script[0] != 0 and "here.json" in script[1] + script[2]


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    """`runs watch` on an API that accepts connections but never answers outlives a short
    timeout: the fork is killed and the caller gets `TimeoutExpired`, as from subprocess."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = {
            "PATH": "/usr/bin:/bin",
            "SCHEMABRIDGE_API_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "SCHEMABRIDGE_API_KEY": "sb_not-a-key",
        }
        with pytest.raises(subprocess.TimeoutExpired):
            cli_forks.server().run([SCHEMABRIDGE, "runs", "list"], env=env, cwd=tmp_path, timeout=2)


def test_a_server_that_died_is_started_again(tmp_path: Path) -> None:
    """A fork server killed (an OOM kill, a crash) leaves its socket file: the next command
    starts a new server and waits for it, rather than knock on the dead one's socket."""
    forks = cli_forks.ForkServer()
    try:
        env = {"PATH": "/usr/bin:/bin"}
        assert (
            forks.run([SCHEMABRIDGE, "--help"], env=env, cwd=tmp_path, timeout=60).returncode == 0
        )
        dead = forks._process
        assert dead is not None
        dead.kill()
        dead.wait(10)
        again = forks.run([SCHEMABRIDGE, "--help"], env=env, cwd=tmp_path, timeout=60)
        assert again.returncode == 0, again.stderr
    finally:
        forks.close()


def test_a_command_exits_once_its_threads_that_are_no_daemons_end(tmp_path: Path) -> None:
    """The script's interpreter waits, at exit, for the threads that are not daemons (an
    aiosqlite connection left open is one, and keeps the script from ever exiting): so does a
    fork, so that a test sees what the script would do."""
    ended = tmp_path / "ended"

    def main() -> None:
        def late() -> None:
            time.sleep(0.5)
            ended.write_text("ended", encoding="utf-8")

        threading.Thread(target=late).start()

    pid = os.fork()
    if pid == 0:  # the fork's end of a command, with this main as the CLI's
        code = 1
        try:
            atexit._clear()  # this test process's (its fork server's close) are not its
            api.cli.main = main
            code = cli_forks._exit_code()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ended.read_text(encoding="utf-8") == "ended"
