"""Ctrl-C ends a remote command at once, whichever thread of the process the kernel delivers
SIGINT to (`api.cli.remote.call`): the command's process is a subprocess here, so that the
signal reaches a real process with a real event loop."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix signals")

SCRIPT = textwrap.dedent(
    """
    import asyncio, signal, sys, threading, time

    import typer

    from api.cli.remote import Remote, call

    def deliver_to_another_thread() -> None:
        time.sleep(0.5)
        # The kernel may pick any thread for a process-directed signal; this picks this one.
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(120)

    async def action(api):
        threading.Thread(target=deliver_to_another_thread, daemon=True).start()
        try:
            await asyncio.sleep(60)  # the loop sleeps in select(), nothing else wakes it
        except asyncio.CancelledError:
            if sys.argv[1] == "swallowed":
                await asyncio.sleep(60)  # a library that loses the cancellation
            raise
        return "not interrupted"

    try:
        print(call(Remote("http://127.0.0.1:9", None), action, following=lambda: "RUN-ID"))
    except typer.Exit as end:  # what typer's app does with it
        sys.exit(end.exit_code)
    """
)


@pytest.mark.parametrize("cancellation", ["honoured", "swallowed"])
def test_ctrl_c_delivered_to_another_thread_ends_the_command_at_once(cancellation: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, cancellation],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == (
        "interrupted; run RUN-ID goes on: follow it with `schemabridge runs watch RUN-ID`"
    )
    assert "Traceback" not in done.stderr
    assert took < 20, took  # not the 60 s the loop would have slept
