"""`schemabridge run` and the operator commands, as a user runs them (real subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from demo.downstream import RunningDownstream

ROOT = Path(__file__).resolve().parents[2]
SCHEMABRIDGE = str(Path(sys.executable).with_name("schemabridge"))


def run_cli(
    args: tuple[str, ...], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`schemabridge ARGS` with only `env` (and PATH, PYTHONPATH) in its environment."""
    env = {"PATH": "/usr/bin:/bin", **env}
    if "PYTHONPATH" in os.environ:
        # A checkout tested with PYTHONPATH (a worktree) runs its own code, not the installed one.
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(
        [SCHEMABRIDGE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


def sb(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli(args, {"SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}, timeout)


async def asb(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """`sb` off the event loop: this loop serves the downstream the command calls."""
    return await asyncio.to_thread(sb, *args, db=db)


def write_workflow(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "wf.json"
    path.write_text(
        json.dumps(
            {
                "name": "lookup",
                "inputSchema": {
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "integer"}},
                },
                "vertices": {
                    "get": {"type": "GATEWAY", "config": {"url": url + "/{{ input.id }}"}}
                },
            }
        )
    )
    return path


async def test_run_example_end_to_end_with_demo_downstream(tmp_path: Path) -> None:
    result = sb(
        "run",
        "examples/support-ticket.json",
        "--input",
        "@examples/support-ticket.input.json",
        "--demo-downstream",
        "--output",
        "json",
        db=tmp_path / "sb.db",
    )
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["status"] == "SUCCEEDED"
    assert set(run["output"]) == {"open-ticket"}
    # The demo downstream took a free port, never a fixed one another suite may hold.
    assert "demo downstream listening on http://127.0.0.1:" in result.stderr
    assert "127.0.0.1:8765" not in result.stderr


async def test_run_prints_a_screenful_summary_by_default(tmp_path: Path) -> None:
    result = sb(
        "run",
        "examples/subscription-renewals.json",
        "--input",
        "@examples/subscription-renewals.input.json",
        "--demo-downstream",
        db=tmp_path / "sb.db",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("SUCCEEDED run ") and " in " in lines[0]
    assert "  children: 25 — 25 succeeded, 0 failed" in lines
    assert any(line.startswith("  output:   ") and "--output json" in line for line in lines)
    assert len(lines) < 10


async def test_run_exit_codes(tmp_path: Path, downstream: RunningDownstream) -> None:
    ok = write_workflow(tmp_path, f"{downstream.url}/customers")
    succeeded = await asb(
        "run", str(ok), "--input", '{"id": 7}', "--output", "json", db=tmp_path / "a.db"
    )
    assert succeeded.returncode == 0, succeeded.stderr
    assert json.loads(succeeded.stdout)["output"]["get"]["body"]["path"] == "/customers/7"

    broken = write_workflow(tmp_path, f"{downstream.url}/missing?status=404&x=")
    failed = await asb("run", str(broken), "--input", '{"id": 7}', db=tmp_path / "b.db")
    assert failed.returncode == 1
    assert failed.stdout.startswith("FAILED run ")
    assert "  kind:     http_error" in failed.stdout
    assert "  http:     status 404 after 1 request" in failed.stdout.splitlines()
    assert "None" not in failed.stdout

    invalid_input = await asb("run", str(ok), "--input", '{"id": "seven"}', db=tmp_path / "c.db")
    assert invalid_input.returncode == 2
    assert "input/id" in invalid_input.stderr

    not_json = await asb("run", str(ok), "--input", "{nope", db=tmp_path / "d.db")
    assert not_json.returncode == 2 and "not valid JSON" in not_json.stderr

    missing = await asb("run", str(ok), "--input", "@/nonexistent.json", db=tmp_path / "e.db")
    assert missing.returncode == 2 and "cannot read input file" in missing.stderr
    assert "Traceback" not in missing.stderr + not_json.stderr + invalid_input.stderr
