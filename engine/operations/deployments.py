"""Deployments and serving versions: start a gradual deployment, read and list them, abort or
roll one back, switch the serving version (docs/architecture.md, 'Versions and deployments').

A deployment is a `gradual_deploy` system run the engine executes like any run (it shows in
the run list under the `system` tenant); these operations create it, read its row and figures,
and stop it. Every change takes `actor` (who did it), recorded on the deployment or the
routing row. Refusals: an unknown workflow or version `NotFound(code="workflow_not_found")`,
an unknown deployment `NotFound(code="deployment_not_found")`, a second deployment of a
workflow while one runs `WrongState(code="deployment_running")`, a stage list or policy that
cannot work `InvalidRequest(code="invalid_deployment")`.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.execution.deploy_stage import gradual_deploy_workflow
from engine.operations import id_prefixes
from engine.operations.boundary import store_boundary
from engine.operations.deployment_views import (
    DEFAULT_CHECK_INTERVAL_S,
    DEFAULT_STAGES,
    MAX_CHECK_INTERVAL_S,
    MIN_CHECK_INTERVAL_S,
    DeploymentChange,
    DeploymentPreview,
    DeploymentView,
    RollbackSpec,
    ServingChange,
    ServingView,
    StageSpec,
    deployment_view,
    rest_words,
    serving_view,
    started_view,
)
from engine.operations.deployment_warnings import (
    INPUTS_CHECKED,
    NO_WORKER,
    finished_runs_warning,
    input_warning,
    no_evidence_warning,
    redeploy_warning,
)
from engine.operations.pagination import (
    check_limit,
    decode_cursor,
    encode_cursor,
    scope_digest,
    time_and_id_key,
)
from engine.operations.row_cache import RowCache, shared_row_cache
from engine.operations.views import DeploymentIdMatches, Page
from engine.operations.worker_liveness import workers_alive
from engine.operations.workflows import not_found as workflow_not_found
from engine.operations.workflows import unknown_workflow
from engine.store import UnknownWorkflow
from engine.store.committed_changes import SERVING_TOPIC
from engine.store.deployment_log import log_event, routing_after
from engine.store.deployment_rows import DeploymentCounts
from engine.store.deployments import (
    DeploymentSpec,
    SpawningParent,
    candidate_is_serving,
    running_deployment,
)
from engine.store.models import DeploymentStatus
from engine.store.records import DeploymentRecord
from engine.store.unreachable import STORE_ERRORS, store_unreachable
from schemas.clock import utc_moment
from schemas.definitions import RESERVED_WORKFLOWS, Workflow
from schemas.errors import InvalidRequest, NotFound, Problem, WrongState
from schemas.waiting import WaitReason
from vertices import deploy

if TYPE_CHECKING:
    from engine.runtime import Runtime

MAX_STAGES = 10
MAX_ID_CHARS = 36
MAX_REASON_CHARS = 500
"""The longest reason an operator may give for an abort or a rollback by hand."""
PARENTS_CACHE_MAX_AGE_S = 5.0
"""Kept spawning parents are read again after this long (what a routing change whose token
Redis did not take costs, as for the routing rows submissions keep)."""
PARENTS_CACHE_MAX_ROWS = 1_000

logger = logging.getLogger(__name__)

CURSOR_KIND = "deployments"
"""The list a deployments cursor belongs to (`engine.operations.pagination`)."""


def deployment_not_found(deployment_id: str) -> NotFound:
    return NotFound(f"no deployment {deployment_id!r}", code="deployment_not_found")


def _problem(pointer: str, message: str) -> Problem:
    return Problem(pointer, message, "invalid_deployment", "request")


def stage_problems(stages: Sequence[StageSpec], check_interval_s: float) -> list[Problem]:
    """What makes a deployment's stages unusable (each stage's own ranges are the spec's)."""
    problems: list[Problem] = []
    if not 1 <= len(stages) <= MAX_STAGES:
        problems.append(_problem("/stages", f"a deployment has 1 to {MAX_STAGES} stages"))
    for number, (before, after) in enumerate(itertools.pairwise(stages), start=2):
        if after.weight <= before.weight:
            problems.append(
                _problem(
                    f"/stages/{number - 1}/weight",
                    f"stage {number}'s weight ({after.weight:g}) must be above stage "
                    f"{number - 1}'s ({before.weight:g})",
                )
            )
    if stages and stages[-1].weight != 100:
        problems.append(
            _problem(
                f"/stages/{len(stages) - 1}/weight",
                f"the last stage's weight is {stages[-1].weight:g} %, and it must be 100 % "
                "(the share of new runs the candidate gets: all of them before it becomes the "
                "serving version); end with a stage of weight 100",
            )
        )
    if not MIN_CHECK_INTERVAL_S <= check_interval_s <= MAX_CHECK_INTERVAL_S:
        problems.append(
            _problem(
                "/checkIntervalSeconds",
                f"checks are {MIN_CHECK_INTERVAL_S:g} to {MAX_CHECK_INTERVAL_S:g} s apart",
            )
        )
    return problems


