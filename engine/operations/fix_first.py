"""The fix-first warning: a run that failed for a cause the workflow or its input makes
(`FIX_FIRST_KINDS`, a step's own error kind or a failed join's children's commonest one)
fails the same way when retried, reprocessed or started over, which run the same version
with the same input (but a root run with a step an operator resolved upstream of the failure
may have failed on that output, which a start over does not keep: it is offered the start
over). One sentence says it and what to do instead, answered by `GET
/runs/{id}` (`fixFirst`) and the retry's preview (`GET /runs/{id}/retry/preview`), so
`runs show`, `runs retry --dry-run` and the monitor's dialogs say the same words."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.store.models import StepStatus
from engine.store.records import StepRecord
from engine.store.recovery import descendants
from schemas.definitions import Workflow
from schemas.errors import FIX_FIRST_KINDS


@dataclass(frozen=True)
class FailedCause:
    """A FAILED step's error as the warning reads it: its kind and, for a join that failed
    on children, their commonest kind and how many failed with it."""

    vertex_id: str
    kind: str | None
    child_kind: str | None = None
    child_count: int = 0

    @classmethod
    def of(cls, vertex_id: str, error: Mapping[str, Any] | None) -> FailedCause:
        """From a step's stored error (`kind`, `childCause`: `kind`, `count`)."""
        error = error or {}
        cause = error.get("childCause") or {}
        return cls(vertex_id, error.get("kind"), cause.get("kind"), int(cause.get("count") or 0))


def _what(causes: Iterable[FailedCause]) -> str | None:
    """ "step call failed with invalid_input" or "3 children of step join failed with
    invalid_input": the first FAILED step by vertex id whose cause is a fix-first one."""
    for cause in sorted(causes, key=lambda c: c.vertex_id):
        if cause.kind in FIX_FIRST_KINDS:
            return f"step {cause.vertex_id} failed with {cause.kind}"
        if cause.child_kind in FIX_FIRST_KINDS:
            children = "child" if cause.child_count == 1 else "children"
            return (
                f"{cause.child_count:,} {children} of step {cause.vertex_id} failed with "
                f"{cause.child_kind}"
            )
    return None


def fix_first_words(
    causes: Iterable[FailedCause],
    *,
    workflow: str,
    version: int,
    tenant_id: str | None,
    child_run: bool,
    run_id: str = "RUN",
    resolved: Sequence[str] = (),
) -> str | None:
    """The warning a FAILED run's retry, reprocess and start over lead with when the
    workflow or the input caused its failure (None otherwise): running it again fails the
    same way; fix the workflow, publish it, submit anew (a child run: its root's workflow,
    as the child's item exists only in its parent's fan-out). A root run with steps an
    operator resolved (`resolved`, their vertex ids) may have failed on their output, which
    a retry keeps and a start over does not: that one is offered the start over."""
    what = _what(causes)
    if what is None:
        return None
    if resolved and not child_run:
        return _after_a_resolve(what, version, run_id, resolved, _submit(workflow, tenant_id))
    if child_run:
        return (
            f"{what}, which comes from the workflow or its parent's SPAWNER input: retrying "
            f"or reprocessing runs v{version} with the same input and fails the same way. Fix "
            "the workflow (or the SPAWNER's input) first, publish it, then submit the root "
            "run's workflow anew"
        )
    return (
        f"{what}, which comes from the workflow or the run's input: retrying, reprocessing "
        f"or starting over runs v{version} with the same input and fails the same way. Fix "
        f"the workflow (or the input) first, publish it, then submit a new run "
        f"(`{_submit(workflow, tenant_id)}`)"
    )


def run_fix_first_words(
    steps: Sequence[StepRecord],
    workflow: Workflow,
    *,
    version: int,
    tenant_id: str | None,
    run_id: str,
    child_run: bool,
    started_over: bool,
) -> str | None:
    """The fix-first warning of a FAILED run from its steps (`fix_first_words`): the causes are
    its FAILED steps' errors; a root run not started over yet is offered the start over when
    a step it resolved is upstream of a FAILED one."""
    failed = [s for s in steps if s.status == StepStatus.FAILED.value]
    resolved: list[str] = []
    if not (child_run or started_over):
        mine = [s.vertex_id for s in steps if s.status == StepStatus.RESOLVED.value]
        resolved = resolved_upstream(workflow, (s.vertex_id for s in failed), mine)
    return fix_first_words(
        (FailedCause.of(s.vertex_id, s.error) for s in failed),
        workflow=workflow.name,
        version=version,
        tenant_id=tenant_id,
        child_run=child_run,
        run_id=run_id,
        resolved=resolved,
    )


def resolved_upstream(
    workflow: Workflow, failed: Iterable[str], resolved: Iterable[str]
) -> list[str]:
    """The vertices of `resolved` that a FAILED vertex of `failed` depends on, directly or not:
    only their output can be the cause of the failure (a resolve elsewhere in the run is no
    reason to offer a start over, which sends every call of the run again)."""
    failing = set(failed)
    return sorted(
        vertex for vertex in set(resolved) if failing.intersection(descendants(workflow, vertex))
    )


def _submit(workflow: str, tenant_id: str | None) -> str:
    """The command that submits the run's input anew, on a version to choose."""
    tenant = "" if tenant_id in (None, "default") else f" --tenant {shlex.quote(tenant_id or '')}"
    return f"schemabridge runs submit {shlex.quote(workflow)}@VERSION{tenant} --input JSON"


def _after_a_resolve(
    what: str, version: int, run_id: str, resolved: Sequence[str], submit: str
) -> str:
    """The warning of a run that failed after an operator resolved some of its steps: their
    output may be the cause (a resolve without the `body` a later step reads), which a retry
    or a reprocess keeps, while a start over runs those steps again."""
    steps = ", ".join(sorted(resolved))
    output = (
        f"the output step {steps} was resolved with"
        if len(resolved) == 1
        else f"the outputs that steps {steps} were resolved with"
    )
    return (
        f"{what}, which comes from the workflow, the run's input or {output}: retrying or "
        f"reprocessing runs v{version} on that output and fails the same way. Start over "
        f"(`schemabridge runs start-over {run_id}`) to run {steps} again; or, if the "
        f"workflow (or the input) is at fault, fix it first, publish it, then submit a new "
        f"run (`{submit}`)"
    )
