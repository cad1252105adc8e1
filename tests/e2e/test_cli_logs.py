"""What `serve`, `api` and `worker` print: one `ready` line (passwords masked), then only what
matters, as text or as one JSON object a line (real subprocesses)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.conftest import Backend
from tests.e2e.rest_harness import process_env, service


def test_a_worker_logs_json_lines_and_a_one_line_stop_summary(tmp_path: Path) -> None:
    env = process_env(Backend("cli", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None), tmp_path)
    env["SCHEMABRIDGE_LOG_FORMAT"] = "json"
    args = ["worker", "--name", "w-json", "--health-port", "0"]
    with service(args, env, tmp_path / "w.log") as w:
        url = w.wait_for_url()
        ready = w.stdout().splitlines()[0]
        assert ready.startswith(f"w-json ready: pid {w.process.pid}, database sqlite+aiosqlite:")
        assert ready.endswith(f"redis embedded; listening on {url}")
        assert w.stop(signal.SIGTERM) == 0
    records = [json.loads(line) for line in w.stderr().splitlines() if line.strip()]
    assert records, w.stderr()
    for record in records:
        assert {"ts", "level", "service", "event", "message"} <= set(record)
        assert record["service"] == "w-json"
    events = [r["event"] for r in records]
    assert "service.ready" in events and "service.stopped" in events
    (stopped,) = [r for r in records if r["event"] == "service.stopped"]
    assert stopped["message"].startswith("service w-json stopped: 0 steps claimed")
    assert not any("alembic" in r["logger"] for r in records)


def test_serve_masks_the_database_password_in_its_ready_line(
    tmp_path: Path, pg_database_url: str
) -> None:
    with_password = pg_database_url.replace("postgres@", "postgres:hunter2@")
    env = process_env(Backend("cli", with_password, None), tmp_path)
    with service(["serve", "--port", "0", "--log-format", "text"], env, tmp_path / "s.log") as s:
        url = s.wait_for_url()
        assert s.stop(signal.SIGTERM) == 0
    (ready,) = s.stdout().splitlines()
    assert "postgres:***@127.0.0.1:5432/" in ready and ready.endswith(f"listening on {url}")
    assert "hunter2" not in s.stdout() + s.stderr()
    assert "Traceback" not in s.stderr()
    assert "WorkerStats" not in s.stderr() and "stopped: 0 steps claimed" in s.stderr()