def stop_reason(reason: str | None) -> str | None:
    """An operator's reason for an abort or a rollback, on one line (None: none given).
    Longer than `MAX_REASON_CHARS`: `InvalidRequest(code="invalid_reason")`."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidRequest("a reason is text", code="invalid_reason")
    flat = " ".join(reason.split())
    if len(flat) > MAX_REASON_CHARS:
        raise InvalidRequest(
            f"the reason has {len(flat)} characters; give at most {MAX_REASON_CHARS}",
            code="invalid_reason",
        )
    return flat or None


def child_warning(
    workflow: str, version: int, parents: Sequence[SpawningParent], stage: int = 1
) -> str | None:
    """Why a deployment of `workflow` may sit in its stage `stage` (the first at its start):
    the serving versions of `parents` start it as a SPAWNER's child, and a run tree pins its
    children's versions at its root, so the candidate gets none of those runs (a warning:
    direct submissions may exist). None when no workflow spawns it. A running deployment's
    view names the stage in force: direct submissions may have taken it past the first, and
    "stays in stage 1" beside "stage 3 of 4" read as a contradiction."""
    if not parents:
        return None
    names = ", ".join(f"{p.name} v{p.version}" for p in parents)
    return (
        f"{workflow} is a SPAWNER's child in the serving version of {names}: those children "
        f"run the version their parent run pinned (the serving one, or the `{workflow}@N` "
        f"its SPAWNER names), so this deployment moves only the runs submitted to {workflow} "
        f"directly and with none it stays in stage {stage}; to move the children, publish the "
        f"parent with `{workflow}@{version}` in its SPAWNER and deploy the parent"
    )


@dataclass(frozen=True)
class StartFacts:
    """What a deployment's start warns about, read before it commits (the start changes none
    of it): the workflows whose SPAWNERs pin the deployed one, the candidate's definition,
    the serving version and its latest accepted inputs, the candidate's latest rollback,
    whether a worker is alive."""

    parents: list[SpawningParent]
    candidate: Workflow
    serving_version: int | None
    inputs: list[Any]
    rolled_back: DeploymentRecord | None
    workers_alive: bool | None


def _start_warnings(
    workflow: str,
    version: int,
    facts: StartFacts,
    *,
    stages: Sequence[StageSpec],
    rollback: RollbackSpec,
    serving_version: int,
    inputs: Sequence[Any],
) -> list[str]:
    """What a start of `workflow` v`version` warns about, from what was read before it; the
    start and its preview say the same."""
    said = [
        child_warning(workflow, version, facts.parents),
        input_warning(workflow, facts.candidate, version, serving_version, list(inputs)),
        no_evidence_warning(stages, rollback),
        finished_runs_warning(version, stages, rollback),
        redeploy_warning(version, facts.rolled_back),
        NO_WORKER if facts.workers_alive is False else None,
    ]
    return [warning for warning in said if warning is not None]


class DeploymentOperations:
    """Deployments and serving versions."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._store = runtime.store
        self._parents: RowCache[builtins.list[SpawningParent]] = shared_row_cache(
            runtime,
            SERVING_TOPIC,
            max_age_s=PARENTS_CACHE_MAX_AGE_S,
            max_rows=PARENTS_CACHE_MAX_ROWS,
        )
        """The spawning parents of each deployed workflow, kept under the routing rows' change
        token (`engine.operations.row_cache`): they follow from the serving versions alone
        (versions are immutable), and a running deployment's view, polled every few seconds,
        says them again; reading them walks every serving version's definition."""

    async def _view(
        self,
        record: DeploymentRecord,
        serving_now: dict[str, int | None] | None = None,
        gone: set[str] | None = None,
    ) -> DeploymentView:
        """`serving_now`: the serving versions already read, by workflow (a list reads each
        workflow's routing row once); `gone`: the ended deployments' runs retention deleted,
        already read for a list (`_runs_gone`)."""
        known = {} if serving_now is None else serving_now
        name = record.workflow_name
        if name not in known:
            row = await self._store.serving(name)
            known[name] = None if row is None else row.serving_version
        counts = await self._store.deployment_counts(record)
        if gone is None:
            gone = await self._runs_gone([record])
        # An ended deployment's run may be gone (run retention): say so rather than link to
        # it, and show the figures it ended on rather than a count of what is left.
        purged = record.run_id in gone
        if purged:
            counts = ended_on(record, counts)
        return deployment_view(record, counts, known[name], run_purged=purged)

    async def _views(self, records: Sequence[DeploymentRecord]) -> builtins.list[DeploymentView]:
        serving_now: dict[str, int | None] = {}
        gone = await self._runs_gone(records)  # one read for the page, not one per deployment
        return [await self._view(record, serving_now, gone) for record in records]

    async def _runs_gone(self, records: Sequence[DeploymentRecord]) -> set[str]:
        """The runs of the ended deployments among `records` that run retention deleted (a
        running deployment's run is never due)."""
        ended = [r.run_id for r in records if r.status != DeploymentStatus.RUNNING.value]
        return await self._store.runs_gone(ended) if ended else set()

    async def _record(self, deployment_id: str) -> DeploymentRecord:
        record = None
        if isinstance(deployment_id, str) and len(deployment_id) <= MAX_ID_CHARS:
            record = await self._store.deployment(deployment_id)
        if record is None:
            raise deployment_not_found(deployment_id)
        return record

    @staticmethod
    def _check_workflow(workflow: str) -> None:
        if workflow in RESERVED_WORKFLOWS:
            raise InvalidRequest(
                f"{workflow} is a system workflow: it is not deployed", code="system_workflow"
            )

    # ── deployments ─────────────────────────────────────────────────────────────────────────

    @store_boundary
    async def start(
        self,
        workflow: str,
        version: int,
        *,
        actor: str,
        stages: Sequence[StageSpec] | None = None,
        rollback: RollbackSpec | None = None,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> DeploymentView:
        """Start moving `workflow`'s new runs from its serving version to `version`, stage by
        stage (default 10 → 25 → 50 → 100 %, each for at least 20 runs and 60 s), rolling
        back by itself when the candidate fails more than `rollback` allows (default: a
        failure ratio over 0.05 once 20 runs have finished). From the answer the candidate
        gets the first stage's weight. Refusals: see the module."""
        stages, rollback = self._checked(workflow, version, stages, rollback, check_interval_s)
        spec = DeploymentSpec(
            workflow=workflow,
            candidate_version=version,
            stages=[
                {
                    "weight": s.weight,
                    "minRuns": s.min_runs,
                    "minDurationSeconds": s.min_duration_seconds,
                }
                for s in stages
            ],
            rollback={
                "maxFailureRatio": rollback.max_failure_ratio,
                "marginOverServing": rollback.margin_over_serving,
                "minFinishedRuns": rollback.min_finished_runs,
            },
            check_interval_s=float(check_interval_s),
            actor=actor,
        )
        # Read before the start, which does not change them: once it has committed, a lost
        # database must not make it answer "unavailable" (as `OperatorActions.retry`).
        facts = await self._start_facts(workflow, version)
        try:
            record = await self._store.start_deployment(spec, gradual_deploy_workflow(len(stages)))
        except UnknownWorkflow as exc:
            raise await unknown_workflow(self._store, workflow, version, users_only=True) from exc
        except WrongState as refusal:
            if refusal.code != "candidate_is_serving":
                raise
            raise await self._serving_already(workflow, version) from None
        await self._runtime.wakeup.notify()
        first = stages[0]
        log_event(
            logger,
            logging.INFO,
            "started",
            f"deployment {record.id} of {workflow} started by {actor}: v{version} gets "
            f"{first.weight:g} % of new runs{rest_words(first.weight, record.serving_version)}, "
            "stages " + " → ".join(f"{s.weight:g} %" for s in stages),
            record,
            stage=1,
            actor=actor,
            weight=first.weight,
            stages=len(stages),
        )
        inputs = facts.inputs
        if record.serving_version != facts.serving_version:
            inputs = await self._inputs_after(record, facts.candidate)
        warnings = _start_warnings(
            workflow,
            version,
            facts,
            stages=stages,
            rollback=rollback,
            serving_version=record.serving_version,
            inputs=inputs,
        )
        view = started_view(record)
        return view.model_copy(update={"warnings": warnings}) if warnings else view

    @store_boundary
    async def start_preview(
        self,
        workflow: str,
        version: int,
        *,
        stages: Sequence[StageSpec] | None = None,
        rollback: RollbackSpec | None = None,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> DeploymentPreview:
        """What `start` with the same arguments would refuse (raised alike) or warn about,
        starting nothing: a confirm step says the warnings before the candidate gets a run,
        not after. A start that races a change of the serving version may still differ."""
        stages, rollback = self._checked(workflow, version, stages, rollback, check_interval_s)
        facts = await self._start_facts(workflow, version)
        current = await self._store.serving(workflow)
        if current is None:
            raise await unknown_workflow(self._store, workflow, version, users_only=True)
        if current.deployment_id is not None:
            raise running_deployment(workflow, current.deployment_id)
        if current.serving_version == version:
            raise await self._serving_already(workflow, version)
        warnings = _start_warnings(
            workflow,
            version,
            facts,
            stages=stages,
            rollback=rollback,
            serving_version=current.serving_version,
            inputs=facts.inputs,
        )
        first = stages[0].weight
        return DeploymentPreview(
            workflow=workflow,
            candidate_version=version,
            serving_version=current.serving_version,
            first_weight=first,
            summary=f"v{version} would get {first:g} % of new runs"
            f"{rest_words(first, current.serving_version)}, stages "
            + " → ".join(f"{s.weight:g} %" for s in stages),
            warnings=warnings,
        )

    async def _serving_already(self, workflow: str, version: int) -> WrongState:
        """The refusal of a start of the serving version, naming a newer one to deploy."""
        newest = (await self._store.get_version(workflow)).version
        return candidate_is_serving(workflow, version, newest)

    def _checked(
        self,
        workflow: str,
        version: int,
        stages: Sequence[StageSpec] | None,
        rollback: RollbackSpec | None,
        check_interval_s: float,
    ) -> tuple[builtins.list[StageSpec], RollbackSpec]:
        """The stages and policy a start uses (the defaults filled in), once they can work;
        refusals as `start`'s."""
        self._check_workflow(workflow)
        stage_list = list(DEFAULT_STAGES if stages is None else stages)
        problems = stage_problems(stage_list, check_interval_s)
        if problems:
            raise InvalidRequest(
                "the deployment's stages cannot work: " + "; ".join(p.message for p in problems),
                code="invalid_deployment",
                problems=problems,
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise workflow_not_found(workflow, version)
        return stage_list, rollback or RollbackSpec()

    async def _start_facts(self, workflow: str, version: int) -> StartFacts:
        """What a start of `workflow` v`version` warns about, read before it. Unknown
        workflow or version: `NotFound(code="workflow_not_found")`."""
        try:
            candidate = (await self._store.get_version(workflow, version)).workflow
        except UnknownWorkflow as exc:
            raise await unknown_workflow(self._store, workflow, version, users_only=True) from exc
        serving = await self._store.serving(workflow)
        serving_version = None if serving is None else serving.serving_version
        return StartFacts(
            parents=await self._spawning_parents(workflow),
            candidate=candidate,
            serving_version=serving_version,
            inputs=await self._recent_inputs(workflow, candidate, serving_version),
            rolled_back=await self._store.latest_rolled_back(workflow, version),
            workers_alive=await workers_alive(self._runtime),
        )

    async def _recent_inputs(
        self, workflow: str, candidate: Workflow, serving_version: int | None
    ) -> builtins.list[Any]:
        """The serving version's latest `INPUTS_CHECKED` accepted inputs, which the
        candidate's inputSchema is checked against (one bounded read; none without a schema)."""
        if candidate.input_schema is None or serving_version is None:
            return []
        return await self._store.recent_inputs(workflow, serving_version, limit=INPUTS_CHECKED)

    async def _inputs_after(
        self, record: DeploymentRecord, candidate: Workflow
    ) -> builtins.list[Any]:
        """The inputs to check when a switch of the serving version raced the start (those
        read before were another version's): read after the commit, and none when the
        database cannot be reached, since the deployment has started and must answer so."""
        try:
            return await self._recent_inputs(
                record.workflow_name, candidate, record.serving_version
            )
        except STORE_ERRORS as exc:
            if not store_unreachable(exc):
                raise
            logger.warning(
                "deployment %s started; its candidate's inputSchema was not checked against "
                "v%d's recent inputs: the database cannot be reached: %s",
                record.id,
                record.serving_version,
                exc,
            )
            return []

    async def _child_warning(self, record: DeploymentRecord) -> str | None:
        parents = await self._spawning_parents(record.workflow_name)
        stage = record.stage_index + 1
        return child_warning(record.workflow_name, record.candidate_version, parents, stage)

    async def _spawning_parents(self, workflow: str) -> builtins.list[SpawningParent]:
        """`Store.spawning_parents`, as kept while no routing row changed."""
        parents = await self._parents.get(workflow, lambda: self._store.spawning_parents(workflow))
        return [] if parents is None else parents

    @store_boundary
    async def get(self, deployment_id: str) -> DeploymentView:
        """A deployment with its stages, figures, exposure and timeline, and while it runs why
        its stage waits (`holding`) and what may keep it there (`warnings`: the start's
        warning that parents pin the workflow, said again while it runs, not only once)."""
        record = await self._record(deployment_id)
        view = await self._view(record)
        if view.status != DeploymentStatus.RUNNING.value:
            return view
        warning = await self._child_warning(record)
        holding, checked_at = await self._holding(record)
        return view.model_copy(
            update={
                "holding": holding,
                "holding_checked_at": checked_at,
                "warnings": [] if warning is None else [warning],
            }
        )

    async def _holding(self, record: DeploymentRecord) -> tuple[str | None, float | None]:
        """The waiting message of the `gradual_deploy` run's stage step, which its latest check
        wrote (`engine.execution.deploy_stage`): the same words `runs show` gives that step,
        and when that check was taken (its "parked: …" log line; None: not known), since its
        figures are older than the view's. A run of one step a stage: small reads, done only
        for one deployment, not for lists. While no worker is alive (`workers_alive`), that
        first: no check runs, so the step's message is as old as the last one."""
        checked = checked_at = None
        for step in await self._store.get_steps(record.run_id):
            if step.wait_reason == WaitReason.DEPLOYMENT_STAGE.value and step.wait_message:
                checked = step.wait_message
                checked_at = await self._store.latest_log_at(record.run_id, step.vertex_id)
                break
        if await workers_alive(self._runtime) is False:
            said = NO_WORKER if checked is None else f"{NO_WORKER}; its last check: {checked}"
            return said, checked_at
        return checked, checked_at

    @store_boundary
    async def match_prefix(self, prefix: str, *, limit: int = 5) -> DeploymentIdMatches:
        """The ids of the deployments whose id starts with `prefix` (8 to 32 hex digits, any
        case, hyphens or not: `engine.operations.id_prefixes`), at most `limit` (1 to 20) in
        id order, and whether more match: how front doors resolve the short ids people copy
        from the monitor's deployments pages. Refused: `InvalidRequest`
        (`invalid_deployment_id_prefix`, `invalid_limit`)."""
        limit = id_prefixes.check_limit(limit)
        found = id_prefixes.prefix_range(prefix, of="deployment")
        ids = await self._store.deployment_ids_in_range(found.low, found.high, limit=limit + 1)
        return DeploymentIdMatches(prefix=found.prefix, ids=ids[:limit], more=len(ids) > limit)

    @store_boundary
    async def list(
        self, workflow: str, *, limit: int = 20, cursor: str | None = None
    ) -> Page[DeploymentView]:
        """A page of the deployments of `workflow`, newest first (`limit` 1 to 500; `next`
        continues it). Unknown workflow: `NotFound(code="workflow_not_found")`; a cursor of
        another list, or an altered one: `invalid_cursor`."""
        check_limit(limit)
        if await self._store.serving(workflow) is None:
            try:
                await self._store.get_version(workflow)
            except UnknownWorkflow as exc:
                raise await unknown_workflow(self._store, workflow, users_only=True) from exc
        return await self._page(workflow, limit, cursor)

    @store_boundary
    async def recent(self, *, limit: int = 20, cursor: str | None = None) -> Page[DeploymentView]:
        """A page of the deployments of every workflow, newest first (`limit` 1 to 500;
        `next` continues it): what a monitor's deployments page and `schemabridge deployments
        list` show."""
        check_limit(limit)
        return await self._page(None, limit, cursor)

    async def _page(
        self, workflow: str | None, limit: int, cursor: str | None
    ) -> Page[DeploymentView]:
        """Keyset pages by (`created_at`, id), newest first: deployments started meanwhile
        never push one into the next page twice or make one skip."""
        scope = scope_digest(CURSOR_KIND, {"workflow": workflow})
        before = (
            None if cursor is None else time_and_id_key(decode_cursor(cursor, CURSOR_KIND, scope))
        )
        records = await self._store.deployments_of(workflow, limit=limit + 1, before=before)
        next_cursor = None
        if len(records) > limit:
            records = records[:limit]
            last = records[-1]
            next_cursor = encode_cursor(CURSOR_KIND, [last.created_at, last.id], scope)
        return Page[DeploymentView](items=await self._views(records), next=next_cursor)

    @store_boundary
    async def abort(
        self, deployment_id: str, *, actor: str, reason: str | None = None
    ) -> DeploymentChange:
        """Stop a RUNNING deployment: the candidate's weight drops to 0, nothing is promoted,
        its `gradual_deploy` run is cancelled; runs already on the candidate finish on it.
        `reason`, the operator's words (at most `MAX_REASON_CHARS`), goes into the outcome,
        the timeline and the logs. Already ABORTED: nothing to do (`changed` False);
        SUCCEEDED or ROLLED_BACK: `WrongState(code="deployment_ended")`."""
        return await self._stop(deployment_id, DeploymentStatus.ABORTED, actor, reason)

    @store_boundary
    async def rollback(
        self, deployment_id: str, *, actor: str, reason: str | None = None
    ) -> DeploymentChange:
        """Roll a RUNNING deployment back by hand: as `abort`, but it ends ROLLED_BACK (the
        candidate was found wanting) with the figures at that moment. Already ROLLED_BACK:
        `changed` False; SUCCEEDED or ABORTED: `WrongState(code="deployment_ended")`."""
        return await self._stop(deployment_id, DeploymentStatus.ROLLED_BACK, actor, reason)

    async def _stop(
        self, deployment_id: str, status: DeploymentStatus, actor: str, reason: str | None
    ) -> DeploymentChange:
        reason = stop_reason(reason)
        await self._record(deployment_id)  # unknown: not found
        record, changed = await self._store.stop_deployment(
            deployment_id, status, actor=actor, reason=reason
        )
        if record is None:
            raise deployment_not_found(deployment_id)
        verb = "aborted" if status is DeploymentStatus.ABORTED else "rolled back"
        if changed:
            await self._runtime.run_events.changed([record.run_id], ended=[record.run_id])
            self._log_stop(record, verb, actor, reason)
        if not changed and record.status != status.value:
            refusal = WrongState(
                f"deployment {deployment_id} has already ended ({record.status}); it cannot be "
                f"{verb}",
                state=record.status,
                code="deployment_ended",
            )
            # Named as `deployment_running` names it, and as a run's refusal names its run: a
            # script stopping several deployments reads which one each 409 is about.
            refusal.details["deploymentId"] = record.id
            raise refusal
        message = (
            f"deployment {deployment_id} {verb}: {record.workflow_name} "
            f"v{record.candidate_version} gets no new runs"
            if changed
            else f"deployment {deployment_id} was already {verb}"
        )
        return DeploymentChange(
            changed=changed, message=message, deployment=await self._view(record)
        )

    @staticmethod
    def _log_stop(record: DeploymentRecord, verb: str, actor: str, reason: str | None) -> None:
        outcome = record.outcome or {}
        figures = outcome.get("figures")
        stage = int(outcome.get("stage", record.stage_index + 1))
        log_event(
            logger,
            logging.WARNING,
            "rolled_back" if record.status == DeploymentStatus.ROLLED_BACK.value else "aborted",
            f"deployment {record.id} of {record.workflow_name} v{record.candidate_version} "
            f"{verb} by hand at stage {stage} by {actor}"
            + (f": {reason}" if reason else "")
            + f"; {routing_after(record, figures)}",
            record,
            stage=stage,
            actor=actor,
            figures=figures,
            reason=reason,
        )

    # ── serving versions ────────────────────────────────────────────────────────────────────

    @store_boundary
    async def serving(self, workflow: str, *, tenant: str | None = None) -> ServingView:
        """Which version `workflow`'s new runs get, and a running deployment's candidate.
        With `tenant` set (a tenant key's caller) `updated_by` is left out (None): who set the
        serving version is an admin's identity (`key:<id>`), nothing a tenant acts on
        (docs/security.md, 'What a tenant key reads')."""
        record = await self._store.serving(workflow)
        if record is None:
            raise workflow_not_found(workflow)
        view = serving_view(record)
        return view if tenant is None else view.model_copy(update={"updated_by": None})

    @store_boundary
    async def set_serving(self, workflow: str, version: int, *, actor: str) -> ServingChange:
        """Make `version` the serving version of `workflow` at once (every new run that names
        no version gets it), recording `actor`. A `version` that serves already is left as it
        is (`changed` False, said in `message`: who made it serve and since when stay, and
        nothing is audited), as every action with nothing to do answers. Refused while a
        deployment of `workflow` runs (`WrongState(code="deployment_running")`: abort it
        first); unknown workflow or version: `NotFound(code="workflow_not_found")`."""
        self._check_workflow(workflow)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise workflow_not_found(workflow, version)
        try:
            record, changed = await self._store.set_serving(workflow, version, actor=actor)
        except UnknownWorkflow as exc:
            raise await unknown_workflow(self._store, workflow, version, users_only=True) from exc
        view = serving_view(record)
        if changed:
            message = f"{workflow}: v{version} serves new runs from now on (set by {actor})"
        else:
            by = f" by {record.updated_by}" if record.updated_by else ""
            message = (
                f"{workflow}: v{version} serves new runs already (since "
                f"{utc_moment(record.updated_at)}{by}): nothing to do"
            )
        return ServingChange(**view.model_dump(), changed=changed, message=message)


def ended_on(record: DeploymentRecord, counts: DeploymentCounts) -> DeploymentCounts:
    """The figures a deployment ended on in place of `counts` of now, once run retention has
    deleted its runs (its own run gone): what is left of them would count fewer runs, down to
    none, as if the candidate had received nothing. A deployment that ended without figures
    (none recorded) keeps `counts`."""
    figures = (record.outcome or {}).get("figures")
    if not isinstance(figures, dict):
        return counts
    return dataclasses.replace(
        counts,
        candidate=deploy.VersionCounts.from_dict(figures.get("candidate") or {}),
        serving=deploy.VersionCounts.from_dict(figures.get("serving") or {}),
    )
