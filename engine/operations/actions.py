"""Operator actions on runs: retry, resolve, start over, batch retry, reprocess, cancel.

Every action takes `actor` (who did it: an API key id, "cli:<user>@<host>", "demo"), written
with the action to the log of each run it changes (level info, `data={"action", "actor"}`),
and an optional `tenant` scope: a run of another tenant is `NotFound(code="run_not_found")`,
as a run that does not exist. A run in a state the action does not accept is refused with
`WrongState` naming the state. Actions that find nothing to do answer `changed=False` instead
of failing where repeating them is harmless (resolve with the same output, start over,
reprocess, cancel). Each action is one transaction in the store
(`engine.store.actions_store`); a database that cannot be reached is
`Unavailable(code="store_unavailable")` (`store_boundary`).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.operations.action_views import (
    AbortedDeployment,
    ActionResult,
    BatchReprocessResult,
    BatchRetryPreview,
    BatchRetryResult,
    BreakerWarning,
    CancelResult,
    FixFirstRuns,
    ReopenedJoin,
    ReprocessPreview,
    ReprocessResult,
    ResolveResult,
    RetryPreview,
    RetryResult,
    SkippedRun,
    SkippedRuns,
    SkipReason,
    StartOverPreview,
    StartOverResult,
    StepAgain,
    StuckRun,
    StuckRuns,
)
from engine.operations.batch_reprocess import batch_reprocess
from engine.operations.boundary import store_boundary
from engine.operations.breaker_warnings import (
    breakers_called,
    destinations_of,
    open_breaker_warnings,
)
from engine.operations.deployment_warnings import SEVERAL_TENANTS, rerun_warning
from engine.operations.fix_first import FailedCause, fix_first_words, run_fix_first_words
from engine.operations.run_views import summary
from engine.operations.runs import checked_filter
from engine.operations.submission import Bound, check_value_limits
from engine.operations.views import RunFilter
from engine.operations.workflows import require_published
from engine.store.actions_store import aborted_words
from engine.store.deployments import RerunFacts
from engine.store.models import RunRoute, RunStatus
from engine.store.operator_actions import (
    SKIPPED_ENGINE_OWNED,
    SKIPPED_PAST_RETENTION,
    SKIPPED_STARTED_OVER,
    SKIPPED_UNDER_SUCCEEDED,
    SKIPPED_UNKNOWN,
    Action,
    BatchRetryCount,
    JoinBlock,
    RerunGroup,
    RetriedSteps,
    RetryOutcome,
    StuckJoins,
    group_reruns,
    retried_words,
    run_not_found,
)
from engine.store.records import RunRecord
from engine.store.recovery import JoinReopened, revived_words
from engine.store.restarts import start_over_next
from engine.store.retry_checks import join_of
from schemas.batch_limits import DEFAULT_BATCH, MAX_BATCH
from schemas.definitions import RESERVED_WORKFLOWS, VertexType
from schemas.errors import InvalidRequest, WrongState

if TYPE_CHECKING:
    from engine.operations.runs import RunOperations
    from engine.runtime import Runtime

DEAD_LETTERS_READ = 100
"""Dead-lettered children a reprocess reads for the destinations they call (a warning), and
its preview lists."""
LIST_PAGE = 500
"""Runs read per page when a batch retry resolves a filter (the largest page `list` gives)."""


@dataclasses.dataclass(frozen=True)
class _DeadLetters:
    tenant_id: str
    children: list[RunRecord]
    """The first `DEAD_LETTERS_READ`, in item order."""
    called: set[str]
    """The destinations their workflows call."""


class OperatorActions:
    """Operator actions on runs: retry, resolve, start over, batch retry, reprocess, cancel.

    `runs` lists runs for a batch retry given a filter (the operations layer passes its
    `RunOperations`); without it only the ids form is available.
    """

    def __init__(self, runtime: Runtime, runs: RunOperations | None = None) -> None:
        self._runtime = runtime
        self._runs = runs

    async def _changed(self) -> None:
        """Steps may be READY again (wake the workers), and runs changed: an action may move
        its run's ancestors (a join reopens, a counter moves) and descendants too, and actions
        are rare, so every progress watch reads its run again rather than naming them all."""
        await self._runtime.wakeup.notify()
        await self._runtime.run_events.changed_everything()

    @store_boundary
    async def retry(self, run_id: str, *, actor: str, tenant: str | None = None) -> RetryResult:
        """A FAILED run re-runs its FAILED steps (READY again, error cleared, redispatches and
        the tenant rate item anew, attempts still counting); completed steps are kept; the run
        is RUNNING again. A dead-lettered child comes back into its parent's join. Not FAILED:
        `WrongState(code="run_not_failed")`; a run whose tree run retention (or an operator's
        purge) is deleting: `run_past_retention`."""
        # Read before the retry, which it does not change: once the retry has committed, a
        # lost database must not make it answer "unavailable" (as `_dead_letters`).
        facts = await self._runtime.store.rerun_facts(run_id)
        outcome = await self._runtime.store.retry_runs([run_id], actor=actor, tenant=tenant)
        if run_id in outcome.engine_owned:
            raise outcome.engine_owned[run_id]
        if run_id in outcome.started_over:
            raise outcome.started_over[run_id]
        if run_id in outcome.past_retention:
            raise outcome.past_retention[run_id]
        if run_id in outcome.refused:
            state = outcome.refused[run_id]
            raise run_not_found(run_id) if state is None else _not_failed(run_id, state)
        await self._changed()
        return RetryResult(
            run_id=run_id,
            action=Action.RETRY.value,
            changed=True,
            status=RunStatus.RUNNING.value,
            **await self._retry_effects(run_id, outcome, facts),
        )

    @store_boundary
    async def retry_preview(self, run_id: str, *, tenant: str | None = None) -> RetryPreview:
        """What `retry` would do now, with its warnings, changing nothing. Unknown (or
        another tenant's): `NotFound(code="run_not_found")`; not FAILED: `retriable=False`."""
        outcome = await self._runtime.store.retry_preview(run_id, tenant=tenant)
        refusal = (
            outcome.engine_owned.get(run_id)
            or outcome.started_over.get(run_id)
            or outcome.past_retention.get(run_id)
        )
        if refusal is not None:  # the retry's refusal, said before the click
            return RetryPreview(
                run_id=run_id,
                status=refusal.state,
                retriable=False,
                warnings=[refusal.message],
                new_run_id=refusal.details.get("newRunId"),
            )
        if run_id in outcome.refused:
            state = outcome.refused[run_id]
            if state is None:
                raise run_not_found(run_id)
            return RetryPreview(run_id=run_id, status=state, retriable=False)
        facts = await self._runtime.store.rerun_facts(run_id)
        errors = outcome.failed_errors.get(run_id, {})
        fix_first = None if facts is None else await self._fix_first(run_id, facts, errors)
        return RetryPreview(
            run_id=run_id,
            status=RunStatus.FAILED.value,
            retriable=True,
            fix_first=fix_first,
            **await self._retry_effects(run_id, outcome, facts),
        )

    async def _fix_first(
        self, run_id: str, facts: RerunFacts, errors: Mapping[str, Any]
    ) -> str | None:
        """The fix-first warning of the run's retry (`fix_first_words`), as `GET /runs/{id}`
        says it: its steps and graph are read only when there is one, for the steps an
        operator resolved upstream of a FAILED one (a run started over is refused before)."""
        causes = [FailedCause.of(vertex, error) for vertex, error in errors.items()]
        child_run = facts.parent_run_id is not None
        said = fix_first_words(
            causes,
            workflow=facts.workflow,
            version=facts.version,
            tenant_id=facts.tenant_id,
            child_run=child_run,
            run_id=run_id,
        )
        if said is None or child_run:
            return said
        store = self._runtime.store
        return run_fix_first_words(
            await store.get_steps(run_id),
            (await store.get_version(facts.workflow, facts.version)).workflow,
            version=facts.version,
            tenant_id=facts.tenant_id,
            run_id=run_id,
            child_run=False,
            started_over=False,
        )

    async def _retry_effects(
        self, run_id: str, outcome: RetryOutcome, facts: RerunFacts | None
    ) -> dict[str, Any]:
        """What a retry of `run_id` sets off (done, or previewed), as `RetryResult` and
        `RetryPreview` say it: the steps (FAILED, and held back when the run failed), the
        warnings (`facts`: the run's version, read before the retry), the join reopened, the
        stuck joins."""
        warnings = []
        reopened = outcome.reopens.get(run_id)
        if reopened is not None:
            warnings.append(reopened_words(reopened.run_id, reopened.join))
        stuck = outcome.stuck.get(run_id)
        if stuck is not None:
            warnings.append(_stuck_words(run_id, stuck))
        warnings += _rerun_warnings("retry", facts)
        breakers = await self._called_warnings(outcome.called)
        failed, held = outcome.steps[run_id], outcome.held[run_id]
        return {
            "steps_retried": failed,
            "steps_held_back": held,
            "message": retried_words(failed, held),
            "warnings": [*warnings, *(breaker.message for breaker in breakers)],
            "breakers": breakers,
            "reopened_run": None if reopened is None else reopened.run_id,
            "reopened_join": None if reopened is None else reopened.join,
            "stuck_joins": [] if stuck is None else stuck.joins,
            "children_failed": 0 if stuck is None else stuck.children_failed,
            "children_cancelled": 0 if stuck is None else stuck.children_cancelled,
        }

    async def _called_warnings(self, called: Sequence[RetriedSteps]) -> list[BreakerWarning]:
        """The open breakers of the destinations the steps a retry made READY call (its
        outcome's `called`): one line per breaker layer, however many runs call it."""
        by_destination: dict[str, set[str]] = {}
        for retried in called:
            for destination in destinations_of(retried.workflow, retried.vertices):
                by_destination.setdefault(destination, set()).add(retried.tenant_id)
        return await breakers_called(self._runtime, by_destination)

    async def _dead_letters(self, run_id: str) -> _DeadLetters | None:
        """The run's first page of dead-lettered children and the destinations they call (a
        fan-out's children share a few workflows), read before a reprocess revives them: once
        it has committed, a lost database must not make a done reprocess answer
        "unavailable". None: no such run."""
        store = self._runtime.store
        run = await store.get_run(run_id)
        if run is None:
            return None
        children = await store.children(run_id, status="FAILED", limit=DEAD_LETTERS_READ)
        called: set[str] = set()
        for name, number in {(c.workflow_name, c.workflow_version) for c in children}:
            called |= destinations_of((await store.get_version(name, number)).workflow)
        return _DeadLetters(run.tenant_id, children, called)

    async def _reprocess_effects(
        self, dead: _DeadLetters | None, reopened: Sequence[JoinReopened]
    ) -> dict[str, Any]:
        """What a reprocess sets off (done, or previewed), as `ReprocessResult` and
        `ReprocessPreview` say it: the joins reopened, the runs that had SUCCEEDED among them,
        the warnings (the breakers' last: read in Redis, none when it cannot be read)."""
        joins = [_reopened_join(join) for join in reopened]
        warnings = [words for join in joins if (words := _join_warning(join)) is not None]
        first = next((j for j in joins if j.ended == RunStatus.SUCCEEDED), None)
        breakers: list[BreakerWarning] = []
        if dead is not None:
            called = set(dead.called)
            for join in joins:
                called.update(d for step in join.steps_again for d in step.destinations)
            breakers = await open_breaker_warnings(self._runtime, called, dead.tenant_id)
            warnings += [breaker.message for breaker in breakers]
        return {
            "warnings": warnings,
            "breakers": breakers,
            "reopened_run": None if first is None else first.run_id,
            "reopened_join": None if first is None else first.join,
            "reopened_joins": joins,
        }

    @store_boundary
    async def resolve(
        self,
        run_id: str,
        vertex_id: str,
        output: Any,
        *,
        actor: str,
        tenant: str | None = None,
    ) -> ResolveResult:
        """An operator supplies the output (any JSON value) of a FAILED step: the step is
        RESOLVED with it, its dependants proceed, and the run continues or succeeds when
        nothing is left (a child run then counts as succeeded in its parent's join). Unknown
        vertex: `NotFound(code="step_not_found")`; step not FAILED: `WrongState`
        (`step_not_failed`, or `step_already_resolved` for another output — the same output
        again is a no-op). An output larger than `max_response_bytes` as compact JSON (what a
        GATEWAY step keeps of a response) or nested past `nesting_depth_limit`:
        `InvalidRequest(code="output_too_large" / "output_too_deep")`, before the run is
        read. A child run's last FAILED step resolved brings it back into its parent's join,
        as a retry of it does: when that reopens a run above that had ended SUCCEEDED,
        `warnings` (a retry's words, with the steps that run again), `reopenedRun` and
        `reopenedJoin` say so. A run whose tree is being deleted (run retention, an
        operator's purge): `WrongState(code="run_past_retention")`."""
        value = _json_value(output)
        settings = self._runtime.settings
        check_value_limits(
            value, output_bound(settings.max_response_bytes), max_depth=settings.nesting_depth_limit
        )
        outcome = await self._runtime.store.resolve_step(
            run_id, vertex_id, value, actor=actor, tenant=tenant
        )
        if outcome.changed:
            await self._changed()
        # A child whose last FAILED step is resolved comes back into its parent's join, as a
        # retried one does: a run above that had SUCCEEDED runs the steps after it again.
        joins = [_reopened_join(join) for join in outcome.reopened]
        finished = next((j for j in joins if j.ended == RunStatus.SUCCEEDED), None)
        return ResolveResult(
            run_id=run_id,
            action=Action.RESOLVE.value,
            changed=outcome.changed,
            message=(
                f"step {vertex_id} resolved; the run is {outcome.run_status}"
                if outcome.changed
                else f"step {vertex_id} was already resolved with this output"
            ),
            status=outcome.run_status,
            vertex_id=vertex_id,
            warnings=[words for join in joins if (words := _join_warning(join)) is not None],
            reopened_run=None if finished is None else finished.run_id,
            reopened_join=None if finished is None else finished.join,
        )

    @store_boundary
    async def start_over(
        self, run_id: str, *, actor: str, tenant: str | None = None
    ) -> StartOverResult:
        """A new run of the same workflow version with the same input and tenant, its
        `restarted_from` the old run. Only for an ended run (SUCCEEDED, FAILED, CANCELLED),
        else `WrongState(code="run_not_ended")`; a child run is refused
        (`WrongState(code="start_over_child_run")` with its state: its item only exists in its
        parent; retry it, or start over the parent).
        Idempotent: starting the same run over again answers the run the first time
        created (`changed=False`). A deployment's `gradual_deploy` run is refused
        (`WrongState(code="deployment_run")` with its state and `deploymentId`: act on the
        deployment, or start a new one). It always runs the old run's version: `warnings`
        says so when a deployment rolled that version back or it no longer serves."""
        facts = await self._runtime.store.rerun_facts(run_id)  # before: see `retry`
        outcome = await self._runtime.store.start_over(run_id, actor=actor, tenant=tenant)
        if outcome.created:
            await self._runtime.wakeup.notify()
            # The old run's detail now lists the new one (and says so in its log).
            await self._runtime.run_events.changed([run_id, outcome.new_run_id])
        return StartOverResult(
            run_id=run_id,
            action=Action.START_OVER.value,
            changed=outcome.created,
            message=(
                f"started over as run {outcome.new_run_id}"
                if outcome.created
                else already_started_over(outcome.new_run_id, outcome.new_status)
            ),
            status=outcome.old_status,
            new_run_id=outcome.new_run_id,
            warnings=_rerun_warnings("start over", facts),
        )

    @store_boundary
    async def start_over_preview(
        self, run_id: str, *, tenant: str | None = None
    ) -> StartOverPreview:
        """What `start_over` would do now, with its warnings, changing nothing. Unknown (or
        another tenant's): `NotFound(code="run_not_found")`; a start over it would refuse, or
        one done before: `startable=False`, saying which."""
        try:
            look = await self._runtime.store.start_over_preview(run_id, tenant=tenant)
        except WrongState as refused:
            return StartOverPreview(
                run_id=run_id, status=refused.state, startable=False, message=refused.message
            )
        before = look.before
        if before is not None:
            return StartOverPreview(
                run_id=run_id,
                status=before.old_status,
                startable=False,
                new_run_id=before.new_run_id,
                message=already_started_over(before.new_run_id, before.new_status),
            )
        return StartOverPreview(
            run_id=run_id,
            status=look.status,
            startable=True,
            message=f"would start a new run of v{look.version} with the same input",
            warnings=_rerun_warnings("start over", look.facts),
        )

    @store_boundary
    async def batch_retry(
        self,
        ids: Sequence[str] | None = None,
        filter: RunFilter | None = None,
        limit: int = DEFAULT_BATCH,
        *,
        actor: str,
        tenant: str | None = None,
    ) -> BatchRetryResult:
        """Retry many FAILED runs in one transaction: by `ids`, or every run a `filter`
        matches (status FAILED unless the filter names one; root runs only, as a list shows
        them, unless it names a `parent` or sets `roots_only=False`, and a `parent` with
        `roots_only=True` refused as the list refuses it; within `tenant` when
        set: a filter naming another tenant matches nothing), newest first, at most `limit`
        (1 … 10,000). Runs not FAILED, unknown or of another tenant are skipped with the
        reason the single retry would give, and so are a deployment's `gradual_deploy` runs
        (`deployment_run`; a filter takes them beside its `limit`, not in it), and a child
        whose retry would reopen the join of a run that has ended SUCCEEDED
        (`parent_succeeded`: the steps after that join would run again, a finished run's
        calls sent twice; the single `retry` of it by id still does it), and a run whose tree
        run retention (or an operator's purge) is deleting (`run_past_retention`).
        Exactly one of
        `ids` and `filter` is required; more ids than `limit` is refused. Runs retried whose
        joins fail again at once are listed in `stuck`; each open breaker of a destination
        the retried steps call is one of `warnings`, however many runs call it."""
        chosen = _batch_ids(ids, filter, limit)
        if chosen is not None:
            run_ids, truncated = chosen, False
        else:
            assert filter is not None  # `_batch_ids` refused neither or both
            await self._require_workflow(filter)
            run_ids, truncated = await self._matching(filter, limit, tenant)
        # Read before the retry, as `retry` reads its run's: a few reads per version.
        store = self._runtime.store
        versions = await store.run_versions(run_ids, tenant=tenant)
        facts = await store.rerun_facts_of(group_reruns(versions.values()))
        outcome = await store.retry_runs(
            run_ids,
            actor=actor,
            tenant=tenant,
            action=Action.BATCH_RETRY,
            spare_finished=True,
        )
        breakers: list[BreakerWarning] = []
        rerun: list[str] = []
        if outcome.retried:
            await self._changed()
            breakers = await self._called_warnings(outcome.called)
            retried = group_reruns(versions[r] for r in outcome.retried if r in versions)
            rerun = _batch_rerun_warnings(retried, facts)
        return BatchRetryResult(
            retried=outcome.retried,
            warnings=[*rerun, *(breaker.message for breaker in breakers)],
            breakers=breakers,
            skipped=[_skipped(run_id, outcome) for run_id in run_ids if run_id in outcome.refused],
            truncated=truncated,
            stuck=[
                _stuck(run_id, outcome.stuck[run_id])
                for run_id in outcome.retried
                if run_id in outcome.stuck
            ],
        )

    async def _count_batch(
        self,
        ids: Sequence[str] | None,
        filter: RunFilter | None,
        limit: int,
        tenant: str | None,
    ) -> BatchRetryCount | None:
        """What the batch of `ids` or `filter` would take (`batch_retry_preview`), after the
        batch's own refusals; None when a filter names another tenant than `tenant`."""
        run_ids = _batch_ids(ids, filter, limit)
        if run_ids is not None:
            return await self._runtime.store.batch_retry_count_of(run_ids, tenant=tenant)
        assert filter is not None  # `_batch_ids` refused neither or both
        await self._require_workflow(filter)
        scoped = _batch_filter(filter, tenant)
        if scoped is None:
            return None
        return await self._runtime.store.batch_retry_count(checked_filter(scoped), limit=limit)

    async def _require_workflow(self, filter: RunFilter) -> None:
        """A filter's workflow, and its version, must have been published: the batch and its
        preview refuse one that never was (`workflow_not_found`, naming what exists) rather
        than answer 0 runs. The filter is checked first, so a version without its workflow
        or below 1 stays `invalid_filter`."""
        checked_filter(filter)
        if filter.workflow is not None:
            await require_published(self._runtime.store, filter.workflow, filter.version)

    async def _matching(
        self, filter: RunFilter, limit: int, tenant: str | None
    ) -> tuple[list[str], bool]:
        """The ids of up to `limit` runs the filter matches, newest first, and whether more
        matched. A deployment's `gradual_deploy` runs among them are taken beside the `limit`,
        not counted in it: the retry skips them (`deployment_run`), and the preview, which
        the monitor's confirm passes its count of as `limit`, does not count them."""
        if self._runs is None:
            raise InvalidRequest(
                "a batch retry by filter needs the run listing (Operations wires it)",
                code="filter_unsupported",
            )
        # `roots_only` left None is decided by the list below, as for `GET /runs`: a batch
        # must not act on runs its preview hid.
        scoped = _batch_filter(filter, tenant)
        if scoped is None:
            return [], False
        filter = scoped
        found: list[str] = []
        counted = 0
        cursor: str | None = None
        while True:  # each page moves the cursor on: the list ends, or `limit` is reached
            page = await self._runs.list(filter, limit=LIST_PAGE, cursor=cursor)
            for item in page.items:
                engine_run = item.workflow in RESERVED_WORKFLOWS
                if counted == limit and not engine_run:
                    return found, True
                found.append(item.id)
                counted += not engine_run
            cursor = page.next
            if cursor is None:
                return found, False

    @store_boundary
    async def batch_retry_preview(
        self,
        filter: RunFilter | None = None,
        limit: int = DEFAULT_BATCH,
        *,
        ids: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> BatchRetryPreview:
        """What `batch_retry(filter=filter, limit=limit)` would take, counted without doing
        it: the runs the filter matches (as the batch reads them: FAILED unless it names a
        status, root runs as a list shows them, within `tenant`; not the `gradual_deploy`
        runs it skips beside its `limit`), the newest `limit` of them counted as the batch
        would take them (`matching`) or skip them (`skipped`: runs not FAILED, FAILED
        children under a SUCCEEDED run, by reason), whether more match, and the breaker
        warnings of the steps the taken ones would run again. One bounded count and one read
        of those runs' FAILED and held steps (`OperatorActionsStore.batch_retry_count`),
        where paging the list would read every run; and which of those runs failed for a cause
        the workflow or their input makes (they fail the same way at once: the first warning
        says so, with `fixFirst`). With `ids` instead of a filter, what
        `batch_retry(ids=ids)` would do: the runs it names, those unknown to `tenant` and a
        deployment's own runs among the skipped. Refused as the batch is:
        `invalid_limit`, `invalid_batch`, `too_many_runs`, and `invalid_filter` for a filter a
        list refuses."""
        counted = await self._count_batch(ids, filter, limit, tenant)
        if counted is None:
            return BatchRetryPreview(matching=0, limit=limit)
        breakers = await self._called_warnings(counted.called)
        matching = counted.taking
        truncated = counted.count > limit
        fix_first = _fix_first_groups(counted.fix_first)
        # The cause a retry cannot fix leads, as `runs show` and the monitor's single-run
        # dialogs lead with it: a closed breaker would not help those runs.
        lead = [] if not fix_first else [_fix_first_words(counted.fix_first, matching, truncated)]
        # Next the joins a retry leaves failed (their children are still FAILED), which the
        # batch would list in `stuck` only once it had retried them.
        stuck = _stuck_runs(counted.stuck, matching, truncated)
        if stuck.message is not None:
            lead.append(stuck.message)
        facts = await self._runtime.store.rerun_facts_of(counted.versions)
        rerun = _batch_rerun_warnings(counted.versions, facts)
        return BatchRetryPreview(
            matching=matching,
            skipped=_skipped_counts(counted),
            limit=limit,
            truncated=truncated,
            warnings=[*lead, *rerun, *(breaker.message for breaker in breakers)],
            breakers=breakers,
            fix_first=fix_first,
            stuck=stuck,
        )

    @store_boundary
    async def reprocess(
        self, run_id: str, *, actor: str, tenant: str | None = None
    ) -> ReprocessResult:
        """The dead-lettered (FAILED) children of the run run again, with the dead letters
        of nested fan-outs under them; the joins they had closed reopen, up to the root: a run
        that had SUCCEEDED runs again from its join, and the steps after it send their calls a
        second time, which `warnings`, `reopenedRun` and `reopenedJoins` say (as a retry of a
        child under a SUCCEEDED run does; `reprocess_preview` says it before).
        None to revive: `changed=False`. A CANCELLED run: `WrongState(code="run_cancelled")`;
        a run whose tree is being deleted (run retention, an operator's purge):
        `WrongState(code="run_past_retention")`."""
        dead = await self._dead_letters(run_id)
        outcome = await self._runtime.store.reprocess_run(run_id, actor=actor, tenant=tenant)
        effects: dict[str, Any] = {}
        if outcome.revived:
            await self._changed()
            effects = await self._reprocess_effects(dead, outcome.reopened)
        return ReprocessResult(
            run_id=run_id,
            action=Action.REPROCESS.value,
            changed=outcome.revived > 0,
            message=(
                f"{revived_words(outcome.revived)} again"
                if outcome.revived
                else "no dead-lettered children to run again"
            ),
            status=outcome.run_status,
            revived=outcome.revived,
            **effects,
        )

    async def batch_reprocess(
        self, ids: Sequence[str], *, actor: str, tenant: str | None = None
    ) -> BatchReprocessResult:
        """Reprocess each run of `ids` as `reprocess` does it alone, skipping with the reason
        a run it would refuse, one with no dead letter and one whose reprocess would reopen a
        SUCCEEDED run's join (`engine.operations.batch_reprocess`)."""
        return await batch_reprocess(
            ids,
            preview=lambda run_id: self.reprocess_preview(run_id, tenant=tenant),
            reprocess=lambda run_id: self.reprocess(run_id, actor=actor, tenant=tenant),
        )

    @store_boundary
    async def reprocess_preview(
        self, run_id: str, *, tenant: str | None = None
    ) -> ReprocessPreview:
        """What `reprocess` would do now, with its warnings, changing nothing: the children
        it would revive, the joins it would reopen with the steps after them that would run
        again and what they call, the runs that had SUCCEEDED and would run again. Unknown (or
        another tenant's): `NotFound(code="run_not_found")`; CANCELLED, a deployment's
        `gradual_deploy` run or a run whose tree is being deleted (its refusal in `warnings`):
        `reprocessable=False`."""
        outcome = await self._runtime.store.reprocess_preview(run_id, tenant=tenant)
        if outcome.refused is not None:  # the reprocess's refusal, said before the click
            return ReprocessPreview(
                run_id=run_id,
                status=outcome.refused,
                reprocessable=False,
                warnings=[] if outcome.refusal is None else [outcome.refusal],
            )
        if not outcome.revived:
            return ReprocessPreview(run_id=run_id, status=outcome.run_status, reprocessable=True)
        dead = await self._dead_letters(run_id)
        return ReprocessPreview(
            run_id=run_id,
            status=outcome.run_status,
            reprocessable=True,
            revived=outcome.revived,
            dead_letters=[] if dead is None else [summary(child) for child in dead.children],
            **await self._reprocess_effects(dead, outcome.reopened),
        )

    @store_boundary
    async def cancel(
        self,
        run_id: str,
        *,
        actor: str,
        tenant: str | None = None,
        deployment_actor: str | None = None,
    ) -> CancelResult:
        """The run and every descendant still going end CANCELLED; their steps that had not
        ended are CANCELLED. Workers are told before this returns: the steps they hold send no
        new HTTP attempt, and a request already on the wire finishes without its result being
        recorded (docs/architecture.md, 'Cancelling a run').
        A cancelled child counts as cancelled in its parent's join. Already CANCELLED:
        `changed=False`; SUCCEEDED or FAILED: `WrongState(code="run_ended")`. A deployment's
        `gradual_deploy` run takes its deployment with it (ABORTED), which the answer names
        (`aborted_deployment`, and in `message`), recording `deployment_actor` as who stopped it
        (`actor` when None): a deployment names the key with its name, where an operator
        action on a run keeps its bare id (`Caller.named_actor`)."""
        outcome = await self._runtime.store.cancel_run(
            run_id, actor=actor, tenant=tenant, deployment_actor=deployment_actor
        )
        changed = outcome.runs_cancelled > 0
        message = (
            _cancelled(outcome.runs_cancelled, outcome.steps_cancelled)
            if changed
            else "already cancelled"
        )
        deployment = outcome.aborted_deployment
        if deployment is not None:
            message += f"; {aborted_words(deployment)}"
        if changed:
            # Before returning: the workers holding steps of these runs stop them before their
            # next HTTP attempt (docs/architecture.md, 'Cancelling a run').
            await self._runtime.cancellations.announce(outcome.stopped)
            await self._runtime.run_events.changed_everything()
        return CancelResult(
            run_id=run_id,
            action=Action.CANCEL.value,
            changed=changed,
            message=message,
            status=outcome.run_status,
            runs_cancelled=outcome.runs_cancelled,
            steps_cancelled=outcome.steps_cancelled,
            aborted_deployment=None
            if deployment is None
            else AbortedDeployment(
                id=deployment.id,
                workflow=deployment.workflow_name,
                version=deployment.candidate_version,
                serving_version=deployment.serving_version,
            ),
        )


def _rerun_warnings(action: str, facts: RerunFacts | None) -> list[str]:
    """The warning that `action` repeats a version a deployment rolled back (or that no
    longer serves), as every front door says it (`rerun_warning`)."""
    warning = rerun_warning(action, facts)
    return [] if warning is None else [warning]


def already_started_over(new_run_id: str, new_status: str) -> str:
    """A second start over's answer: the run the first created and its status, and what to do
    when that run did not succeed either (`start_over_next`)."""
    words = f"already started over as run {new_run_id}, {new_status}"
    if new_status in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
        words += f": {start_over_next(new_run_id, new_status)}"
    return words


def _batch_rerun_warnings(groups: Sequence[RerunGroup], facts: Sequence[RerunFacts]) -> list[str]:
    """A batch retry's warnings that it repeats a version a deployment rolled back (or that
    no longer serves): one per workflow version of `groups` (the runs retried, or that its
    preview counts), in a single retry's words. `facts`: `rerun_facts_of` each version, read
    before the retry (its routing row, its rollback), of these groups or more."""
    known = {(fact.workflow, fact.version): fact for fact in facts}
    warnings = []
    for group in groups:
        fact = known.get((group.workflow, group.version))
        if fact is None:
            continue
        route = RunRoute.SERVING.value if group.routed else None
        of_group = dataclasses.replace(
            fact,
            route=route,
            parent_run_id=group.parent_run_id,
            tenant_id=group.tenant_id or SEVERAL_TENANTS,
        )
        warnings += _rerun_warnings("retry", of_group)
    return warnings


def _batch_ids(ids: Sequence[str] | None, filter: RunFilter | None, limit: int) -> list[str] | None:
    """A batch's (or its preview's) `ids`, each once, or None when it has a filter instead:
    refused unless exactly one is given (`invalid_batch`), and more ids than `limit`
    (`too_many_runs`) or a `limit` out of bounds (`invalid_limit`)."""
    _check_limit(limit)
    if (ids is None) == (filter is None):
        given = "both ids and a filter were given" if ids is not None else "neither was given"
        raise InvalidRequest(f"give either ids or a filter: {given}", code="invalid_batch")
    if ids is None:
        return None
    if len(ids) > limit:
        raise InvalidRequest(
            f"{len(ids)} runs asked for, more than the limit of {limit}", code="too_many_runs"
        )
    return list(dict.fromkeys(ids))


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_BATCH:
        raise InvalidRequest(
            f"limit must be between 1 and {MAX_BATCH}, not {limit}", code="invalid_limit"
        )


def _batch_filter(filter: RunFilter, tenant: str | None) -> RunFilter | None:
    """`filter` as a batch retry reads it: FAILED runs unless it names a status, within
    `tenant` when set. None when it names another tenant than `tenant`: it matches nothing,
    since listing that tenant's runs would reveal their ids."""
    if filter.status is None:
        filter = dataclasses.replace(filter, status=RunStatus.FAILED.value)
    if tenant is not None and filter.tenant not in (None, tenant):
        return None
    if tenant is not None:
        filter = dataclasses.replace(filter, tenant=tenant)
    return filter


def _cancelled(runs: int, steps: int) -> str:
    """What a cancel did, in words: "cancelled (2 steps)", "cancelled with 3 runs under it
    (7 steps)"."""
    under = runs - 1
    children = f" with {under} run{'' if under == 1 else 's'} under it" if under else ""
    return f"cancelled{children} ({steps} step{'' if steps == 1 else 's'})"


def _not_failed(run_id: str, state: str) -> WrongState:
    """The refusal of a retry of a run that is not FAILED; a batch retry skips it in the same
    words."""
    return WrongState(
        f"run {run_id} is {state}; only a FAILED run can be retried",
        state=state,
        code="run_not_failed",
        run_id=run_id,
    )


UNDER_SUCCEEDED_WORDS = (
    "a run above them has SUCCEEDED: retrying these children would reopen its join and run "
    "the steps after it again; start over that run to run it all again, or retry one of "
    "them alone by its id if that is really wanted"
)
"""Why a batch retry's preview says it would skip FAILED children (`parent_succeeded`): the
batch's own words for each (`_skipped`), for runs it counts rather than names."""


NOT_FOUND_WORDS = "no run has these ids (or they are another tenant's)"
"""A batch retry preview's words for the ids it would skip as `run_not_found`."""

DEPLOYMENT_RUN_WORDS = (
    "these are deployments' own runs: a retry would rewrite the record of their stages; act "
    "on their deployments instead"
)
"""A batch retry preview's words for the ids it would skip as `deployment_run`."""

STARTED_OVER_WORDS = (
    "these runs (or the runs above them) were started over: retrying them would run their "
    "steps and send their calls a second time, beside the new runs'; look at the new runs "
    "instead (a run can be retried only while nobody has started it over)"
)
"""Why a batch retry's preview says it would skip FAILED runs that were started over
(`started_over`), for runs it counts rather than names."""


PAST_RETENTION_WORDS = (
    "these runs (or the runs above them) are being deleted by run retention or an "
    "operator's purge: retrying them would reopen what is left of their trees; start "
    "their root runs over to run their input again"
)
"""Why a batch retry's preview says it would skip FAILED runs whose trees are being deleted
(`run_past_retention`), for runs it counts rather than names."""


def _skipped_counts(counted: BatchRetryCount) -> list[SkippedRuns]:
    """The runs a batch retry's preview counts that the batch would skip, by reason and
    state, most first, each with the batch's words for it."""
    named = counted.skipped_ids
    found = [
        SkippedRuns(
            reason=SkipReason.RUN_NOT_FAILED,
            state=state,
            count=n,
            message=f"only a FAILED run can be retried; these are {state}",
            run_ids=named.get(state, []),
        )
        for state, n in counted.not_failed.items()
        if n
    ]
    # FAILED runs the batch skips for what lies around them, not for their state. A run
    # started over is named with its new run (one whose new run is gone meanwhile, not).
    restarted = [r for r in named.get(SKIPPED_STARTED_OVER, []) if r in counted.new_runs]
    named = {**named, SKIPPED_STARTED_OVER: restarted}
    found += [
        SkippedRuns(
            reason=reason,
            state=RunStatus.FAILED.value,
            count=n,
            message=words,
            run_ids=named.get(kind, []),
            new_run_ids=[counted.new_runs[r] for r in named.get(kind, []) if r in restarted],
        )
        for reason, kind, n, words in (
            (SkipReason.STARTED_OVER, SKIPPED_STARTED_OVER, counted.started_over,
             STARTED_OVER_WORDS),
            (SkipReason.RUN_PAST_RETENTION, SKIPPED_PAST_RETENTION, counted.past_retention,
             PAST_RETENTION_WORDS),
            (SkipReason.PARENT_SUCCEEDED, SKIPPED_UNDER_SUCCEEDED, counted.under_succeeded,
             UNDER_SUCCEEDED_WORDS),
        )
        if n
    ]  # fmt: skip
    # Of a batch by ids: the ids no run (of the caller's tenant) has, and deployments' runs.
    found += [
        SkippedRuns(reason=reason, state=None, count=n, message=words, run_ids=named.get(kind, []))
        for reason, kind, n, words in (
            (SkipReason.RUN_NOT_FOUND, SKIPPED_UNKNOWN, counted.unknown, NOT_FOUND_WORDS),
            (SkipReason.DEPLOYMENT_RUN, SKIPPED_ENGINE_OWNED, counted.engine_owned,
             DEPLOYMENT_RUN_WORDS),
        )
        if n
    ]  # fmt: skip
    return sorted(found, key=lambda skipped: -skipped.count)


def _skipped(run_id: str, outcome: RetryOutcome) -> SkippedRun:
    """Why a batch retry left `run_id` alone: the code and words a retry of it alone would be
    refused with, or `parent_succeeded`."""
    state = outcome.refused[run_id]
    reopens = outcome.reopens.get(run_id)
    engine_owned = outcome.engine_owned.get(run_id)
    if engine_owned is not None:
        return SkippedRun(
            run_id=run_id,
            reason=SkipReason.DEPLOYMENT_RUN,
            state=state,
            message=engine_owned.message,
        )
    started_over = outcome.started_over.get(run_id)
    if started_over is not None:
        return SkippedRun(
            run_id=run_id,
            reason=SkipReason.STARTED_OVER,
            state=state,
            message=started_over.message,
        )
    past = outcome.past_retention.get(run_id)
    if past is not None:
        return SkippedRun(
            run_id=run_id, reason=SkipReason.RUN_PAST_RETENTION, state=state, message=past.message
        )
    if state is None:
        missing = run_not_found(run_id)
        return SkippedRun(run_id=run_id, reason=SkipReason.RUN_NOT_FOUND, message=missing.message)
    if state != RunStatus.FAILED.value or reopens is None:
        wrong = _not_failed(run_id, state)
        return SkippedRun(
            run_id=run_id, reason=SkipReason.RUN_NOT_FAILED, state=state, message=wrong.message
        )
    ancestor, join = reopens.run_id, reopens.join
    return SkippedRun(
        run_id=run_id,
        reason=SkipReason.PARENT_SUCCEEDED,
        state=state,
        message=(
            f"run {ancestor} above it has SUCCEEDED: retrying this child would reopen its join "
            f"{join!r} and run the steps after it again; start over run {ancestor} to run it "
            "all again, or retry this run alone by its id if that is really wanted"
        ),
    )


def reopened_words(
    run_id: str,
    join: str,
    *,
    above: bool = True,
    ended: str | None = RunStatus.SUCCEEDED.value,
    again: Sequence[str] = (),
) -> str:
    """A run that runs again from its join, which had closed, so the steps after it run a
    second time: the one wording of a retry's and a reprocess's warnings (`above`: the run is
    above the one acted on; `ended`: how it had ended, None: it was still going; `again`: the
    steps that run again, as `_step_words` says them)."""
    where = " above it" if above else ""
    had = f" had {ended} and" if ended else ""
    words = (
        f"run {run_id}{where}{had} runs again from its join {join!r}: the steps after that "
        "join run a second time"
    )
    return f"{words}: {', '.join(again)}" if again else words


def _reopened_join(join: JoinReopened) -> ReopenedJoin:
    name = join_of(join.workflow, join.spawner)
    return ReopenedJoin(
        run_id=join.run_id,
        join=name,
        spawner=join.spawner,
        above=join.ancestor,
        ended=join.ended,
        steps_again=[
            StepAgain(
                vertex_id=vertex,
                type=join.workflow.vertices[vertex].type,
                destinations=sorted(destinations_of(join.workflow, [vertex])),
            )
            for vertex in join.again
            if vertex != name
        ],
    )


def _join_warning(join: ReopenedJoin) -> str | None:
    """A reprocess's warning for a join it reopens: always for a run that had SUCCEEDED (a
    finished run runs again, as a retry warns); for another run, when steps after the join
    that had ended send their calls again."""
    calls = [step for step in join.steps_again if step.type == VertexType.GATEWAY]
    if join.ended != RunStatus.SUCCEEDED and not calls:
        return None
    return reopened_words(
        join.run_id,
        join.join,
        above=join.above,
        ended=join.ended,
        again=[_step_words(step) for step in join.steps_again],
    )


def _step_words(step: StepAgain) -> str:
    """`report (calls http://billing:8080)`: a step that runs again, and what it calls."""
    if step.destinations:
        return f"{step.vertex_id} (calls {', '.join(step.destinations)})"
    if step.type == VertexType.GATEWAY:
        return f"{step.vertex_id} (its call is sent again)"
    return step.vertex_id


def _stuck_words(run_id: str, stuck: StuckJoins) -> str:
    """Why retrying a run whose joins failed on FAILED children does not help, and what does:
    one sentence for a single retry's `warnings` and a batch's `stuck[].message`, which the
    CLI prints as it is (so it names the run, and gives the command as well as the action)."""
    one = len(stuck.joins) == 1
    names = ", ".join(repr(join) for join in stuck.joins)
    what, fails = ("join", "fails") if one else ("joins", "fail")
    if stuck.children_cancelled:
        # Neither a retry nor a reprocess runs a cancelled child again.
        c = stuck.children_cancelled
        were = "1 child it does not tolerate was" if c == 1 else f"{c:,} children were"
        return (
            f"run {run_id}: its {what} {names} {fails} again at once: {were} CANCELLED, which "
            f"neither a retry nor a reprocess runs again; resolve the {what} with the output "
            f"{'it' if one else 'they'} should give (`schemabridge runs resolve {run_id} "
            f"{stuck.joins[0]} --output JSON`) or start the run over (`schemabridge runs "
            f"start-over {run_id}`; a child run's root)"
        )
    n = stuck.children_failed
    still = f"{n} child is" if n == 1 else f"{n:,} children are"
    if stuck.fix_first is not None:
        # Reprocessing runs the children's version with the same input: it fails the same way.
        return (
            f"run {run_id}: its {what} {names} {fails} again at once: {still} still FAILED, "
            f"most with {stuck.fix_first}, which a reprocess repeats too; fix the workflow (or "
            "the input), publish it and submit a new run (`schemabridge workflows publish "
            "FILE`, then `schemabridge runs submit NAME@VERSION --input JSON`)"
        )
    return (
        f"run {run_id}: its {what} {names} {fails} again at once: {still} still FAILED; "
        f"reprocess run {run_id} (`schemabridge runs reprocess {run_id}`) to run "
        f"{'it' if n == 1 else 'them'} again and reopen the {what}"
    )


FIX_FIRST_SHOWN = 10
"""Run ids a batch retry's preview names of the runs that would fail the same way (in its
warning, and per kind in `fixFirst`): the newest; the counts say how many there are."""


def _fix_first_groups(kinds: dict[str, str]) -> list[FixFirstRuns]:
    """The runs (newest first, with the kind each failed with) grouped by kind, most runs
    first (then by kind, so the answer is stable)."""
    by_kind: dict[str, list[str]] = {}
    for run_id, kind in kinds.items():
        by_kind.setdefault(kind, []).append(run_id)
    ordered = sorted(by_kind.items(), key=lambda item: (-len(item[1]), item[0]))
    return [
        FixFirstRuns(kind=kind, count=len(ids), run_ids=ids[:FIX_FIRST_SHOWN])
        for kind, ids in ordered
    ]


def _of_the_batch(n: int, matching: int, truncated: bool) -> str:
    """The subject of a batch preview's sentence about `n` of the `matching` runs the batch
    would take: "3 of the 40 runs", "3 of the newest 1,000 runs the batch takes", "All 3
    runs" ("1 of the 1 run" reads as a slip)."""
    if truncated and matching == 1:
        return "The newest run, the one the batch takes,"
    if truncated:
        return f"{n:,} of the newest {matching:,} runs the batch takes"
    if n == matching:
        return "The run" if n == 1 else f"All {n:,} runs"
    return f"{n:,} of the {matching:,} {'run' if matching == 1 else 'runs'}"


def _named_runs(run_ids: Sequence[str]) -> str:
    """`runs: a, b and 3 more`: the first `FIX_FIRST_SHOWN` of `run_ids` (newest first)."""
    shown = list(run_ids)[:FIX_FIRST_SHOWN]
    more = f" and {len(run_ids) - len(shown):,} more" if len(run_ids) > len(shown) else ""
    return f"{'run' if len(run_ids) == 1 else 'runs'}: {', '.join(shown)}{more}"


def _fix_first_words(kinds: dict[str, str], matching: int, truncated: bool) -> str:
    """The batch preview's first warning: how many of the runs it would take fail the same
    way at once and why, what to do instead (the single run's advice: fix, publish, submit
    anew), and the newest of them by id. Printed as it is by the CLI, shown by the monitor."""
    groups = _fix_first_groups(kinds)
    n = len(kinds)
    head = _of_the_batch(n, matching, truncated)
    if len(groups) == 1:
        with_what = groups[0].kind
    else:
        with_what = " / ".join(f"{group.kind} ({group.count:,})" for group in groups)
    they = "it fails" if n == 1 else "they fail"
    return (
        f"{head} failed with {with_what}, from the workflow or the runs' input: "
        f"retrying runs the same workflow version with the same input, so {they} the "
        "same way at once. Fix the workflow (or the input), publish it, then submit new runs "
        "(`schemabridge workflows publish FILE`, then `schemabridge runs submit NAME@VERSION "
        f"--input JSON`); {_named_runs(list(kinds))}"
    )


def _stuck_runs(stuck: dict[str, JoinBlock], matching: int, truncated: bool) -> StuckRuns:
    """The batch preview's runs whose joins would fail again at once (`stuck`: run id to
    what keeps the join failing, newest first), with the one sentence that says them: how
    many, why a retry does not help, what does (the single retry's advice, "Reprocess dead
    letters" on each, or for CANCELLED children a resolve or a start over), and the newest of
    them by id."""
    if not stuck:
        return StuckRuns()
    blocks = Counter(stuck.values())
    n, repeated = len(stuck), blocks[JoinBlock.FIX_FIRST]
    cancelled = blocks[JoinBlock.CANCELLED_CHILDREN]
    one = n == 1
    head = _of_the_batch(n, matching, truncated)
    joins = "has a join that fails" if one else "have joins that fail"
    if cancelled == n:
        message = (
            f"{head} {joins} again at once: {'it' if one else 'they'} failed on CANCELLED "
            "children, which neither a retry nor a reprocess runs again. Resolve the join "
            "(`schemabridge runs resolve RUN JOIN --output JSON`) or start the run over "
            "instead"
        )
    else:
        message = (
            f"{head} {joins} again at once: the children {'it' if one else 'they'} failed on "
            f'are still FAILED, and a retry does not run them. "Reprocess dead letters" on '
            f"{'it' if one else 'each'} (`schemabridge runs reprocess RUN`) runs those children "
            "again and reopens the join instead"
        )
    if repeated:
        # Those children failed on the workflow or their input: reprocessing repeats it.
        their = "its" if one else "their"
        whose = f"{their} children" if repeated == n else f"the children of {repeated:,} of them"
        message += (
            f"; but {whose} failed from the workflow or the input, which a reprocess repeats "
            "too: fix the workflow first"
        )
    if 0 < cancelled < n:
        message += (
            f"; but {cancelled:,} of them failed on CANCELLED children, which a reprocess does "
            "not run again: resolve the join or start the run over instead"
        )
    ids = list(stuck)
    message += f"; {_named_runs(ids)}"
    return StuckRuns(count=n, run_ids=ids[:FIX_FIRST_SHOWN], message=message, cancelled=cancelled)


def _stuck(run_id: str, stuck: StuckJoins) -> StuckRun:
    return StuckRun(
        run_id=run_id,
        joins=stuck.joins,
        children_failed=stuck.children_failed,
        children_cancelled=stuck.children_cancelled,
        message=_stuck_words(run_id, stuck),
    )


def output_bound(max_response_bytes: int) -> Bound:
    """The size limit of an operator's output: a resolved step stands where a step's output
    would be, and the largest a step keeps is a GATEWAY's response body
    (`MAX_RESPONSE_BYTES`), so an operator may hand in what the call could have returned, and
    no more than downstream steps are sized for."""
    return Bound(
        "output",
        max_response_bytes,
        "the limit is SCHEMABRIDGE_MAX_RESPONSE_BYTES, the most of a response a GATEWAY step "
        "keeps: resolve with a smaller output or raise it",
    )


def _json_value(output: Any) -> Any:
    """`output` as the store will hold it (JSON), or `InvalidRequest` when it is not JSON."""
    try:
        return json.loads(json.dumps(output, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"the output must be a JSON value: {exc}", code="invalid_output"
        ) from exc


__all__ = ["ActionResult", "OperatorActions", "reopened_words"]
