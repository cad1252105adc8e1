"""`schemabridge validate`: exit 0 all valid, 1 some invalid, 2 usage error or unreadable file.

The main paths run the real console script in a subprocess. Starting it costs a couple of
seconds (it imports the whole engine), so the invalid fixtures are validated in one subprocess
call (each file is reported on its own, and the fixtures share no workflow names, so the result
per file is the same as alone), and the per-file exit code and a few cheap cases go through the
same Typer app in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "schemabridge"
FIXTURES = ROOT / "tests" / "fixtures" / "invalid"
EXAMPLES = ROOT / "examples"

# Each invalid fixture and the exact (pointer, code) pairs it must report.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "bad-values.json": [
        ("/vertices/fetch/config/method", "schema"),
        ("/vertices/fetch/config/retry/jitter", "schema"),
        ("/vertices/fetch/config/retry/maxAttempts", "schema"),
        ("/vertices/fetch/config/successCodes/1", "schema"),  # the repeated 200
        ("/vertices/fetch/config/timeoutMs", "schema"),
        ("/vertices/fetch/config/url", "schema"),
        ("/vertices/fetch/maxAutoRetries", "schema"),
        ("/vertices/next/type", "schema"),
    ],
    "cycle.json": [("/vertices/a/dependsOn/1", "cycle")],
    "duplicate-key.json": [("/vertices/fetch", "duplicate_key")],
    "duplicate-workflow-names.json": [("/1/name", "duplicate_workflow")],
    "empty-list.json": [("", "schema")],
    "expression-references.json": [
        ("/vertices/first/config/body", "not_ancestor"),
        ("/vertices/second/config/body/missing", "unknown_vertex_reference"),
        ("/vertices/second/config/body/self", "not_ancestor"),
        ("/vertices/second/config/body/shape", "unknown_context"),
        ("/vertices/second/config/body/tenant", "unknown_context"),
        ("/vertices/second/config/body/typo", "unknown_context"),
    ],
    "expression-syntax.json": [
        ("/vertices/fetch/config/body/note", "unclosed_expression"),
        ("/vertices/fetch/config/headers/X-Trace", "expression_syntax"),
        ("/vertices/fetch/config/url", "expression_syntax"),
    ],
    "ineffective-tolerance.json": [
        ("/0/vertices/join/config/failureTolerance", "ineffective_tolerance"),
        ("/0/vertices/join/config/failureTolerance/maxFailureRatio", "schema"),
    ],
    "invalid-ids.json": [
        ("/name", "schema"),
        ("/vertices/fetch data", "schema"),
        ("/vertices/fetch data/config/headers/Bad Header", "schema"),
    ],
    "merge-two-spawners.json": [("/0/vertices/join/dependsOn", "merge_needs_one_spawner")],
    "merge-without-spawner.json": [("/vertices/join/dependsOn", "merge_needs_one_spawner")],
    "missing-fields.json": [
        ("", "missing_field"),
        ("/vertices/fan/config", "missing_field"),
        ("/vertices/fetch", "missing_field"),
    ],
    "not-json.json": [("", "json_syntax")],
    "self-dependency.json": [("/vertices/fetch/dependsOn/0", "self_dependency")],
    "spawn-loop.json": [("/0/vertices/fan/config/workflow", "workflow_cycle")],
    "spawner-items.json": [
        ("/0/vertices/again/config/items", "items_not_expression"),
        ("/0/vertices/fan/config/items", "item_in_items"),
    ],
    "truncated.json": [("", "json_syntax")],
    "unknown-dependency.json": [("/vertices/store/dependsOn/0", "unknown_dependency")],
    "unknown-field.json": [
        ("/vertices/fetch/config", "missing_field"),
        ("/vertices/fetch/config/urll", "unknown_field"),
    ],
}


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def run_json(*args: str | Path, cwd: Path = ROOT) -> tuple[int, dict[str, Any]]:
    result = run("validate", "--format", "json", *args, cwd=cwd)
    return result.returncode, json.loads(result.stdout)


def invoke(*args: str | Path) -> tuple[int, str]:
    """The same command in-process (exit code, output)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def invoke_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    code, output = invoke("validate", "--format", "json", *args)
    return code, json.loads(output)


def test_output_json_is_the_same_as_format_json() -> None:
    """`-o json`, as every other command spells it, is `--format json` here too."""
    example = ROOT / "examples" / "support-ticket.json"
    assert invoke("validate", "-o", "json", example) == invoke(
        "validate", "--format", "json", example
    )
    code, output = invoke("validate", "--output", "json", example)
    assert code == 0 and json.loads(output)["valid"] is True


