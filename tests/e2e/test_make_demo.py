"""`make demo` (demo/monitor.py): it starts `serve --demo`, sets the scene (a fan-out with
declined children, one failed run), prints the URL to open, and stops cleanly on Ctrl-C (a
SIGINT to its whole process group, as a terminal sends it) and on a SIGTERM to it alone."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo.monitor import DECLINED, FANOUT_SIZE
from tests.e2e.browser_harness import http_json

pytestmark = pytest.mark.slow

READY_TIMEOUT_S = 90.0


def wait_for(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def start_demo(here: Path) -> tuple[subprocess.Popen[bytes], Path, dict[str, str]]:
    """`python -m demo.monitor --port 0` in `here`, in a session of its own; its output file."""
    out = here / "demo.out"
    env = {**os.environ, "SCHEMABRIDGE_HEALTH_DIR": str(here / "health")}
    env.pop("SCHEMABRIDGE_DATABASE_URL", None)
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "demo.monitor", "--port", "0"],
            cwd=here,
            env=env,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, out, env


def test_make_demo_shows_a_fan_out_and_a_failure_then_stops_on_ctrl_c(tmp_path: Path) -> None:
    process, out, env = start_demo(tmp_path)
    try:
        wait_for(lambda: "Ctrl-C stops" in out.read_text(), READY_TIMEOUT_S, "the banner")
        text = out.read_text()
        ui = re.search(r"open\s+(http://127\.0\.0\.1:\d+/ui/)", text)
        assert ui is not None, text
        api = ui.group(1).removesuffix("/ui/")
        fanout = re.search(r"#/runs/([0-9a-f-]{36})", text.split("a failed run")[0])
        failing = re.search(r"a failed run to retry:\s+\S+#/runs/([0-9a-f-]{36})", text)
        assert fanout is not None and failing is not None, text
        assert (tmp_path / ".demo-monitor.db").exists()

        def failed() -> bool:
            return http_json(f"{api}/runs/{failing.group(1)}")["status"] == "FAILED"

        wait_for(failed, 60, "the failing run failed")
        detail = http_json(f"{api}/runs/{failing.group(1)}")
        assert detail["error"]["httpStatus"] == 422

        def declined() -> bool:
            found = http_json(f"{api}/runs/{fanout.group(1)}")["fanout"]
            return bool(found["failed"] == len(DECLINED) and found["total"] == FANOUT_SIZE)

        wait_for(declined, 120, "the declined charges failed their children")
        listed = http_json(f"{api}/runs?roots=true")["items"]
        assert {r["workflow"] for r in listed} == {
            "support-ticket",
            "crm-contact-sync",
            "order-export",
            "nightly-subscription-renewals",
        }
        assert [r["status"] for r in listed].count("FAILED") == 1
        _a_second_demo_is_refused_and_deletes_nothing(tmp_path, env, api)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal
        code = process.wait(timeout=60)
    assert code == 0, out.read_text()[-3000:]
    assert out.read_text().rstrip().endswith("stopped."), out.read_text()[-2000:]


def _a_second_demo_is_refused_and_deletes_nothing(
    here: Path, env: dict[str, str], api: str
) -> None:
    """While a demo runs: a second one in its folder must not delete its database (whatever
    the port), and one elsewhere on its port is told to pick another, before anything starts."""
    database = here / ".demo-monitor.db"
    inode = database.stat().st_ino
    elsewhere = here / "elsewhere"
    elsewhere.mkdir()
    port = api.rsplit(":", 1)[1]
    for cwd, args, said in [
        (here, ["--port", "0"], "another `make demo` is running in this folder"),
        (elsewhere, ["--port", port], f"127.0.0.1:{port} is taken by another process"),
    ]:
        second = subprocess.run(
            [sys.executable, "-m", "demo.monitor", *args],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1, second.stderr
        assert said in second.stderr and "Traceback" not in second.stderr, second.stderr
    assert database.stat().st_ino == inode, "the running demo's database was replaced"
    assert not (elsewhere / ".demo-monitor.db").exists(), "nothing was started elsewhere"


def test_a_sigterm_to_make_demo_stops_the_service_too(tmp_path: Path) -> None:
    process, out, _ = start_demo(tmp_path)
    try:
        wait_for(lambda: "Ctrl-C stops" in out.read_text(), READY_TIMEOUT_S, "the banner")
        ui = re.search(r"open\s+(http://127\.0\.0\.1:\d+)/ui/", out.read_text())
        assert ui is not None, out.read_text()
        assert http_json(f"{ui.group(1)}/health")["status"] == "ok"
        process.send_signal(signal.SIGTERM)  # to the script alone, as `kill PID` does
        code = process.wait(timeout=60)
        assert code == 0, out.read_text()[-3000:]
        assert out.read_text().rstrip().endswith("stopped."), out.read_text()[-2000:]
        # The service was in the script's process group: nothing of it is left there.
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
