"""Validation of workflow documents: raw text in, typed `Workflow`s or every problem out.

This is the one entry point the CLI, the REST API and the engine use before anything is stored
or run (docs/authoring.md, 'Validation'). The phases, each in its own module:

1. `validation_json`: size limit, UTF-8, nesting depth, JSON syntax, duplicate keys; then
   `validation_sizes`: the vertices of each workflow, the sub-schemas of the inputSchemas and
   the expressions of the document (one over its limit stops the document here);
2. `validation_schema`: workflow.schema.json (draft 2020-12), then the pydantic models;
3. `validation_graph`: dependsOn targets, self-dependencies, cycles, MERGE ↔ SPAWNER, child
   workflows, duplicate names and spawn loops across the documents validated together;
4. `validation_expressions`: `{{ }}` syntax and what each expression reads;
5. `validation_egress` (only when the caller gives an egress policy): GATEWAY URLs whose
   scheme and host are literal, against the policy.

`validation_versions` (a SPAWNER's `name@N` names a version that exists) needs the store, so
`engine.operations` runs it on the workflows that pass these phases.

Problems are collected, never raised one by one: one call reports everything. Each `Problem`
has `source` (the name the caller gave the document, e.g. its path) and `pointer`, an
RFC 6901 pointer inside that document; in a file holding a list of workflows, pointers start
with the workflow's index (`/1/vertices/charge`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.settings import Settings
from engine.validation import egress as validation_egress
from engine.validation import expressions as validation_expressions
from engine.validation import graph as validation_graph
from engine.validation import json_text as validation_json
from engine.validation import schema as validation_schema
from engine.validation import sizes as validation_sizes
from engine.validation.common import Limits, bounded_hints
from engine.validation.json_text import deep_pointer, duplicate_key_summary, loads_checked
from schemas.definitions import Workflow
from schemas.errors import DefinitionError, Problem
from schemas.json_depth import nesting_exceeds
from vertices.egress import EgressPolicy

__all__ = [
    "DocumentReport",
    "ValidationReport",
    "check_documents",
    "deep_pointer",
    "duplicate_key_summary",
    "loads_checked",
    "nesting_exceeds",
    "parse_document",
    "parse_documents",
    "spawned_workflows",
    "validate_input",
]


@dataclass
class DocumentReport:
    """The result for one document: its workflows when valid, else its problems."""

    source: str
    workflows: list[Workflow] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    """What the checks could not decide and do not fail the document for (offline: a child
    workflow that may be published)."""

    @property
    def valid(self) -> bool:
        return not self.problems


@dataclass
class ValidationReport:
    """The result for documents validated together, in the order they were given."""

    documents: list[DocumentReport]

    @property
    def valid(self) -> bool:
        return all(d.valid for d in self.documents)

    @property
    def problems(self) -> list[Problem]:
        return [p for d in self.documents for p in d.problems]

    @property
    def workflows(self) -> list[Workflow]:
        return [w for d in self.documents for w in d.workflows]


def parse_documents(
    documents: Sequence[tuple[str, bytes | str]],
    *,
    settings: Settings | None = None,
    known_workflows: Collection[str] = (),
    egress: EgressPolicy | None = None,
) -> list[Workflow]:
    """Parse and check documents that belong together; return their workflows in order.

    `documents` are (source name, raw content) pairs; a document holds one workflow object or a
    list of them. A SPAWNER's child workflow must be among these documents or named in
    `known_workflows` (names of published workflows; `name@version` entries count as `name`).
    `settings` gives the size limits (default: the documented defaults, environment not read).
    `egress`: the egress policy literal GATEWAY URLs are checked against (None: not checked;
    the policy belongs to a deployment, so `engine.operations` passes its runtime's).

    Raises `DefinitionError` listing every problem of every document; each problem's `source`
    says which document its `pointer` is into.
    """
    report = check_documents(
        documents, settings=settings, known_workflows=known_workflows, egress=egress
    )
    if not report.valid:
        raise DefinitionError(report.problems)
    return report.workflows


def parse_document(
    data: bytes | str,
    *,
    source: str = "<input>",
    settings: Settings | None = None,
    known_workflows: Collection[str] = (),
    egress: EgressPolicy | None = None,
) -> list[Workflow]:
    """`parse_documents` for a single document named `source`."""
    return parse_documents(
        [(source, data)], settings=settings, known_workflows=known_workflows, egress=egress
    )


def check_documents(
    documents: Sequence[tuple[str, bytes | str]],
    *,
    settings: Settings | None = None,
    known_workflows: Collection[str] | None = (),
    egress: EgressPolicy | None = None,
) -> ValidationReport:
    """Like `parse_documents`, but report per document instead of raising.

    A document whose own checks pass still reports problems caused by the others it was
    validated with (a duplicate workflow name is reported on the later document). The
    "did you mean" hints of all of them share one bound (`common.bounded_hints`).
    `known_workflows` None: the caller cannot see what is published (offline), so a child
    workflow outside these documents is a note of its document, not a problem.
    """
    with bounded_hints():
        return _check_documents(documents, settings, known_workflows, egress)


def _check_documents(
    documents: Sequence[tuple[str, bytes | str]],
    settings: Settings | None,
    known_workflows: Collection[str] | None,
    egress: EgressPolicy | None,
) -> ValidationReport:
    limits = Limits.from_settings(settings)
    reports = [DocumentReport(source) for source, _ in documents]
    found: list[tuple[DocumentReport, validation_graph.RawWorkflow, dict[str, Any]]] = []
    for report, (source, raw) in zip(reports, documents, strict=True):
        loaded = validation_json.load(raw, limits)
        report.problems.extend(loaded.problems)
        too_big = validation_sizes.size_problems(loaded.data, limits) if loaded.parsed else []
        report.problems.extend(too_big)
        if loaded.parsed and not too_big:
            report.problems.extend(validation_schema.schema_problems(loaded.data))
            for base, obj in validation_graph.workflow_objects(loaded.data):
                report.problems.extend(validation_schema.input_schema_problems(obj, base))
                found.append((report, validation_graph.read_workflow(source, base, obj), obj))

    owner = {id(wf): report for report, wf, _ in found}
    for report, wf, _ in found:
        report.problems.extend(validation_graph.workflow_problems(wf))
        report.problems.extend(validation_expressions.expression_problems(wf))
        if egress is not None:
            report.problems.extend(validation_egress.egress_problems(wf, egress))
    _check_across([wf for _, wf, _ in found], owner, known_workflows)

    # Typed models only for documents without problems: they are what callers get back.
    for report, wf, obj in found:
        if not report.problems:
            workflow, problems = validation_schema.build_workflow(obj, wf.base)
            report.problems.extend(problems)
            if workflow is not None:
                report.workflows.append(workflow)

    for report in reports:
        stamped = {dataclasses.replace(p, source=report.source) for p in report.problems}
        report.problems = sorted(stamped)
        report.notes = sorted({dataclasses.replace(p, source=report.source) for p in report.notes})
        if report.problems:
            report.workflows = []
    return ValidationReport(reports)


def _check_across(
    workflows: list[validation_graph.RawWorkflow],
    owner: dict[int, DocumentReport],
    known_workflows: Collection[str] | None,
) -> None:
    """The problems between `workflows` (and, offline, the notes), each added to the report
    of the document its workflow is in (`owner`, by the workflow's id)."""
    for wf, problem in validation_graph.batch_problems(workflows, known_workflows):
        owner[id(wf)].problems.append(problem)
    if known_workflows is None:
        for wf, note in validation_graph.unseen_children(workflows):
            owner[id(wf)].notes.append(note)


def spawned_workflows(
    documents: Sequence[tuple[str, bytes | str]], *, settings: Settings | None = None
) -> set[str]:
    """The names of the workflows the SPAWNERs of `documents` start (`name@N` as `name`), as
    far as the documents parse: for a caller that looks up where they are published the
    children the documents do not hold (`schemabridge run` in its database), and so passes
    them to `parse_documents` as `known_workflows` before it can."""
    limits = Limits.from_settings(settings)
    names: set[str] = set()
    for source, raw in documents:
        loaded = validation_json.load(raw, limits)
        if loaded.parsed:
            for base, obj in validation_graph.workflow_objects(loaded.data):
                names |= validation_graph.spawned(validation_graph.read_workflow(source, base, obj))
    return names


def validate_input(workflow: Workflow, data: Any) -> list[Problem]:
    """Problems of `data` as the input of a run of `workflow`, checked against its inputSchema.

    Pointers are into `data`; `source` is left empty. No `inputSchema` accepts any input.
    """
    if workflow.input_schema is None:
        return []
    return sorted(validation_schema.instance_problems(workflow.input_schema, data, "The input"))