def pointers(file_report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["pointer"], p["code"]) for p in file_report["problems"]]


@pytest.fixture(scope="module")
def fixture_batch() -> tuple[int, dict[str, dict[str, Any]]]:
    """All fixtures through the real script in one call: (exit code, report by file name)."""
    code, report = run_json(*(FIXTURES / name for name in sorted(EXPECTED)))
    return code, {Path(f["file"]).name: f for f in report["files"]}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(EXPECTED)


def test_the_fixtures_together_exit_1(fixture_batch: tuple[int, dict[str, Any]]) -> None:
    code, by_file = fixture_batch
    assert code == 1
    assert sorted(by_file) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_invalid_fixture_exits_1_with_the_expected_pointers(
    name: str, fixture_batch: tuple[int, dict[str, Any]]
) -> None:
    file_report = fixture_batch[1][name]
    assert file_report["status"] == "invalid"
    assert pointers(file_report) == EXPECTED[name]
    assert all(p["message"].endswith((".", "?")) for p in file_report["problems"])

    code, alone = invoke_json(FIXTURES / name)
    assert code == 1
    assert alone["files"] == [file_report]


def test_the_examples_are_valid() -> None:
    files = sorted(EXAMPLES.glob("*.json"))
    result = run("validate", *files)
    assert result.returncode == 0, result.stdout
    for path in files:
        assert f"{path}: OK" in result.stdout
    assert f"{len(files)} file(s): {len(files)} valid" in result.stdout


def test_json_output_shape_for_the_examples() -> None:
    code, report = run_json(*sorted(EXAMPLES.glob("*.json")))
    assert code == 0
    assert report["valid"] is True and report["exitCode"] == 0
    assert report["summary"]["invalid"] == report["summary"]["unreadable"] == 0
    by_file = {Path(f["file"]).name: f for f in report["files"]}
    renewals = by_file["subscription-renewals.json"]
    assert renewals == {
        "file": str(EXAMPLES / "subscription-renewals.json"),
        "kind": "workflow",
        "status": "valid",
        "workflows": ["nightly-subscription-renewals", "renew-subscription"],
        "problems": [],
    }
    assert by_file["subscription-renewals.input.json"]["kind"] == "input"
    assert by_file["subscription-renewals.input.json"]["status"] == "valid"


def test_text_output_lists_pointer_message_and_code() -> None:
    result = run("validate", FIXTURES / "cycle.json")
    assert result.returncode == 1
    assert "cycle.json: INVALID (1 problem)" in result.stdout
    assert (
        "  /vertices/a/dependsOn/1  dependsOn forms a cycle: a → b → c → a (each vertex waits "
        "for the one before it), so none of these vertices can ever start.  [cycle]"
    ) in result.stdout


def test_a_parent_and_its_child_in_separate_files(tmp_path: Path) -> None:
    parent, child = json.loads((EXAMPLES / "order-export.json").read_text())
    (tmp_path / "parent.json").write_text(json.dumps(parent))
    (tmp_path / "child.json").write_text(json.dumps(child))

    code, report = run_json("parent.json", "child.json", cwd=tmp_path)
    assert code == 0, report


def test_a_child_in_no_file_is_a_note_offline(tmp_path: Path) -> None:
    """Offline, a child workflow none of the files holds may be published: the parent is
    valid, with a note that says so and how to ask the server, never "not published"."""
    parent, _ = json.loads((EXAMPLES / "order-export.json").read_text())
    (tmp_path / "parent.json").write_text(json.dumps(parent))

    code, report = invoke_json(tmp_path / "parent.json")
    assert code == 0
    [file_report] = report["files"]
    assert file_report["status"] == "valid" and file_report["problems"] == []
    [note] = file_report["notes"]
    assert (note["pointer"], note["code"]) == (
        "/vertices/export-each/config/workflow",
        "unknown_workflow",
    )
    assert "not among the documents given" in note["message"]
    assert "offline validation cannot see published workflows" in note["message"]
    assert "`schemabridge workflows versions export-order --api-url URL`" in note["message"]
    assert "nor published" not in note["message"]

    code, text = invoke("validate", tmp_path / "parent.json")
    assert code == 0
    assert "parent.json: OK" in text
    assert "  /vertices/export-each/config/workflow  note: SPAWNER" in text


