"""`schemabridge ARGS` in a process forked from one that has already imported SchemaBridge.

A `schemabridge` process started from the console script spends ~0.3 s of CPU importing the CLI
(typer, rich, httpx, pydantic) before a command does anything, and a service (`api`, `worker`,
`serve`) about a second more for FastAPI, uvicorn, SQLAlchemy and the engine; the end-to-end
tests start well over a thousand of them on a 2-core machine. Here a fork server
(`python -m tests.cli_forks SOCKET`, one per test process, started on first use) imports all of
that once; each command is a new process forked from it that takes the command's environment,
working directory, argv, stdin, stdout and stderr (files) and runs the console script's entry
point (`api.cli.main`) to its exit code, which the server reads with `waitpid` and hands back
(a negative number when a signal ended it, as `subprocess` says it). Only who imported the
modules differs from the installed script; `SCHEMABRIDGE_TEST_CLI=script` runs the script itself
for every command instead (to tell the two apart when a test fails), and a test that needs the
binary itself (a terminal, the script's own start) runs `SCHEMABRIDGE` with `subprocess`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

PRELOAD = (
    "api.cli",
    "api.cli.client",
    "api.cli.client_routes",
    "api.cli.session",
    "api.cli.wire",
    "api.cli.environment",
    "httpx_sse",
    "engine.settings",
    "engine.validation",
    "engine.operations",
    "engine.operations.startup",
    "engine.operations.metrics",
    "engine.runtime",
    "engine.lifecycle",
    "api.rest",
)
"""Imported once by the fork server: the CLI and what its commands and services import on first
use (the REST client, the settings, the validator, the store, the engine and the REST app)."""
ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0
SCRIPT_MODE = "SCHEMABRIDGE_TEST_CLI"


class ForkedProcess:
    """A command forked by the server, read like a `subprocess.Popen`: `pid`, `poll`, `wait`,
    `send_signal`, `kill`, `returncode`."""

    def __init__(self, args: list[str], connection: socket.socket) -> None:
        self.args = args
        self._connection = connection
        self._received = b""
        self.pid = int(self._line(START_TIMEOUT_S))
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> bytes:
        """The server's next line (socket.makefile cannot be read again after a timeout)."""
        self._connection.settimeout(timeout)
        while b"\n" not in self._received:
            chunk = self._connection.recv(64)
            if not chunk:
                raise RuntimeError(f"the CLI fork server stopped answering for {self.args}")
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return line

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = int(self._line(timeout))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self._connection.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(0.001)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The test process's side: starts the server on first use and sends it commands."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._scratch = tempfile.TemporaryDirectory(prefix="sb-cli-forks-")
        self._socket = os.path.join(self._scratch.name, "server.sock")

    def _started(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                # A server that died left its socket (wait for the new one's, not that) and
                # its stdin pipe.
                if self._process is not None and self._process.stdin is not None:
                    self._process.stdin.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._socket)
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.cli_forks", self._socket],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                )
                deadline = time.monotonic() + START_TIMEOUT_S
                while not os.path.exists(self._socket):
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the CLI fork server did not start")
                    time.sleep(0.02)
            return self._socket

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        stdin: Path,
        stdout: Path,
        stderr: Path,
        new_session: bool = False,
    ) -> ForkedProcess:
        """`subprocess.Popen(argv, env=env, cwd=cwd, stdin/stdout/stderr=those files (the
        output ones appended to), start_new_session=new_session)` for argv = [the schemabridge
        script, *args]."""
        for output in (stdout, stderr):  # there once this returns, as with Popen
            output.touch()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self._started())
            request = {
                "argv": list(argv),
                "env": dict(env),
                "cwd": str(cwd),
                "files": [str(stdin), str(stdout), str(stderr)],
                "new_session": new_session,
            }
            connection.sendall(json.dumps(request).encode() + b"\n")
            return ForkedProcess(list(argv), connection)
        except BaseException:
            connection.close()
            raise

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        timeout: float,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run(argv, env=env, cwd=cwd, input=stdin, capture_output=True,
        text=True, timeout=timeout, check=False)`."""
        with tempfile.TemporaryDirectory(prefix="sb-cli-", dir=self._scratch.name) as scratch:
            files = Path(scratch)
            (files / "in").write_text(stdin or "", encoding="utf-8")
            process = self.start(
                argv,
                env=env,
                cwd=cwd,
                stdin=files / "in",
                stdout=files / "out",
                stderr=files / "err",
            )
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
                raise
            return subprocess.CompletedProcess(
                list(argv),
                code,
                (files / "out").read_text(encoding="utf-8"),
                (files / "err").read_text(encoding="utf-8"),
            )

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._scratch.cleanup()


@functools.cache
def server() -> ForkServer:
    """This test process's server, closed when the process exits."""
    forks = ForkServer()
    atexit.register(forks.close)
    return forks


def scripted() -> bool:
    """Whether the tests run the installed script for every command (`SCHEMABRIDGE_TEST_CLI`)."""
    return os.environ.get(SCRIPT_MODE) == "script"


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    timeout: float,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`ForkServer.run` on this test process's server (in `cwd`, default this process's), or
    `subprocess.run` of the script itself when `scripted()`."""
    where = Path.cwd() if cwd is None else cwd
    if scripted():
        return run_script(argv, env=env, cwd=where, timeout=timeout, stdin=stdin)
    return server().run(argv, env=env, cwd=where, timeout=timeout, stdin=stdin)


def run_script(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed script itself, as `ForkServer.run` stands for it."""
    return subprocess.run(
        list(argv),
        env=dict(env),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# ── the server ─────────────────────────────────────────────────────────────────────────────


def serve(path: str) -> None:
    """Import SchemaBridge, then fork a command per connection until stdin closes (the test
    process ended or closed it); answer each command's exit code on its connection."""
    for module in PRELOAD:
        __import__(module)
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)
    running: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(wakeup_read, selectors.EVENT_READ)
    events.register(sys.stdin.buffer, selectors.EVENT_READ)

    def forget_server() -> None:
        """In a fork: close what is the server's (its socket, the other commands'
        connections), so that a command holds none of it."""
        events.close()
        for held in (listener, connection, *running.values()):
            os.close(held.detach())
        os.close(wakeup_read)
        os.close(wakeup_write)

    while True:
        for key, _ in events.select():
            if key.fileobj is listener:
                connection, _ = listener.accept()
                _fork(connection, running, forget_server)
            elif key.fileobj == wakeup_read:
                os.read(wakeup_read, 4096)
                _reap(running)
            else:
                return  # stdin readable means closed: nothing else is ever written to it


def _fork(
    connection: socket.socket,
    running: dict[int, socket.socket],
    forget_server: Callable[[], None],
) -> None:
    with connection.makefile("rb") as reader:
        request: dict[str, Any] = json.loads(reader.readline())
    pid = os.fork()
    if pid == 0:
        forget_server()
        _become(request)
    running[pid] = connection
    with contextlib.suppress(OSError):
        connection.sendall(f"{pid}\n".encode())


def _reap(running: dict[int, socket.socket]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = running.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            connection.close()


def _become(request: dict[str, Any]) -> None:
    """In the forked process: become the command, as the console script would start it, run
    it and exit with its code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if request["new_session"]:
        os.setsid()
    stdin, stdout, stderr = request["files"]
    for fd, name, flags in (
        (0, stdin, os.O_RDONLY),
        (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
        (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
    ):
        opened = os.open(name, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # The streams Python opens on files and pipes: UTF-8, block-buffered, stderr escaping what
    # it cannot encode, and on POSIX no newline translated ("\r\n" read as it is).
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", newline="\n")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
    )
    sys.argv = request["argv"]
    # The console script's __main__ is a file, not a module run with -m: click names the
    # program after argv[0] only then.
    main_module = sys.modules["__main__"]
    main_module.__package__ = None
    main_module.__spec__ = None
    os._exit(_exit_code())


def _exit_code() -> int:
    """Run the entry point; the exit code and last output the interpreter's exit would give."""
    from api.cli import main

    try:
        main()
        code = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    # The interpreter's exit, in its order: wait for the threads that are not daemons (a
    # connection left open keeps the script from exiting: aiosqlite's threads are not), then
    # the atexit functions.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


if __name__ == "__main__":
    serve(sys.argv[1])
