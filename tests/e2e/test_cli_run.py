"""`schemabridge run` and the operator commands, as a user runs them (real subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.deployment_views import ServingView
from engine.runtime import Runtime
from engine.settings import Settings
from tests import cli_forks
from tests.integration.operations_harness import fanout, items
from vertices.egress import ALLOW_ENV, LOOPBACK_ALLOW

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCHEMABRIDGE = str(Path(sys.executable).with_name("schemabridge"))


def run_cli(
    args: tuple[str, ...],
    env: dict[str, str],
    timeout: float = 120,
    egress_allow: str | None = LOOPBACK_ALLOW,
) -> subprocess.CompletedProcess[str]:
    """`schemabridge ARGS` with only `env` (and PATH, PYTHONPATH) in its environment;
    `egress_allow` None runs it under the default egress policy."""
    env = {"PATH": "/usr/bin:/bin", **env}
    if "PYTHONPATH" in os.environ:
        # A checkout tested with PYTHONPATH (a worktree) runs its own code, not the installed one.
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if egress_allow is not None:
        env[ALLOW_ENV] = egress_allow
    return cli_forks.run([SCHEMABRIDGE, *args], env=env, cwd=ROOT, timeout=timeout)


def sb(
    *args: str, db: Path, timeout: float = 120, egress_allow: str | None = LOOPBACK_ALLOW
) -> subprocess.CompletedProcess[str]:
    database = {"SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}
    return run_cli(args, database, timeout, egress_allow)


async def asb(
    *args: str, db: Path, egress_allow: str | None = LOOPBACK_ALLOW
) -> subprocess.CompletedProcess[str]:
    """`sb` off the event loop: this loop serves the downstream the command calls."""
    return await asyncio.to_thread(sb, *args, db=db, egress_allow=egress_allow)


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
        "-o",  # as every command that prints a result takes it
        "json",
        db=tmp_path / "sb.db",
        egress_allow=None,  # --demo-downstream allows loopback itself, and says so
    )
    assert result.returncode == 0, result.stderr
    # All of loopback is opened, not the demo downstream alone (docs/security.md): said so.
    assert (
        " (egress to all of loopback, 127.0.0.0/8, ::1 and localhost, is allowed in this "
        "process, not just to it; other internal addresses stay refused)"
    ) in result.stderr, result.stderr
    run = json.loads(result.stdout)
    assert run["status"] == "SUCCEEDED"
    assert set(run["output"]) == {"open-ticket"}
    # The demo downstream took a free port, never a fixed one another suite may hold.
    assert "demo downstream listening on http://127.0.0.1:" in result.stderr
    assert "127.0.0.1:8765" not in result.stderr


async def test_run_prints_a_screenful_summary_as_text(tmp_path: Path) -> None:
    """`-o text`, the default, as every other command names its output for people (a tour
    typed it and was refused: `run` called it `summary`, which it still takes)."""
    result = sb(
        "run",
        "examples/subscription-renewals.json",
        "--input",
        "@examples/subscription-renewals.input.json",
        "--demo-downstream",
        "-o",
        "text",
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
    assert invalid_input.stderr.splitlines() == [
        "error: 1 problem in the input (the inputSchema of lookup); fix them and run again",
        "  input /id  id must be an integer, not a string.  [schema]",
    ]

    not_json = await asb("run", str(ok), "--input", "{nope", db=tmp_path / "d.db")
    assert not_json.returncode == 2 and "not valid JSON" in not_json.stderr

    twice = await asb("run", str(ok), "--input", '{"id": 1, "id": 7}', db=tmp_path / "t.db")
    assert twice.returncode == 2
    assert twice.stderr.startswith('error: --input /id: The key "id" appears more than once')

    missing = await asb("run", str(ok), "--input", "@/nonexistent.json", db=tmp_path / "e.db")
    assert (
        missing.returncode == 2 and "cannot read --input file /nonexistent.json" in missing.stderr
    )
    assert "Traceback" not in missing.stderr + not_json.stderr + invalid_input.stderr + twice.stderr


def test_run_checks_files_and_input_before_it_starts_anything(tmp_path: Path) -> None:
    # A mistake in a file or in the input is the only thing said: no demo downstream is
    # started first, and the first line says what is wrong, as every failure's does.
    ticket = json.loads((EXAMPLES / "support-ticket.json").read_text())
    ticket["vertices"]["lookup"]["type"] = "GATEWAAY"
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps(ticket))
    bad_file = sb("run", str(typo), "--input", "{}", "--demo-downstream", db=tmp_path / "a.db")
    assert bad_file.returncode == 2
    assert bad_file.stderr.splitlines() == [
        "error: 1 problem in the workflow files; fix them and run again",
        f'  {typo} /vertices/lookup/type  type must be one of "GATEWAY", "SPAWNER" or '
        '"MERGE"; got "GATEWAAY". Did you mean "GATEWAY"?  [schema]',
    ]
    bad_input = sb(
        "run",
        str(EXAMPLES / "support-ticket.json"),
        "--input",
        '{"subject": "hi"}',
        "--demo-downstream",
        db=tmp_path / "b.db",
    )
    assert bad_input.returncode == 2
    assert bad_input.stderr.splitlines() == [
        "error: 1 problem in the input (the inputSchema of support-ticket); fix them and run again",
        '  input (document)  The input is missing the required field "customerId".  '
        "[missing_field]",
    ]
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()
    # A file is read once, so a pipe works as well as a file.
    piped = subprocess.run(
        [
            *(SCHEMABRIDGE, "run", "/dev/stdin", "--demo-downstream", "--output", "json"),
            *("--input", '{"customerId": "c-1", "subject": "hi"}'),
        ],
        input=(EXAMPLES / "support-ticket.json").read_text(),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SCHEMABRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/p.db"},
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["status"] == "SUCCEEDED"
    # What only publication checks names the workflow, not the published list's index.
    refused = sb(
        "run",
        str(EXAMPLES / "support-ticket.json"),
        "--input",
        '{"customerId": "c-1", "subject": "hi"}',
        db=tmp_path / "c.db",
        egress_allow=None,
    )
    assert refused.returncode == 2
    lines = refused.stderr.splitlines()
    assert lines[0] == "error: 2 problems in the workflows; fix them and run again"
    assert lines[1].startswith("  support-ticket /vertices/lookup/config/url  Egress denied")


async def test_run_holds_calls_to_the_egress_policy(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    # Under the default policy the downstream on loopback is off limits: a literal URL is
    # refused when `run` publishes it, one built from the input when the call is made.
    literal = write_workflow(tmp_path, f"{downstream.url}/customers")
    refused = await asb(
        "run", str(literal), "--input", '{"id": 7}', db=tmp_path / "a.db", egress_allow=None
    )
    assert refused.returncode == 2, refused.stderr
    assert "Egress denied: 127.0.0.1 is loopback" in refused.stderr
    from_input = tmp_path / "from-input.json"
    document = {
        "name": "fetch",
        "vertices": {"get": {"type": "GATEWAY", "config": {"url": "{{ input.url }}"}}},
    }
    from_input.write_text(json.dumps(document))
    run_input = json.dumps({"url": f"http://2130706433:{downstream.port}/customers"})
    failed = await asb(
        "run", str(from_input), "--input", run_input, db=tmp_path / "b.db", egress_allow=None
    )
    assert failed.returncode == 1, failed.stderr
    assert "egress_denied" in failed.stderr and "Traceback" not in failed.stderr
    assert downstream.stats.total == 0
    # An allow-list entry admits it.
    allowed = await asb(
        "run", str(literal), "--input", '{"id": 7}', db=tmp_path / "c.db", egress_allow="127.0.0.1"
    )
    assert allowed.returncode == 0, allowed.stderr
    assert downstream.stats.total == 1


def test_a_bad_allow_list_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for command in (
        ["worker"],
        ["api", "--port", "0"],
        ["serve", "--port", "0"],
        ["run", "examples/support-ticket.json", "--input", "@examples/support-ticket.input.json"],
        ["validate", "examples/support-ticket.json"],
    ):
        result = sb(*command, db=tmp_path / "sb.db", egress_allow="10.0.0.1/8,nope!", timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines == [
            "error: invalid setting SCHEMABRIDGE_EGRESS_ALLOW: the egress allow-list has "
            "2 bad entries: '10.0.0.1/8' has host bits set (did you mean 10.0.0.0/8?); 'nope!' "
            "is not a host pattern. Each entry is a CIDR (10.0.0.0/8, fd00::/8), an address "
            "(10.1.2.3) or a host pattern (billing.internal, *.internal), separated by commas."
        ], command


async def test_run_runs_the_file_it_was_given_on_a_kept_database(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    db = tmp_path / "kept.db"
    first = write_workflow(tmp_path, f"{downstream.url}/customers")
    assert (await asb("run", str(first), "--input", '{"id": 1}', db=db)).returncode == 0
    # The file changes: `run` publishes v2 and runs it, pinned to it; v1 still serves every
    # other client (publishing moves no traffic, `run` included).
    second = write_workflow(tmp_path, f"{downstream.url}/clients")
    again = await asb("run", str(second), "--input", '{"id": 2}', "--output", "json", db=db)
    assert again.returncode == 0, again.stderr
    assert "(lookup v2)" in again.stderr
    ran = json.loads(again.stdout)
    assert ran["output"]["get"]["body"]["path"] == "/clients/2"
    assert (ran["version"], ran["route"]) == (2, "pinned")
    serving = await _serving(db, "lookup")
    assert (serving.serving_version, serving.updated_by) == (1, "publish")


async def _serving(db: Path, name: str) -> ServingView:
    runtime = await Runtime.open(
        Settings.model_validate({"database_url": f"sqlite+aiosqlite:///{db}"})
    )
    try:
        return await Operations(runtime).deployments.serving(name)
    finally:
        await runtime.close()


def _fan_out_files(tmp_path: Path, url: str, child_path: str) -> list[Path]:
    parent = {
        "name": "batch",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input.ids }}", "workflow": "item"}},
            "join": {"type": "MERGE", "dependsOn": ["each"], "config": {}},
        },
    }
    child = {
        "name": "item",
        "vertices": {"get": {"type": "GATEWAY", "config": {"url": f"{url}/{child_path}"}}},
    }
    paths = [tmp_path / "batch.json", tmp_path / "item.json"]
    for path, document in zip(paths, (parent, child), strict=True):
        path.write_text(json.dumps(document))
    return paths


async def test_run_pins_the_children_to_the_versions_it_published(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    """The child workflow's file changes and the parent's does not: the parent keeps v1 and
    its children run the new child version, which does not serve for anyone else."""
    db = tmp_path / "kept.db"
    for child_path in ("old", "new"):
        files = [str(p) for p in _fan_out_files(tmp_path, downstream.url, child_path)]
        result = await asb("run", *files, "--input", '{"ids": [1, 2]}', "--output", "json", db=db)
        assert result.returncode == 0, result.stderr
    ran = json.loads(result.stdout)
    assert (ran["workflow"], ran["version"], ran["status"]) == ("batch", 1, "SUCCEEDED")
    runtime = await Runtime.open(
        Settings.model_validate({"database_url": f"sqlite+aiosqlite:///{db}"})
    )
    try:
        ops = Operations(runtime)
        children = (await ops.runs.children(ran["id"])).items
        serving = await ops.deployments.serving("item")
    finally:
        await runtime.close()
    assert {(c.workflow, c.version) for c in children} == {("item", 2)}
    assert serving.serving_version == 1
    paths = [r.path for r in downstream.stats.recent]
    assert paths.count("/new") == 2 and paths.count("/old") == 2


async def _latest_versions(db: Path) -> dict[str, int]:
    runtime = await Runtime.open(
        Settings.model_validate({"database_url": f"sqlite+aiosqlite:///{db}"})
    )
    try:
        return {w.name: w.latest_version for w in await Operations(runtime).workflows.list()}
    finally:
        await runtime.close()


def _downstream_port(stderr: str) -> int:
    found = re.search(r"demo downstream listening on http://127\.0\.0\.1:(\d+) ", stderr)
    assert found, stderr
    return int(found.group(1))


async def test_run_with_demo_downstream_again_publishes_no_new_version(tmp_path: Path) -> None:
    """`make demo-run` twice on one database: the second start puts the demo downstream where
    the published versions call it, so the documents are the same and the run reuses them
    (it used to take a free port each time, publishing v2, v3, …). When that port is taken it
    runs on a free one, says so, and publishes new versions calling there."""
    db = tmp_path / "demo.db"
    example = (
        *("run", "examples/subscription-renewals.json", "--demo-downstream", "--output", "json"),
        *("--input", "@examples/subscription-renewals.input.json"),
    )
    first = await asb(*example, db=db, egress_allow=None)
    again = await asb(*example, db=db, egress_allow=None)
    for result in (first, again):
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["version"] == 1
    port = _downstream_port(first.stderr)
    assert _downstream_port(again.stderr) == port
    assert "(nightly-subscription-renewals v1)" in again.stderr
    assert await _latest_versions(db) == {
        "nightly-subscription-renewals": 1,
        "renew-subscription": 1,
    }

    with socket.create_server(("127.0.0.1", port)):
        moved = await asb(*example, db=db, egress_allow=None)
    assert moved.returncode == 0, moved.stderr
    ran = json.loads(moved.stdout)
    assert (ran["status"], ran["version"]) == ("SUCCEEDED", 2)
    assert _downstream_port(moved.stderr) != port
    assert f"port {port}, where the published workflows call it, is taken" in moved.stderr
    assert await _latest_versions(db) == {
        "nightly-subscription-renewals": 2,
        "renew-subscription": 2,
    }


async def test_run_finds_a_child_workflow_published_in_its_database(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    """Only the parent's file is given: its SPAWNER's child is the one published in the
    database, run at its serving version as a worker would; a database without it is one line
    naming the child, the spawner, the database and the fix, before anything is published."""
    db = tmp_path / "kept.db"
    parent, child = (str(p) for p in _fan_out_files(tmp_path, downstream.url, "published"))
    assert (await asb("run", child, db=db)).returncode == 0  # publishes item v1
    result = await asb("run", parent, "--input", '{"ids": [1, 2]}', "--output", "json", db=db)
    assert result.returncode == 0, result.stderr
    ran = json.loads(result.stdout)
    assert (ran["workflow"], ran["status"]) == ("batch", "SUCCEEDED")
    assert [r.path for r in downstream.stats.recent].count("/published") == 3
    assert await _latest_versions(db) == {"batch": 1, "item": 1}

    empty = tmp_path / "empty.db"
    missing = await asb("run", parent, "--input", '{"ids": [1]}', db=empty)
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "error: no file given holds workflow 'item' (started by SPAWNER 'each' of 'batch'), "
        f"and it is not published in sqlite+aiosqlite:///{empty}: give its file too "
        "(`schemabridge run PARENT.json CHILD.json`), or name with --database the database it "
        "is published in"
    ]
    assert await _latest_versions(empty) == {}


async def test_a_failed_fan_out_lists_its_failed_children_itself(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    """The tour: a fan-out `schemabridge run` failed at its join said "see `schemabridge runs
    children RUN --status FAILED`", a command for a running API, which a local run has not
    (against the default URL: "cannot reach the SchemaBridge API"). The summary lists the
    first failed children itself, so the message ends without that command, and says how
    to list the rest."""
    parent, child = fanout(downstream.url)
    (tmp_path / "parent.json").write_text(json.dumps(parent))
    (tmp_path / "child.json").write_text(json.dumps(child))
    files = (str(tmp_path / "parent.json"), str(tmp_path / "child.json"), "--workflow", "parent")
    one = json.dumps({"items": items(3, failing={1})})
    failed = await asb("run", *files, "--input", one, db=tmp_path / "f.db")
    assert failed.returncode == 1, failed.stderr
    lines = failed.stdout.splitlines()
    assert "  kind:     child_failures" in lines, failed.stdout
    message = next(line for line in lines if line.startswith("  message:  "))
    said = f"(1 http_error: POST {downstream.url}/charge/1: 400 Bad Request (1 attempt))"
    assert message.endswith(said), message
    assert "schemabridge runs children" not in failed.stdout
    assert [line[:19] for line in lines if "failed child" in line] == ["  failed child #1 ("]

    five = json.dumps({"items": items(5, failing={0, 1, 2, 3, 4})})
    many = await asb("run", *files, "--input", five, db=tmp_path / "g.db")
    run_id = many.stdout.split()[2]
    assert many.stdout.splitlines()[-1] == (
        f"  … and 2 more failed children (list them with `schemabridge runs children {run_id} "
        "--status FAILED` against a `schemabridge serve` on this database)"
    ), many.stdout
