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


def sb(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {"SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "PATH": "/usr/bin:/bin"}
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
        db=tmp_path / "sb.db",
    )
    assert result.returncode == 0, result.stderr
    assert "SUCCEEDED" in result.stderr
    output = json.loads(result.stdout)
    assert set(output) == {"open-ticket"}


async def test_run_exit_codes(tmp_path: Path, downstream: RunningDownstream) -> None:
    ok = write_workflow(tmp_path, f"{downstream.url}/customers")
    succeeded = await asb("run", str(ok), "--input", '{"id": 7}', db=tmp_path / "a.db")
    assert succeeded.returncode == 0, succeeded.stderr
    assert json.loads(succeeded.stdout)["get"]["body"]["path"] == "/customers/7"

    broken = write_workflow(tmp_path, f"{downstream.url}/missing?status=404&x=")
    failed = await asb("run", str(broken), "--input", '{"id": 7}', db=tmp_path / "b.db")
    assert failed.returncode == 1
    assert "FAILED" in failed.stderr and "http_error" in failed.stderr and "404" in failed.stderr

    invalid_input = await asb("run", str(ok), "--input", '{"id": "seven"}', db=tmp_path / "c.db")
    assert invalid_input.returncode == 2
    assert "input/id" in invalid_input.stderr

    not_json = await asb("run", str(ok), "--input", "{nope", db=tmp_path / "d.db")
    assert not_json.returncode == 2 and "not valid JSON" in not_json.stderr

    missing = await asb("run", str(ok), "--input", "@/nonexistent.json", db=tmp_path / "e.db")
    assert missing.returncode == 2 and "cannot read input file" in missing.stderr
    assert "Traceback" not in missing.stderr + not_json.stderr + invalid_input.stderr


async def test_run_runs_the_file_it_was_given_on_a_kept_database(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    db = tmp_path / "kept.db"
    first = write_workflow(tmp_path, f"{downstream.url}/customers")
    assert (await asb("run", str(first), "--input", '{"id": 1}', db=db)).returncode == 0
    # The file changes: `run` publishes v2 and runs it (the version it was given serves),
    # where a plain publish would leave v1 serving.
    second = write_workflow(tmp_path, f"{downstream.url}/clients")
    again = await asb("run", str(second), "--input", '{"id": 2}', db=db)
    assert again.returncode == 0, again.stderr
    assert "(lookup v2)" in again.stderr
    assert json.loads(again.stdout)["get"]["body"]["path"] == "/clients/2"


async def test_operator_commands(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    assert sb("destinations", "set-cap", "erp", "--max-concurrency", "3", db=db).returncode == 0
    shown = sb("destinations", "show", db=db)
    assert shown.returncode == 0
    caps = json.loads(shown.stdout)["configuredCaps"]
    assert caps == [{"destination": "erp", "maxConcurrency": 3, "ratePerSecond": None}]
    assert sb("tenants", "set-quota", "acme", "10", db=db).returncode == 0
    assert sb("tenants", "set-rate", "acme", "120", db=db).returncode == 0
    rates = json.loads(sb("destinations", "show", db=db).stdout)["configuredTenantRates"]
    assert rates == [{"tenantId": "acme", "perMinute": 120}]  # durable: a new process reads it
    assert sb("tenants", "set-rate", "acme", "--reset", db=db).returncode == 0
    assert json.loads(sb("destinations", "show", db=db).stdout)["configuredTenantRates"] == []
    both = sb("tenants", "set-rate", "acme", "5", "--reset", db=db)
    assert both.returncode == 2 and "not both" in both.stderr
    assert sb("db", "upgrade", db=db).returncode == 0
