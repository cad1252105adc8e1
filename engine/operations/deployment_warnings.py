"""What a deployment's start, its view and an operator's re-run of an old version warn about,
in one set of words for every front door (REST, the CLI, the monitor) (docs/architecture.md,
'Versions and deployments').

A start is never refused for these: each is a reason the deployment may not do what the
operator expects (it will not progress, it will judge nothing, its first stage waits for more
finished runs than its runs, it repeats a version that failed before, its candidate refuses
what clients send), said in the answer's `warnings`.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.store.deployments import RerunFacts
from engine.store.models import RunRoute
from engine.store.records import DeploymentRecord
from engine.validation import validate_input
from schemas.clock import utc_moment
from schemas.definitions import Workflow
from vertices.deploy import counted

if TYPE_CHECKING:
    from engine.operations.deployment_views import RollbackSpec, StageSpec

INPUTS_CHECKED = 50
"""The serving version's latest accepted inputs a start checks against the candidate's
inputSchema: one bounded read of an index range, and enough to catch a field every client
omits (a rare shape can be missed: it is a warning, not a proof)."""

NO_WORKER = (
    "no worker is alive: nothing runs — not the candidate's runs, not the serving version's, "
    "not the stage's checks — so the deployment cannot progress until one starts "
    "(`schemabridge worker`; `schemabridge services` lists them)"
)
"""The hold reason of a running deployment, and a start's warning, while every worker's
heartbeat is stale (`GET /services`' rule)."""


def no_evidence_warning(stages: Sequence[StageSpec], rollback: RollbackSpec) -> str | None:
    """A policy that lets the candidate pass without a finished run: `minFinishedRuns` 0 means
    every check may judge it on nothing (a ratio of no runs is never over the threshold), and
    with no minimum of runs or time either it is promoted at its first check."""
    if rollback.min_finished_runs > 0:
        return None
    instant = all(s.min_runs == 0 and s.min_duration_seconds == 0 for s in stages)
    return (
        "the rollback policy needs no finished run (minFinishedRuns 0): the candidate can pass "
        "every stage without a single run judged"
        + (
            ", and with no stage's minimum runs or duration it becomes the serving version at "
            "its first check, whatever it does"
            if instant
            else ""
        )
        + "; give --min-finished (minFinishedRuns) at least 1 for a verdict on evidence"
    )


def finished_runs_warning(
    version: int, stages: Sequence[StageSpec], rollback: RollbackSpec
) -> str | None:
    """A first stage that waits for more finished runs than its runs: no stage passes before
    the candidate is judged, on `minFinishedRuns` finished runs since the deployment began,
    so with fewer `minRuns` stage 1 waits past them (a tour set `--min-runs 10`, was shown
    "10 runs", and waited for "19/20 finished runs", some 90 submissions at 25 %). Stage 1
    only: the later stages begin with those runs, as the one before passed on them."""
    first, needed = stages[0], rollback.min_finished_runs
    if needed <= first.min_runs:
        return None
    submissions = math.ceil(needed * 100 / first.weight)
    return (
        f"stage 1 waits for {counted(needed, 'finished runs')} of v{version} (--min-finished, "
        f"minFinishedRuns) before it can pass, more than its {counted(first.min_runs, 'runs')} "
        f"(--min-runs, minRuns): at {first.weight:g} % of new runs, about "
        f"{counted(submissions, 'submissions')}"
    )


def redeploy_warning(version: int, rolled_back: DeploymentRecord | None) -> str | None:
    """Deploying a version whose latest deployment outcome was a rollback (not one a later
    promotion or serving of it superseded: `DeploymentStore.latest_rolled_back`): what
    happened then. "make sure what failed is fixed" only when runs had failed: an operator's
    rollback with none failed was a choice, not a failure."""
    if rolled_back is None or rolled_back.ended_at is None:
        return None
    outcome = rolled_back.outcome or {}
    by = outcome.get("actor")
    reason = outcome.get("reason")
    stopped = f"stopped by {by}"
    if by and isinstance(reason, str) and reason.startswith(stopped):
        # An operator's stop already names the operator above; keep only their own words.
        reason = reason[len(stopped) :].removeprefix(": ") or None
    failed = failed_then(rolled_back)
    then = "" if by == "engine" else _failures_then(failed)
    again = "; this deployment starts it again at stage 1"
    if by == "engine" or not by or failed:
        again += ": make sure what failed is fixed"
    return (
        f"v{version} was rolled back{rolled_back_by(rolled_back)} in deployment "
        f"{rolled_back.id} at {utc_moment(rolled_back.ended_at)}"
        + (f" ({reason})" if reason else "")
        + then
        + again
    )


def rolled_back_by(rolled_back: DeploymentRecord) -> str:
    """ " by the engine's verdict", " manually by key:…" (an operator's rollback), or "" when
    the deployment recorded no actor."""
    by = (rolled_back.outcome or {}).get("actor")
    if by == "engine":
        return " by the engine's verdict"
    return f" manually by {by}" if by else ""


def failed_then(rolled_back: DeploymentRecord) -> int | None:
    """How many of the candidate's runs had failed when it was rolled back (None: no figures
    were recorded)."""
    figures = (rolled_back.outcome or {}).get("figures")
    candidate = figures.get("candidate") if isinstance(figures, dict) else None
    if not isinstance(candidate, dict):
        return None
    return int(candidate.get("failed", 0))


def _failures_then(failed: int | None) -> str:
    if failed is None:
        return ""
    if failed == 0:
        return ", with none of its runs failed"
    return f", when {failed} of its runs had failed"


def input_warning(
    workflow: str,
    candidate: Workflow,
    candidate_version: int,
    serving_version: int,
    inputs: Sequence[Any],
) -> str | None:
    """The recent inputs of the serving version (`inputs`: it accepted them) that the
    candidate's inputSchema refuses: the same requests routed to the candidate would be
    refused 422 and count as failed runs of the candidate."""
    if candidate.input_schema is None or not inputs:
        return None
    refused = [problems for problems in (validate_input(candidate, i) for i in inputs) if problems]
    if not refused:
        return None
    first = refused[0][0]
    where = first.pointer or "/"
    return (
        f"v{candidate_version}'s inputSchema refuses {len(refused)} of the {len(inputs)} latest "
        f"inputs v{serving_version} accepted (e.g. at {where}: {first.message}): such requests "
        f"routed to v{candidate_version} are refused 422 invalid_input and each counts as a "
        f"failed run of the candidate, which rolls it back; publish a version of {workflow} that "
        "accepts them, or make clients send what it needs first"
    )


DEFAULT_TENANT = "default"
"""The tenant a submission without one is for (an admin key's, `runs submit` without
`--tenant`)."""
SEVERAL_TENANTS = "TENANT"
"""`RerunFacts.tenant_id` of a batch's runs of several tenants: the command names the option
for the operator to fill in, each run's own."""


def _tenant_option(tenant_id: str | None) -> str:
    """` --tenant acme` for a run of a tenant other than the default: without it the command
    submits under the admin key's `default` tenant, not the run's."""
    if tenant_id is None or tenant_id == DEFAULT_TENANT:
        return ""
    return f" --tenant {shlex.quote(tenant_id)}"


def rerun_warning(action: str, facts: RerunFacts | None) -> str | None:
    """What an operator's `action` ("retry", "start over") runs again when the run's version
    was rolled back by a deployment, or (for a run routed to it, not one that pinned it) no
    longer serves: the action repeats that version, never the serving one. A run started
    over is judged by the run it started over (`facts.route` is that one's: a start over of
    a routed run was routed too, of a pinned one pinned). The same words in the action's
    answer, the retry's preview, the CLI and the monitor."""
    if facts is None:
        return None
    name, version = facts.workflow, facts.version
    serving = facts.serving
    serving_now = None if serving is None else serving.serving_version
    if serving is not None and version in (serving.serving_version, serving.candidate_version):
        return None  # it serves (or is being deployed again): routing runs it too
    rolled = facts.rolled_back
    if rolled is not None and rolled.ended_at is not None:
        # The engine's verdict reads "by deployment …"; an operator's names them, as manual.
        by = rolled_back_by(rolled)
        who = f"{by} in" if by.startswith(" manually") else " by"
        said = (
            f"v{version} of {name} was rolled back{who} deployment {rolled.id} at "
            f"{utc_moment(rolled.ended_at)}; this {action} runs v{version} again"
        )
    elif facts.route in (RunRoute.SERVING.value, RunRoute.CANDIDATE.value) and serving_now:
        said = f"v{version} of {name} no longer serves; this {action} runs v{version} again"
    else:
        return None
    if serving_now is None or serving_now == version:
        return said
    if facts.parent_run_id is not None:
        return f"{said} (a child run keeps the version its root pinned)"
    tenant = _tenant_option(facts.tenant_id)
    submit = f"schemabridge runs submit {shlex.quote(name)}{tenant} --input JSON"
    return (
        f"{said}, not the serving v{serving_now}: a {action} always repeats the run's own "
        f"version; to run this input on v{serving_now}, submit it anew without a version "
        f"(`{submit}`)"
    )