def test_an_invalid_files_count_says_its_notes_apart(tmp_path: Path) -> None:
    """A note is listed among the problems (`note:`): "INVALID (1 problem)" over two lines
    read as a miscount, so the notes are counted too."""
    parent, _ = json.loads((EXAMPLES / "order-export.json").read_text())
    parent["vertices"]["export-each"]["dependson"] = []
    (tmp_path / "parent.json").write_text(json.dumps(parent))

    code, text = invoke("validate", tmp_path / "parent.json")
    assert code == 1
    assert "parent.json: INVALID (1 problem, 1 note)" in text, text
    assert "  /vertices/export-each/config/workflow  note: SPAWNER" in text


def test_unreadable_files_exit_2_and_the_others_are_still_checked(tmp_path: Path) -> None:
    (tmp_path / "folder.json").mkdir()
    valid = EXAMPLES / "support-ticket.json"
    code, report = run_json(valid, tmp_path / "missing.json", tmp_path / "folder.json")
    assert code == 2
    statuses = [(f["status"], [p["message"] for p in f["problems"]]) for f in report["files"]]
    assert statuses == [
        ("valid", []),
        ("unreadable", ["Cannot read: no such file."]),
        ("unreadable", ["Cannot read: it is a directory, not a file."]),
    ]


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_a_file_without_read_permission_exits_2(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    shutil.copy(EXAMPLES / "support-ticket.json", secret)
    secret.chmod(0)
    code, output = invoke("validate", secret)
    assert code == 2
    assert "Cannot read: permission denied." in output


def test_a_missing_file_in_text_mode(tmp_path: Path) -> None:
    code, output = invoke("validate", tmp_path / "nope.json")
    assert code == 2
    assert "nope.json: UNREADABLE" in output
    assert "Cannot read: no such file." in output


def test_malformed_files_exit_1_with_a_clear_error(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # 50 MB, written in chunks
        handle.write(b'{"name": "huge", "description": "')
        chunk = b"x" * (1024 * 1024)
        for _ in range(50):
            handle.write(chunk)
        handle.write(b'"}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(256)) * 64)

    code, report = run_json(huge, deep, binary)
    assert code == 1
    found = {Path(f["file"]).name: pointers(f) for f in report["files"]}
    assert found == {
        "huge.json": [("", "too_large")],
        "deep.json": [("", "too_deep")],
        "binary.json": [("", "binary")],
    }


def test_run_inputs_are_checked_against_their_workflow(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "support-ticket.json", tmp_path / "ticket.json")
    (tmp_path / "ticket.input.json").write_text('{"customerId": 7}')
    (tmp_path / "orphan.input.json").write_text("{}")

    names = ("ticket.json", "ticket.input.json", "orphan.input.json")
    code, report = invoke_json(*(tmp_path / n for n in names))
    assert code == 1
    ticket, ticket_input, orphan = report["files"]
    assert ticket["status"] == "valid"
    assert ticket_input["status"] == "invalid"
    assert pointers(ticket_input) == [("", "missing_field"), ("/customerId", "schema")]
    assert orphan["status"] == "skipped"
    assert "not among the files validated" in orphan["note"]


def test_the_same_file_twice_is_validated_once() -> None:
    path = EXAMPLES / "support-ticket.json"
    code, report = invoke_json(path, path)
    assert code == 0
    assert report["summary"]["files"] == 1


@pytest.mark.parametrize(
    "args",
    [["validate"], ["validate", "--format", "yaml", "x.json"], ["validate", "--nope", "x.json"]],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    """One line: what is wrong, and where the help is (not click's usage block)."""
    code, output = invoke(*args)
    assert code == 2
    (line,) = output.splitlines()
    assert line.startswith("error: ") and line.endswith("(see `schemabridge validate --help`)")


def test_a_usage_error_from_the_real_script() -> None:
    result = run("validate")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: Missing argument 'FILE'. (see `schemabridge validate --help`)"
    ]


def test_help_and_version() -> None:
    code, help_text = invoke("--help")
    assert code == 0
    assert "validate" in help_text
    version = run("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == "schemabridge 0.1.0"


def test_an_empty_file_is_said_to_be_empty(tmp_path: Path) -> None:
    """It read "Expecting value (line 1, column 1). The document ends too early: was it cut
    short?", which sends the reader looking for a cut in a file that has nothing in it."""
    (tmp_path / "empty.json").write_text("")
    result = run("validate", tmp_path / "empty.json")
    assert result.returncode == 1
    assert (
        "  (document)  The document is not valid JSON: it is empty (0 bytes).  [json_syntax]"
    ) in result.stdout, result.stdout
