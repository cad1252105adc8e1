"""`schemabridge validate FILE...`: check workflow files without storing or running anything.

All files are validated together, so a parent workflow and the child workflow its SPAWNER
starts may sit in separate files. A file named `X.input.json` is a run input, not a workflow:
when `X.json` is validated in the same call, the input is checked against the inputSchema of
the first workflow in `X.json`; otherwise it is skipped. What is published cannot be seen
from here: a SPAWNER's child workflow in none of the files is a note, not a problem.

Exit status: 0 every file is valid, 1 some file is invalid, 2 usage error or unreadable file
(missing, a directory, no permission). `--format json` prints one JSON document, described in
docs/authoring.md ("Validating from the command line").
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from api.cli.problem_text import where
from schemas.errors import Problem

if TYPE_CHECKING:
    from engine.settings import Settings
    from engine.validation import DocumentReport

INPUT_SUFFIX = ".input.json"

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class Status(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    UNREADABLE = "unreadable"
    SKIPPED = "skipped"


@dataclass
class FileResult:
    """The outcome for one file argument."""

    file: str
    status: Status
    kind: str = "workflow"
    """"workflow" or "input" (a run input checked against its workflow's inputSchema)."""
    workflows: list[str] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)
    notes: list[dict[str, str]] = field(default_factory=list)
    """What validation could not decide offline (a child workflow that may be published)."""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "file": self.file,
            "kind": self.kind,
            "status": self.status.value,
            "workflows": self.workflows,
            "problems": self.problems,
        }
        if self.notes:
            data["notes"] = self.notes
        if self.note:
            data["note"] = self.note
        return data


def validate(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Workflow files (one workflow or a list of them). Files named *.input.json "
            "are run inputs, checked against the inputSchema of the matching workflow file.",
            metavar="FILE",
            show_default=False,
        ),
    ],
    output_format: Annotated[
        OutputFormat,
        typer.Option(
            "--output", "-o", "--format", "-f", help="text for people, json for programs."
        ),
    ] = OutputFormat.TEXT,
) -> None:
    """Validate workflow files: print OK or every problem of each, with its JSON pointer.

    Exit status: 0 all valid, 1 some file invalid, 2 usage error or unreadable file.
    """
    settings = _settings()
    results = _validate_paths(_unique(files), settings)
    if output_format is OutputFormat.JSON:
        _print_json(results)
    else:
        _print_text(results)
    raise typer.Exit(_exit_code(results))


def _settings() -> Settings:
    from api.cli.environment import load_settings

    # A setting the environment gets wrong is one line per setting, exit 2: `api.cli.main`
    # says it the way every command does.
    return load_settings()


def _unique(files: list[Path]) -> list[Path]:
    """`files` without repeats of the same file (it would clash with itself)."""
    seen: set[Path] = set()
    unique = []
    for path in files:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def _name(path: Path) -> str:
    """`path` for display: printable even when the file name is not valid UTF-8."""
    return os.fsencode(path).decode("utf-8", "replace")


