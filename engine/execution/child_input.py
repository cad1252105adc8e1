"""A child run's input against its workflow version's `inputSchema`.

A root run's input is checked when it is submitted (`invalid_input`, nothing created). A
child's input is rendered by its SPAWNER from each item, after the parent was accepted, so it
is checked when the child's first steps (the vertices without dependencies) are about to run:
an input the schema refuses fails that step, and so the child, with `invalid_input` and the
pointer and rule of the first problem, before anything is sent. The spawner and the siblings go
on: a failed child counts as one in its join (docs/authoring.md, 'SPAWNER: fan-out').

Checked there rather than while the spawner creates its children: a fan-out of 100,000 items
stays one cheap insert after another, and the checks are spread over the workers that run the
children. Each worker compiles a version's schema once (versions are immutable); checking a
valid input with a compiled validator costs 20-80 µs, while compiling one crawls the whole
schema (`schemas.pinned_validator`): about 30 µs for a schema of two properties, 7 ms for
one of 1,001 sub-schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema.protocols import Validator

from engine.store.records import ClaimedStep
from engine.validation import validate_input
from engine.validation.patterns import input_validator
from schemas.definitions import Vertex, Workflow
from schemas.errors import FailureKind, StepFailure
from schemas.schema_work import TooMuchWork, at_most

VALIDATORS_CACHED = 1_024
"""Workflow versions whose compiled inputSchema a worker keeps."""


@dataclass
class ChildInputs:
    """The compiled inputSchema of each child workflow version a worker has run (by name and
    version); a version without one is kept as None (any input)."""

    validators: dict[tuple[str, int], Validator | None] = field(default_factory=dict)

    def check(self, step: ClaimedStep, workflow: Workflow, vertex: Vertex) -> None:
        """Raise `StepFailure(invalid_input)` when `step` is a first step of a child run whose
        input its workflow's inputSchema refuses; otherwise nothing."""
        if step.parent_run_id is None or vertex.depends_on:
            return  # a root run's input was checked on submission; a later step's by its first
        validator = self._validator(workflow, step.workflow_version)
        if validator is None or _valid(validator, step.run_input):
            return
        raise StepFailure(FailureKind.INVALID_INPUT, _message(workflow, step, step.run_input))

    def _validator(self, workflow: Workflow, version: int) -> Validator | None:
        key = (workflow.name, version)
        if key in self.validators:
            return self.validators[key]
        schema = workflow.input_schema
        validator = None if schema is None else input_validator(schema)
        if len(self.validators) >= VALIDATORS_CACHED:
            self.validators.clear()
        self.validators[key] = validator
        return validator


def _valid(validator: Validator, run_input: Any) -> bool:
    """Whether `validator` accepts `run_input`; False when checking it takes more work than
    an input check may (`_message` then says so)."""
    try:
        with at_most():
            return validator.is_valid(run_input)
    except TooMuchWork:
        return False


def _message(workflow: Workflow, step: ClaimedStep, run_input: Any) -> str:
    """One line: the first problem's pointer into the input and its rule, and how many more
    (worded as a submission's `invalid_input` problems are: the same describer)."""
    problems = validate_input(workflow, run_input)
    where = f"{workflow.name} v{step.workflow_version}"
    # Not "start the parent over": a start over runs the same version with the same input.
    fix = (
        "; fix the SPAWNER's items or its input, publish the workflow and submit a new run "
        "of the parent"
    )
    if not problems:  # the describer found nothing the validator did: say so, not nothing
        return f"the child's input does not match the inputSchema of {where}{fix}"
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (
        f"the child's input does not match the inputSchema of {where}: input "
        f"{first.pointer or '/'}: {first.message.rstrip('.')}{more}{fix}"
    )