def _read(path: Path, limit: int) -> bytes | str:
    """The file's bytes (at most `limit + 1`, enough to know it is too large), or why not."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "it is a directory, not a file"
    except PermissionError:
        return "permission denied"
    except OSError as exc:
        return exc.strerror or str(exc)


def _validate_paths(paths: list[Path], settings: Settings) -> list[FileResult]:
    contents: dict[Path, bytes] = {}
    results: dict[Path, FileResult] = {}
    for path in paths:
        data = _read(path, settings.max_document_bytes)
        if isinstance(data, str):
            problem = {"pointer": "", "code": "unreadable", "message": f"Cannot read: {data}."}
            results[path] = FileResult(_name(path), Status.UNREADABLE, problems=[problem])
        else:
            contents[path] = data
    workflow_paths = [p for p in contents if not p.name.endswith(INPUT_SUFFIX)]
    from engine import validation  # networkx and jsonschema: only when validating

    # No store here: a child workflow none of the files holds may be published or not.
    report = validation.check_documents(
        [(_name(p), contents[p]) for p in workflow_paths], settings=settings, known_workflows=None
    )
    for path, document in zip(workflow_paths, report.documents, strict=True):
        status = Status.VALID if document.valid else Status.INVALID
        results[path] = FileResult(
            _name(path),
            status,
            workflows=[w.name for w in document.workflows],
            problems=[_problem_dict(p) for p in document.problems],
            notes=[_problem_dict(p) for p in document.notes],
        )
    by_file = {p.resolve(): d for p, d in zip(workflow_paths, report.documents, strict=True)}
    for path, raw in contents.items():
        if path.name.endswith(INPUT_SUFFIX):
            results[path] = _check_input(path, raw, by_file, settings)
    return [results[p] for p in paths]


def _finding_line(finding: dict[str, str], label: str | tuple[str, str]) -> Text:
    """One problem or note of a file as its text line: where, `label`, the message, the code."""
    return Text.assemble(
        "  ",
        (where(finding["pointer"]), "cyan"),
        "  ",
        label,
        finding["message"],
        (f"  [{finding['code']}]", "dim"),
    )


def _problem_dict(problem: Problem) -> dict[str, str]:
    return {"pointer": problem.pointer, "code": problem.code, "message": problem.message}


def _check_input(
    path: Path, raw: bytes, by_file: dict[Path, DocumentReport], settings: Settings
) -> FileResult:
    workflow_path = path.with_name(path.name.removesuffix(INPUT_SUFFIX) + ".json")
    workflow_file = _name(workflow_path)
    document = by_file.get(workflow_path.resolve())
    if document is None or not document.workflows:
        why = "invalid" if document is not None else "not among the files validated"
        note = f"Run input for {workflow_file}, which is {why}; not checked."
        return FileResult(_name(path), Status.SKIPPED, kind="input", note=note)
    from engine import validation
    from engine.validation import json_text as validation_json
    from engine.validation.common import Limits

    workflow = document.workflows[0]
    loaded = validation_json.load(raw, Limits.from_settings(settings))
    problems = list(loaded.problems)
    if loaded.parsed and not problems:
        problems = validation.validate_input(workflow, loaded.data)
    status = Status.INVALID if problems else Status.VALID
    return FileResult(
        _name(path),
        status,
        kind="input",
        workflows=[workflow.name],
        problems=[_problem_dict(p) for p in problems],
    )


def _exit_code(results: list[FileResult]) -> int:
    if any(r.status is Status.UNREADABLE for r in results):
        return EXIT_UNREADABLE
    if any(r.status is Status.INVALID for r in results):
        return EXIT_INVALID
    return EXIT_VALID


def _summary(results: list[FileResult]) -> dict[str, int]:
    counts = {"files": len(results)}
    for status in Status:
        counts[status.value] = sum(1 for r in results if r.status is status)
    return counts


def _print_json(results: list[FileResult]) -> None:
    document = {
        "valid": _exit_code(results) == EXIT_VALID,
        "exitCode": _exit_code(results),
        "summary": _summary(results),
        "files": [r.as_dict() for r in results],
    }
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


_MARKS = {
    Status.VALID: ("OK", "green"),
    Status.INVALID: ("INVALID", "bold red"),
    Status.UNREADABLE: ("UNREADABLE", "bold red"),
    Status.SKIPPED: ("SKIPPED", "yellow"),
}


def _print_text(results: list[FileResult]) -> None:
    # soft_wrap: long messages stay on one line, so pointers can be grepped and piped.
    console = Console(highlight=False, soft_wrap=True)
    for result in results:
        label, style = _MARKS[result.status]
        line = Text.assemble((result.file, "bold"), ": ", (label, style))
        if result.status is Status.VALID and result.workflows:
            noun = "input for" if result.kind == "input" else "workflows:"
            line.append(f" ({noun} {', '.join(result.workflows)})", style="dim")
        elif result.problems and result.status is Status.INVALID:
            count, notes = len(result.problems), len(result.notes)
            # The notes are listed with the problems: counted apart, so the lines add up.
            also = f", {notes} note{'s' if notes > 1 else ''}" if notes else ""
            line.append(f" ({count} problem{'s' if count > 1 else ''}{also})")
        console.print(line)
        if result.note:
            console.print(Text("  " + result.note, style="dim"))
        for note in result.notes:
            console.print(_finding_line(note, ("note: ", "yellow")))
        for problem in result.problems:
            console.print(_finding_line(problem, ""))
    summary = _summary(results)
    parts = [f"{summary[s.value]} {s.value}" for s in Status if summary[s.value]]
    console.print(Text(f"{summary['files']} file(s): {', '.join(parts)}", style="bold"))
