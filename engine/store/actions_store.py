"""The operator-actions role of the store: retry, resolve, start over, reprocess and cancel,
each one transaction that leaves runs, steps and fan-out counters consistent.

Actions end runs and steps the way recording results does — a resolved step unlocks its
dependants and may end its run, a run that ends (or is cancelled) counts on its parent's
spawner and may close the join, up a nested fan-out — so this role builds on the work queue's
completion machinery rather than repeating it. Refusals are raised as the operation errors
of `schemas.errors` from inside the transaction, which rolls it back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, case, func, insert, or_, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import (
    deployment_rows,
    listing,
    past_retention,
    recovery,
    reprocess_plan,
    restarts,
    retry_checks,
)
from engine.store import operator_actions as sql
from engine.store import operator_settings as settings_
from engine.store import results as results_
from engine.store.catalogue import created_data, created_line
from engine.store.children import EndedChild
from engine.store.core import run_record, step_rows, steps
from engine.store.deployment_log import routing_after
from engine.store.models import TERMINAL_RUN_STATUSES, RunRoute, RunStatus, StepStatus
from engine.store.operator_actions import (
    SKIPPED_ENGINE_OWNED,
    SKIPPED_PAST_RETENTION,
    SKIPPED_SHOWN,
    SKIPPED_STARTED_OVER,
    SKIPPED_UNDER_SUCCEEDED,
    SKIPPED_UNKNOWN,
    Action,
    BatchRetryCount,
    CancelOutcome,
    ReopenedAncestor,
    ReprocessOutcome,
    RerunGroup,
    ResolveOutcome,
    RetriedSteps,
    RetryOutcome,
    StartOverLook,
    StartOverOutcome,
    action_line,
)
from engine.store.queue import MAX_NESTING, WorkQueue
from engine.store.records import CompletionReport, DeploymentRecord, LogLine
from schemas.close_names import close_names, did_you_mean
from schemas.definitions import RESERVED_WORKFLOWS, Workflow
from schemas.errors import NotFound, QuotaExceeded, RunCancelled, WrongState

ROUTED = (RunRoute.SERVING.value, RunRoute.CANDIDATE.value)
"""The routes of runs submitted to whatever version served (not pinned to theirs)."""


async def rerun_groups(
    conn: AsyncConnection, source: Any, *conditions: ColumnElement[bool]
) -> list[RerunGroup]:
    """The workflow versions of the runs of `source` (the runs table or a subquery of its
    rows, with `route`, `restarted_from`, `parent_run_id` and `tenant_id`) that match
    `conditions`: one grouped statement, a row per version, by name and version. A start
    over counts as routed when the run it repeats was (`restarted_routed`: read only when a
    group holds start overs)."""
    routed = func.max(case((source.c.route.in_(ROUTED), 1), else_=0))
    started_over = func.max(case((source.c.route == RunRoute.START_OVER.value, 1), else_=0))
    query = (
        select(
            source.c.workflow_name,
            source.c.workflow_version,
            routed.label("routed"),
            started_over.label("started_over"),
            func.count().label("runs"),
            func.count(source.c.parent_run_id).label("children"),
            func.min(source.c.parent_run_id).label("parent"),
            func.min(source.c.tenant_id).label("tenant"),
            func.max(source.c.tenant_id).label("last_tenant"),
        )
        .where(*conditions)
        .group_by(source.c.workflow_name, source.c.workflow_version)
        .order_by(source.c.workflow_name, source.c.workflow_version)
    )
    rows = (await conn.execute(query)).all()
    also_routed: set[tuple[str, int]] = set()
    if any(row.started_over and not row.routed for row in rows):
        also_routed = await restarted_routed(conn, source, *conditions)
    return [
        RerunGroup(
            row.workflow_name,
            row.workflow_version,
            bool(row.routed) or (row.workflow_name, row.workflow_version) in also_routed,
            row.parent if row.children == row.runs else None,
            row.tenant if row.tenant == row.last_tenant else None,
        )
        for row in rows
    ]


async def restarted_routed(
    conn: AsyncConnection, source: Any, *conditions: ColumnElement[bool]
) -> set[tuple[str, int]]:
    """The workflow versions (name, version) of the start overs of `source` matching
    `conditions` whose original run (`restarts.original_routes`) was routed, not pinned: their
    route, `start_over`, does not say it."""
    query = (
        select(
            source.c.workflow_name,
            source.c.workflow_version,
            source.c.route,
            source.c.restarted_from,
        )
        .where(*conditions, source.c.route == RunRoute.START_OVER.value)
        .distinct()
    )
    restarted = (await conn.execute(query)).all()
    routes = await restarts.submitted_routes(conn, restarted)
    return {
        (row.workflow_name, row.workflow_version)
        for row, route in zip(restarted, routes, strict=True)
        if route in ROUTED
    }


def no_step(run_id: str, vertex_id: str, steps_: Sequence[str]) -> NotFound:
    """`step_not_found`, with the run's steps close to `vertex_id` (else all of them) in the
    message and in `details` (`meant`, `steps`): front doors need not look them up."""
    meant = close_names(vertex_id, steps_)
    fix = did_you_mean(meant) or f"its steps: {', '.join(steps_)}"
    return NotFound(
        f"run {run_id} has no step {vertex_id}; {fix}",
        code="step_not_found",
        details={"meant": meant, "steps": list(steps_)},
    )


T = TypeVar("T")

CONFLICT_ATTEMPTS = 3
"""Runs of an action's transaction when the database rolls it back for a conflict."""
_TERMINAL = {s.value for s in TERMINAL_RUN_STATUSES}


class _RefusedMeanwhile(Exception):
    """An action found, under its runs' roots' locks, a start over or a purge's mark that
    committed after it had checked them: it is rolled back and tried again, which spares
    those runs."""


async def _check_refused_meanwhile(conn: AsyncConnection, rows: Sequence[Any]) -> None:
    """Raise `_RefusedMeanwhile` when a run of `rows` (retried in this transaction) was
    started over or its tree marked as being deleted since the retry checked it (read under
    their roots' locks, `restarts.started_over_meanwhile`): the next try spares it."""
    found = await restarts.started_over_meanwhile(conn, rows)
    if found.started_over or found.marked:
        raise _RefusedMeanwhile


def start_over_key(run_id: str) -> str:
    """The idempotency key of the run that starts `run_id` over (one per old run)."""
    return f"start-over:{run_id}"


class OperatorActionsStore(WorkQueue):
    """What operators do to runs. Every method takes `actor` (written to the run's log) and
    `tenant` (None: any tenant; else a run of another tenant is not found)."""

    async def _transaction(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run `work` in one write transaction; again (bounded) when the database rolled it
        back because it met another transaction (see `operator_actions`)."""
        for _ in range(CONFLICT_ATTEMPTS - 1):
            try:
                async with self._engines.write.begin() as conn:
                    return await work(conn)
            except DBAPIError as exc:
                if not sql.rolled_back_by_conflict(exc):
                    raise
        async with self._engines.write.begin() as conn:
            return await work(conn)

    async def _sparing_refused(
        self, work: Callable[[AsyncConnection], Awaitable[T]], *, tries: int
    ) -> T:
        """`_transaction(work)`, run again when `work` met a start over or a purge's mark that
        committed after it had checked its runs (`_RefusedMeanwhile`), at most `tries` times
        in all."""
        for _ in range(tries - 1):
            with contextlib.suppress(_RefusedMeanwhile):
                return await self._transaction(work)
        return await self._transaction(work)

    async def _visible_run(
        self, conn: AsyncConnection, run_id: str, tenant: str | None, *, lock: bool = False
    ) -> Any:
        row = await sql.run_state(conn, run_id, lock=lock)
        if row is None or (tenant is not None and row.tenant_id != tenant):
            raise sql.run_not_found(run_id)
        return row

    async def _settle(self, tx: results_.Tx) -> None:
        """What `complete` does last: count ended children on their spawners (closing joins,
        up a nested fan-out) and write the log lines this gathered."""
        for _ in range(MAX_NESTING):
            if not tx.ended:
                break
            batch, tx.ended = tx.ended, []
            await self._children_ended(tx, batch)
        if tx.ended:
            raise RuntimeError(f"fan-out nested deeper than {MAX_NESTING} levels")
        await results_.insert_logs(tx.conn, tx.logs, tx.now)
        tx.logs = []

    def _workflow_reader(self, conn: AsyncConnection) -> recovery.WorkflowOfRun:
        async def workflow_of(run_id: str) -> Workflow:
            return await self._workflow_of_run(conn, run_id)

        return workflow_of

    # ── retry ───────────────────────────────────────────────────────────────────────────────

    async def retry_runs(
        self,
        run_ids: Sequence[str],
        *,
        actor: str,
        tenant: str | None = None,
        action: Action = Action.RETRY,
        spare_finished: bool = False,
    ) -> RetryOutcome:
        """FAILED runs among `run_ids` run their FAILED steps again (and the steps held back
        when they failed); completed steps are kept. A retried child run stops being a dead
        letter: its parent's counters, join and status follow (see `recovery.reopen_parents`).
        Runs not FAILED, unknown or of another tenant are refused, not errors, and so are
        FAILED runs started over, or under a root run that was (`outcome.started_over`). With
        `spare_finished`, so is a child whose retry would reopen the join of an ancestor that
        had ended SUCCEEDED (`outcome.reopens` says which); without it, it is retried and
        `outcome.reopens` says what it reopened. FAILED runs whose tree retention (or an
        operator's purge) is deleting are refused too (`outcome.past_retention`)."""
        ids = list(dict.fromkeys(run_ids))

        async def work(conn: AsyncConnection) -> RetryOutcome:
            now = self._clock.now()
            outcome = RetryOutcome()
            states = await sql.run_states(conn, ids)
            candidates: list[str] = []
            for run_id in ids:
                row = states.get(run_id)
                if row is None or (tenant is not None and row.tenant_id != tenant):
                    outcome.refused[run_id] = None
                elif row.workflow_name in RESERVED_WORKFLOWS:
                    outcome.refused[run_id] = row.status
                    outcome.engine_owned[run_id] = await _engine_run_refusal(conn, row, "retry")
                elif row.status != RunStatus.FAILED.value:
                    outcome.refused[run_id] = row.status
                else:
                    candidates.append(run_id)
            candidates = await _spare_started_over(conn, [states[r] for r in candidates], outcome)
            candidates = await _spare_past_retention(
                conn, [states[r] for r in candidates], now, outcome
            )
            outcome.reopens = await self._reopens(conn, [states[r] for r in candidates])
            if spare_finished:
                for run_id in outcome.reopens:
                    outcome.refused[run_id] = RunStatus.FAILED.value
                candidates = [r for r in candidates if r not in outcome.reopens]
            # Read before the errors are cleared: they say why the joins failed.
            outcome.stuck = await retry_checks.stuck_joins(conn, candidates)
            # Steps before runs: the order a worker's flush locks them in.
            made_ready = await sql.ready_failed_steps(conn, candidates, now)
            outcome.steps = Counter({r: len(vertices) for r, vertices in made_ready.items()})
            reopened = await sql.reopen_failed_runs(conn, candidates, now)
            reopened_ids = {row.id for row in reopened}
            # The held steps after the runs: a claim that read a run as stopped holds its
            # steps back under a share lock of the run (`claims.hold`), so once this
            # transaction has the run's lock, every step held for it is PENDING here.
            released: dict[str, list[str]] = {}
            for chunk in sql.chunks(sorted(reopened_ids)):
                released |= await recovery.release_held(conn, chunk, now)
            outcome.held = Counter({r: len(vertices) for r, vertices in released.items()})
            outcome.retried = [r for r in candidates if r in reopened_ids]
            for run_id in set(candidates) - set(outcome.retried):  # retried concurrently
                outcome.refused[run_id] = await sql.current_status(conn, run_id)
            outcome.stuck = {r: j for r, j in outcome.stuck.items() if r in reopened_ids}
            called: dict[tuple[str, str, int], set[str]] = {}
            for run_id in outcome.retried:
                row = states[run_id]
                key = (row.tenant_id, row.workflow_name, row.workflow_version)
                called.setdefault(key, set()).update(
                    made_ready.get(run_id, ()), released.get(run_id, ())
                )
            # Read in the transaction (versions are cached, so mostly no read at all): once it
            # has committed, a lost database must not make a done retry answer "unavailable".
            for (tenant_id, name, version), vertices in called.items():
                workflow = (await self.get_version(name, version, conn=conn)).workflow
                outcome.called.append(RetriedSteps(tenant_id, workflow, frozenset(vertices)))
            resumed = await recovery.reopen_parents(
                conn, reopened, now, self._workflow_reader(conn)
            )
            # Last, under the roots' locks: a start over or a purge's mark that committed since
            # the checks above (PostgreSQL) rolls this back, and the next try spares its run.
            await _check_refused_meanwhile(conn, [states[r] for r in outcome.retried])
            lines = await self._reopened_lines(conn, resumed, action, actor)
            lines += [
                action_line(
                    r,
                    action,
                    actor,
                    _retry_message(
                        actor, outcome.steps[r], outcome.held[r], outcome.reopens.get(r)
                    ),
                )
                for r in outcome.retried
            ]
            await results_.insert_logs(conn, lines, now)
            return outcome

        # Each try that meets a new start over finds one more of `ids` started over for good,
        # so one more try than there are runs always ends.
        return await self._sparing_refused(work, tries=len(ids) + 1)

    async def retry_preview(self, run_id: str, *, tenant: str | None = None) -> RetryOutcome:
        """What `retry_runs([run_id])` would do, read without changing anything (a confirm
        dialog asks it first): `refused` as it would be, else the steps it would make READY
        (`steps`, `held`, `called`), the ancestor it would reopen and the joins that would fail
        again at once. The same checks as the retry's, so the preview says what the retry would."""
        async with self._engines.read.connect() as conn:
            outcome = RetryOutcome()
            row = (await sql.run_states(conn, [run_id])).get(run_id)
            if row is None or (tenant is not None and row.tenant_id != tenant):
                outcome.refused[run_id] = None
                return outcome
            if row.workflow_name in RESERVED_WORKFLOWS:
                outcome.refused[run_id] = row.status
                outcome.engine_owned[run_id] = await _engine_run_refusal(conn, row, "retry")
                return outcome
            if row.status != RunStatus.FAILED.value:
                outcome.refused[run_id] = row.status
                return outcome
            if not await _spare_started_over(conn, [row], outcome):
                return outcome
            now = self._clock.now()
            if not await _spare_past_retention(conn, [row], now, outcome):
                return outcome
            outcome.reopens = await self._reopens(conn, [row])
            outcome.stuck = await retry_checks.stuck_joins(conn, [run_id])
            errors = await sql.failed_errors(conn, run_id)
            failed = list(errors)
            outcome.failed_errors = {run_id: errors}
            held = await sql.held_vertices(conn, run_id)
            outcome.steps = Counter({run_id: len(failed)})
            outcome.held = Counter({run_id: len(held)})
            version = await self.get_version(row.workflow_name, row.workflow_version, conn=conn)
            vertices = frozenset(failed) | frozenset(held)
            outcome.called.append(RetriedSteps(row.tenant_id, version.workflow, vertices))
            return outcome

    async def batch_retry_count(
        self, selection: listing.RunFilter, *, limit: int
    ) -> BatchRetryCount:
        """What a batch retry of the runs `selection` matches would take, read without
        changing anything: how many match, counted up to `limit + 1` (one statement over at
        most that many rows of the list's index range: more than `limit` says the batch would
        be truncated), the vertices of the FAILED and held steps of the newest `limit`, by
        tenant and workflow version (what it would run again: its breaker warnings), which
        of those runs failed for a cause the workflow or the input makes (one statement over
        the same runs' FAILED steps: their retry fails the same way), and which have joins
        that would fail again at once (one grouped statement over the same runs' steps, the
        rule of the batch's `stuck`). A deployment's `gradual_deploy` runs are left out: the
        batch skips them (`deployment_run`) and takes them beside its `limit`, not in it.
        The FAILED runs whose tree is being deleted are counted as skipped
        (`past_retention`), as the batch skips them."""
        retriable = listing.runs.c.workflow_name.not_in(RESERVED_WORKFLOWS)
        matching = listing.newest_matching(selection, limit + 1).where(retriable).subquery()
        return await self._retry_count(
            listing.newest_matching(selection, limit).where(retriable), matching
        )

    async def batch_retry_count_of(
        self, run_ids: Sequence[str], *, tenant: str | None
    ) -> BatchRetryCount:
        """What a batch retry of `run_ids` (within `tenant` when set) would take, read as
        `batch_retry_count` reads a filter's: besides, the ids it would skip as unknown (or of
        another tenant) and as a deployment's own `gradual_deploy` runs."""
        ids = list(dict.fromkeys(run_ids))
        chosen = listing.runs_by_id(ids, tenant)
        async with self._engines.read.connect() as conn:
            names = chosen.with_only_columns(listing.runs.c.id, listing.runs.c.workflow_name)
            found = {str(row.id): row.workflow_name for row in (await conn.execute(names)).all()}
        engine_owned = [run_id for run_id in ids if found.get(run_id) in RESERVED_WORKFLOWS]
        unknown = [run_id for run_id in ids if run_id not in found]
        retriable = chosen.where(listing.runs.c.workflow_name.not_in(RESERVED_WORKFLOWS))
        counted = await self._retry_count(retriable, retriable.subquery())
        named = {SKIPPED_UNKNOWN: unknown, SKIPPED_ENGINE_OWNED: engine_owned}
        return dataclasses.replace(
            counted,
            unknown=len(unknown),
            engine_owned=len(engine_owned),
            skipped_ids={
                **counted.skipped_ids,
                **{kind: listed[:SKIPPED_SHOWN] for kind, listed in named.items() if listed},
            },
        )

    async def start_over_preview(self, run_id: str, *, tenant: str | None = None) -> StartOverLook:
        """What `start_over` would answer now, changing nothing: the run an earlier start
        over created (`before`, `created=False`), or the version the new run would run and
        what became of it (`facts`, as `rerun_facts` reads them). Its refusals are raised as
        `start_over` raises them, from the same checks (the quota's aside: a preview says the
        run could start; the start over itself counts it). The run's row is read once."""
        async with self._engines.read.connect() as conn:
            old = await self._visible_run(conn, run_id, tenant)
            existing = await sql.run_id_by_key(conn, start_over_key(run_id))
            if existing is not None:
                before = await _started_before(conn, existing, old.status)
                return StartOverLook(old.status, old.workflow_version, before=before)
            await _refuse_engine_run(conn, old, "start over")
            _check_restartable(old)
            facts = await deployment_rows.rerun_facts_of(conn, old)
        return StartOverLook(old.status, old.workflow_version, facts=facts)

    async def _retry_count(self, chosen: Any, matching: Any) -> BatchRetryCount:
        """`batch_retry_count`'s reads, of the runs `chosen` selects (at most the batch's
        `limit`), `matching` the subquery whose rows are counted as the runs matched."""
        newest = chosen.add_columns(
            listing.runs.c.status,
            listing.runs.c.parent_run_id,
            listing.runs.c.route,
            listing.runs.c.restarted_from,
            listing.runs.c.root_run_id,
        ).subquery()
        failed = newest.c.status == RunStatus.FAILED.value
        spared = retry_checks.under_succeeded(newest.c.parent_run_id)
        restarted = restarts.root_started_over(newest.c.id, newest.c.root_run_id)
        past = past_retention.root_past_retention(newest.c.id, newest.c.root_run_id)
        # The batch skips the runs not FAILED, the FAILED ones started over (2), those whose
        # tree is being deleted (3) and those under a SUCCEEDED run (1); the rest is what
        # it would take, and what its warnings are read from.
        skips = select(
            newest.c.id,
            newest.c.root_run_id,
            newest.c.created_at,
            newest.c.status,
            case((failed & restarted, 2), (failed & past, 3), (failed & spared, 1), else_=0).label(
                "spared"
            ),
        ).subquery()
        # The newest few of each kind the batch skips, to name them.
        ranked = (
            select(
                skips.c.id,
                skips.c.root_run_id,
                skips.c.status,
                skips.c.spared,
                func.row_number()
                .over(
                    partition_by=(skips.c.status, skips.c.spared),
                    order_by=(skips.c.created_at.desc(), skips.c.id.desc()),
                )
                .label("rank"),
            )
            .where(or_(skips.c.status != RunStatus.FAILED.value, skips.c.spared != 0))
            .subquery()
        )
        named = (
            select(ranked)
            .where(ranked.c.rank <= SKIPPED_SHOWN)
            .order_by(ranked.c.status, ranked.c.spared, ranked.c.rank)
        )
        taken = (
            select(
                newest.c.id,
                newest.c.tenant_id,
                newest.c.workflow_name,
                newest.c.workflow_version,
                newest.c.created_at,
                newest.c.parent_run_id,
                newest.c.route,
                newest.c.restarted_from,
            )
            .where(failed, ~spared, ~restarted, ~past)
            .subquery()
        )
        vertices = (
            select(
                taken.c.tenant_id,
                taken.c.workflow_name,
                taken.c.workflow_version,
                steps.c.vertex_id,
            )
            .select_from(taken.join(steps, steps.c.run_id == taken.c.id))
            .where(or_(steps.c.status == StepStatus.FAILED.value, recovery.HELD))
            .distinct()
        )
        async with self._engines.read.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(matching))).scalar_one()
            grouped = await conn.execute(
                select(skips.c.status, skips.c.spared, func.count().label("n")).group_by(
                    skips.c.status, skips.c.spared
                )
            )
            taking, under_succeeded, not_failed = 0, 0, Counter[str]()
            started_over, past_cutoff = 0, 0
            for row in grouped.all():
                if row.status != RunStatus.FAILED.value:
                    not_failed[row.status] += int(row.n)
                elif row.spared == 2:
                    started_over += int(row.n)
                elif row.spared == 3:
                    past_cutoff += int(row.n)
                elif row.spared:
                    under_succeeded += int(row.n)
                else:
                    taking += int(row.n)
            called: dict[tuple[str, str, int], set[str]] = {}
            for row in (await conn.execute(vertices)).all():
                key = (row.tenant_id, row.workflow_name, row.workflow_version)
                called.setdefault(key, set()).add(row.vertex_id)
            found = []
            for (tenant_id, name, version), ids in sorted(called.items()):
                workflow = (await self.get_version(name, version, conn=conn)).workflow
                found.append(RetriedSteps(tenant_id, workflow, frozenset(ids)))
            fix_first = await retry_checks.fix_first_runs(conn, taken)
            stuck = await retry_checks.stuck_runs(conn, taken)
            versions = await rerun_groups(conn, taken)
            skipped_ids, restarted_rows = _skipped_ids((await conn.execute(named)).all())
            new_runs = await restarts.started_over(conn, restarted_rows)
        return BatchRetryCount(
            int(count),
            found,
            fix_first,
            taking=taking,
            under_succeeded=under_succeeded,
            started_over=started_over,
            past_retention=past_cutoff,
            not_failed=dict(not_failed),
            versions=versions,
            stuck=stuck,
            skipped_ids=skipped_ids,
            new_runs={run_id: found.new_run_id for run_id, found in new_runs.items()},
        )

    async def _reopened_lines(
        self,
        conn: AsyncConnection,
        resumed: Sequence[tuple[str, str, int]],
        action: Action,
        actor: str,
    ) -> list[LogLine]:
        """A line in each parent's log saying what reopened its join (`reopen_parents`'
        answer): otherwise its log shows the join fail, then run again, with no cause."""
        lines = []
        for parent, spawner, count in resumed:
            join = retry_checks.join_of(await self._workflow_of_run(conn, parent), spawner)
            children = "child" if count == 1 else "children"
            message = (
                f"{action.value.replace('_', ' ')} by {actor} of {count:,} FAILED {children} "
                f"of {spawner!r}: the join {join!r} reopens"
            )
            lines.append(action_line(parent, action, actor, message, join))
        return lines

    async def _reopens(
        self, conn: AsyncConnection, rows: Sequence[Any]
    ) -> dict[str, ReopenedAncestor]:
        """The runs of `rows` whose retry reopens an ancestor that had ended SUCCEEDED, with
        that ancestor and its join."""
        found = await retry_checks.succeeded_ancestors(conn, rows)
        workflows: dict[str, Workflow] = {}
        reopens = {}
        for run_id, (ancestor, spawner) in found.items():
            if ancestor not in workflows:  # a batch's siblings share their parent
                workflows[ancestor] = await self._workflow_of_run(conn, ancestor)
            join = retry_checks.join_of(workflows[ancestor], spawner)
            reopens[run_id] = ReopenedAncestor(ancestor, join)
        return reopens

    # ── resolve ─────────────────────────────────────────────────────────────────────────────

    async def resolve_step(
        self,
        run_id: str,
        vertex_id: str,
        output: Any,
        *,
        actor: str,
        tenant: str | None = None,
    ) -> ResolveOutcome:
        """An operator supplies the output of a FAILED step: it becomes RESOLVED, its
        dependants proceed and the run continues, or succeeds when nothing is left (a child
        run then counts as succeeded for its parent's join). A run with another FAILED step
        stays FAILED. The same output on a step already RESOLVED is a no-op. A run whose tree
        is being deleted is refused (`run_past_retention`)."""

        async def work(conn: AsyncConnection) -> ResolveOutcome:
            now = self._clock.now()
            run = await self._visible_run(conn, run_id, tenant)
            await _refuse_engine_run(conn, run, "resolve")
            step = await sql.step_for_update(conn, run_id, vertex_id)
            if step is None:
                raise no_step(run_id, vertex_id, await sql.vertex_ids(conn, run_id))
            if step.status == StepStatus.RESOLVED.value and step.output == output:
                return ResolveOutcome(False, run.status)
            _check_resolvable(run, step, vertex_id)
            await past_retention.refuse_past_retention(conn, run, now, "resolve")
            await sql.resolve_step(conn, step.id, output, now)
            tx = results_.Tx(conn, now, CompletionReport())
            reopened: list[recovery.JoinReopened] = []
            lines: list[LogLine] = []
            if run.status == RunStatus.FAILED.value:
                resumed = await self._resume_if_clear(conn, run, step.id, now, reopened)
                lines += await self._reopened_lines(conn, resumed, Action.RESOLVE, actor)
                lines += _further_up_lines(run_id, resumed, reopened, Action.RESOLVE, actor)
            workflow = await self._workflow_of_run(conn, run_id)
            await results_.steps_done(tx, [results_.DoneStep(run_id, vertex_id, workflow, output)])
            message = _resolve_message(vertex_id, actor, reopened)
            lines.insert(0, action_line(run_id, Action.RESOLVE, actor, message, vertex_id))
            await results_.insert_logs(conn, lines, now)
            await self._settle(tx)
            # Last, under the root's lock (`restarts`): the refusal rolls the resolve back, and
            # so does a purge's mark committed since the check above (then refused anew).
            if await restarts.refuse_started_over(conn, run, "resolve"):
                raise _RefusedMeanwhile
            status = await sql.current_status(conn, run_id)
            return ResolveOutcome(True, status, tuple(reopened))

        return await self._sparing_refused(work, tries=2)

    async def _resume_if_clear(
        self,
        conn: AsyncConnection,
        run: Any,
        step_id: int,
        now: float,
        found: list[recovery.JoinReopened],
    ) -> list[tuple[str, str, int]]:
        """A FAILED run resumes once its last FAILED step is resolved; otherwise it stays
        FAILED and shows the error of a step that still is. Answers `reopen_parents`' (the
        parents' joins that reopened), and adds every join it reopened up the tree to
        `found`."""
        others = await sql.other_failed_steps(conn, run.id, step_id)
        if others:
            await sql.point_error_at(conn, run.id, others[0].vertex_id, others[0].error)
            return []
        await sql.resume_resolved_run(conn, run.id, now)
        # Before its end is counted again (in `_settle`), the parent stops counting it failed.
        resumed = await recovery.reopen_parents(
            conn, [run], now, self._workflow_reader(conn), found=found
        )
        await recovery.release_held(conn, [run.id], now)
        return resumed

    # ── start over ──────────────────────────────────────────────────────────────────────────

    async def start_over(
        self, run_id: str, *, actor: str, tenant: str | None = None
    ) -> StartOverOutcome:
        """A new run of an ended run's workflow version, with its input, tenant, timeout tier
        and pinned child versions, `restarted_from` the old run. Idempotent: the key
        `start-over:<old id>` names the one run a start over creates."""
        key = start_over_key(run_id)
        created_steps: list[int] = []

        async def work(conn: AsyncConnection) -> StartOverOutcome:
            now = self._clock.now()
            # Locked first, before anything is read: a retry, resolve or reprocess of it (or
            # of a run under it) that committed first is read here as it left the run, and
            # one that commits later finds this start over (`engine.store.restarts`).
            old = await self._visible_run(conn, run_id, tenant, lock=True)
            existing = await sql.run_id_by_key(conn, key)
            if existing is not None:
                return await _started_before(conn, existing, old.status)
            await _refuse_engine_run(conn, old, "start over")
            _check_restartable(old)
            record = run_record(await sql.whole_run(conn, run_id))
            quota = await settings_.read_quota(conn, record.tenant_id)
            if quota is not None and quota[1] >= quota[0]:
                max_runs, used_runs = quota
                raise QuotaExceeded(record.tenant_id, used_runs=used_runs, max_runs=max_runs)
            version = await self.get_version(record.workflow_name, record.workflow_version)
            new_id = str(uuid.uuid4())
            if not await sql.insert_run_once(
                conn, _restart_row(record, version, new_id, key, now, actor=actor)
            ):
                existing = await sql.run_id_by_key(conn, key)
                return await _started_before(conn, str(existing), old.status)
            await sql.count_against_quota(conn, record.tenant_id)
            rows = step_rows(new_id, record.tenant_id, version.workflow, now)
            await conn.execute(insert(steps), rows)
            lines = [
                LogLine(
                    new_id,
                    "info",
                    created_line(version, RunRoute.START_OVER.value, actor),
                    data=created_data(actor),
                ),
                action_line(
                    new_id, Action.START_OVER, actor, f"started over by {actor} from run {run_id}"
                ),
                action_line(
                    run_id, Action.START_OVER, actor, f"started over by {actor} as run {new_id}"
                ),
            ]
            await results_.insert_logs(conn, lines, now)
            created_steps[:] = [len(rows)]
            return StartOverOutcome(new_id, True, old.status)

        outcome = await self._transaction(work)
        if outcome.created:
            await self._grew(1 + sum(created_steps))
        return outcome

    # ── reprocess ───────────────────────────────────────────────────────────────────────────

    async def reprocess_run(
        self, run_id: str, *, actor: str, tenant: str | None = None
    ) -> ReprocessOutcome:
        """The dead-lettered children of `run_id` run again, with those of nested fan-outs
        under them; joins reopen up to the root (see `engine.store.recovery`), which the
        outcome names (`reopened`), and the logs say: the run's, with who did it and each run
        that had ended and runs again, each ancestor's whose join reopened, and each revived
        child's (nested ones too), naming the run reprocessed. Refused for a
        CANCELLED run; none to revive is a no-op. A run whose tree is being deleted is
        refused (`run_past_retention`), before it reads its children: some may be gone."""

        async def work(conn: AsyncConnection) -> ReprocessOutcome:
            now = self._clock.now()
            run = await self._visible_run(conn, run_id, tenant)
            await _refuse_engine_run(conn, run, "reprocess")
            if run.status == RunStatus.CANCELLED.value:
                raise RunCancelled(
                    f"run {run_id} is CANCELLED; its children are not run again", run_id=run.id
                )
            await past_retention.refuse_past_retention(conn, run, now, "reprocess")
            done = await recovery.reprocess(
                conn, run_id, now, self._workflow_reader(conn), self._version_reader()
            )
            if done.revived:
                # Refused only when it would run something (raising rolls the revival back):
                # with no dead letter it is the no-op it always was. A purge's mark committed
                # since the check above, read under the root's lock there, rolls it back too.
                if await restarts.refuse_started_over(conn, run, "reprocess"):
                    raise _RefusedMeanwhile
                lines = [
                    action_line(run_id, Action.REPROCESS, actor, _reprocess_message(actor, done))
                ]
                # An ancestor's log says what reopened its join, as a retry's does: otherwise
                # it shows the join close, then run again, with no cause.
                lines += [
                    _below_line(run_id, join, Action.REPROCESS, actor)
                    for join in done.reopened
                    if join.ancestor
                ]
                # Each revived child's log says who made it run again, as a cancel's do:
                # otherwise it goes from its failure to a new attempt with no cause. One
                # insert for them all, however many thousands.
                said = f"reprocess by {actor} of run {run_id} above: this dead letter runs again"
                lines += [
                    action_line(child, Action.REPROCESS, actor, said) for child in done.children
                ]
                await results_.insert_logs(conn, lines, now)
            return ReprocessOutcome(
                done.revived, await sql.current_status(conn, run_id), done.reopened
            )

        return await self._sparing_refused(work, tries=2)

    async def reprocess_preview(
        self, run_id: str, *, tenant: str | None = None
    ) -> ReprocessOutcome:
        """What `reprocess_run(run_id)` would do, read without changing anything (a confirm
        step asks it first; `engine.store.reprocess_plan`): `refused` the status of a run it
        would refuse (CANCELLED; a `gradual_deploy` run or a run whose tree is being deleted,
        with the refusal's words), else the children it would revive and the joins it would
        reopen. Unknown, or another tenant's: `NotFound(code="run_not_found")`."""
        async with self._engines.read.connect() as conn:
            row = await self._visible_run(conn, run_id, tenant)
            if row.workflow_name in RESERVED_WORKFLOWS:
                said = await _engine_run_refusal(conn, row, "reprocess")
                return ReprocessOutcome(0, row.status, refused=row.status, refusal=said.message)
            if row.status == RunStatus.CANCELLED.value:
                return ReprocessOutcome(0, row.status, refused=row.status)
            now = self._clock.now()
            past = (await past_retention.past_retention(conn, [row], now)).get(row.id)
            if past is not None:
                said = past_retention.past_retention_refusal(row.id, row.status, past, "reprocess")
                return ReprocessOutcome(0, row.status, refused=row.status, refusal=said.message)

            async def workflow_of(run: str) -> Workflow:
                return await self._workflow_of_run(conn, run)

            planned = await reprocess_plan.plan(conn, run_id, workflow_of, self._version_reader())
            found = (await restarts.started_over(conn, [row])).get(row.id)
            if planned.revived and found is not None:  # as the reprocess: only when it acts
                said = restarts.started_over_refusal(row.id, row.status, found, "reprocess")
                return ReprocessOutcome(0, row.status, refused=row.status, refusal=said.message)
            return ReprocessOutcome(planned.revived, row.status, planned.reopened)

    def _version_reader(self) -> recovery.WorkflowOfVersion:
        async def version_of(name: str, version: int) -> Workflow:
            return (await self.get_version(name, version)).workflow

        return version_of

    # ── cancel ──────────────────────────────────────────────────────────────────────────────

    async def cancel_run(
        self,
        run_id: str,
        *,
        actor: str,
        tenant: str | None = None,
        deployment_actor: str | None = None,
    ) -> CancelOutcome:
        """The run and every descendant still going end CANCELLED, in a fixed number of
        statements however many children there are. Their open steps are CANCELLED; steps in
        flight finish but their results are dropped (their claims are no longer live).
        Descendants that had already ended keep their status. A cancelled child of a run that
        goes on counts as cancelled on its spawner, which may close the join (MERGE's rules
        decide). Already CANCELLED: a no-op; SUCCEEDED or FAILED: refused. A deployment the
        cancel aborts records `deployment_actor` (`actor` when None) as who stopped it."""

        async def work(conn: AsyncConnection) -> CancelOutcome:
            now = self._clock.now()
            run = await self._visible_run(conn, run_id, tenant)
            if run.status == RunStatus.CANCELLED.value:
                return CancelOutcome(0, 0, run.status)
            if run.status in _TERMINAL:
                raise _ended(run_id, run.status)
            steps_cancelled, cancelled = await self._cancel_tree(conn, run_id, now)
            if run_id not in {row.id for row in cancelled}:  # it ended meanwhile
                raise _ended(run_id, await sql.current_status(conn, run_id))
            aborted = await self._after_cancel(conn, run_id, deployment_actor or actor)
            below = len(cancelled) - 1
            said = f"cancelled by {actor} ({below} runs under it)"
            if aborted is not None:
                said += f"; {aborted_words(aborted)}"
            lines = [
                action_line(run_id, Action.CANCEL, actor, said),
                *(
                    action_line(
                        row.id, Action.CANCEL, actor, f"cancelled by {actor} with run {run_id}"
                    )
                    for row in cancelled
                    if row.id != run_id
                ),
            ]
            await results_.insert_logs(conn, lines, now)
            stopped = sql.stopped_ids(run_id, cancelled)
            return CancelOutcome(
                len(cancelled), steps_cancelled, RunStatus.CANCELLED.value, stopped, aborted
            )

        return await self._transaction(work)

    async def _cancel_tree(
        self, conn: AsyncConnection, run_id: str, now: float
    ) -> tuple[int, list[Any]]:
        """Cancel `run_id` and its descendants still going (their open steps too), counting
        each cancelled child on its parent's spawner. Returns (steps cancelled, the runs
        cancelled: id, parent_run_id, parent_vertex_id)."""
        tree = sql.run_tree(run_id)
        steps_cancelled = await sql.cancel_open_steps(conn, tree, now)
        cancelled = await sql.cancel_live_runs(conn, tree, now)
        tx = results_.Tx(conn, now, CompletionReport())
        tx.ended = [
            EndedChild(row.parent_run_id, row.parent_vertex_id, RunStatus.CANCELLED.value)
            for row in cancelled
            if row.parent_run_id is not None
        ]
        await self._settle(tx)
        return steps_cancelled, cancelled

    async def _after_cancel(
        self, conn: AsyncConnection, run_id: str, actor: str
    ) -> DeploymentRecord | None:
        """Called in a cancel's transaction once `run_id` is cancelled (the deployments role
        aborts the deployment a cancelled system run drove); the deployment aborted, if any."""
        return None


def aborted_words(record: DeploymentRecord) -> str:
    """What a cancel of the `gradual_deploy` run driving `record` did to it, in words that
    name it (the run's log, the cancel's answer): the operator cancelled a run and should
    hear that a deployment ended with it."""
    return (
        f"deployment {record.id} ({record.workflow_name} v{record.candidate_version}), which "
        f"it drove, is aborted: {routing_after(record)}"
    )


async def _engine_run_refusal(conn: AsyncConnection, row: Any, action: str) -> WrongState:
    """The refusal of `action` on the engine's own run `row` (a `gradual_deploy` run), naming
    the deployment it drives (`deployment_rows.deployment_run_refusal`)."""
    record = await deployment_rows.driven_by(conn, row.id)
    return deployment_rows.deployment_run_refusal(row.id, row.status, record, action)


async def _refuse_engine_run(conn: AsyncConnection, row: Any, action: str) -> None:
    """Refuse `action` on a `gradual_deploy` run: its steps are a deployment's stage checks,
    whose record an operator's retry, resolve, start over or reprocess would rewrite (its end
    time, a stage "resolved") without changing the deployment. Cancel stays: it aborts the
    deployment, which is what it says."""
    if row.workflow_name in RESERVED_WORKFLOWS:
        raise await _engine_run_refusal(conn, row, action)


async def _started_before(conn: AsyncConnection, new_id: str, old_status: str) -> StartOverOutcome:
    """A start over of a run already started over as `new_id`: that run, with its status now
    (the answer says whether to look there or act on it)."""
    return StartOverOutcome(new_id, False, old_status, await sql.current_status(conn, new_id))


SPARED_KINDS = {2: SKIPPED_STARTED_OVER, 3: SKIPPED_PAST_RETENTION, 1: SKIPPED_UNDER_SUCCEEDED}
"""`_retry_count`'s codes of the FAILED runs a batch skips, as `skipped_ids` keys them."""


def _skipped_ids(rows: Sequence[Any]) -> tuple[dict[str, list[str]], list[Any]]:
    """The ids of `_retry_count`'s named skipped runs by kind (`BatchRetryCount.skipped_ids`),
    and the rows of those started over (whose new runs are read next)."""
    found: dict[str, list[str]] = {}
    restarted = []
    for row in rows:
        failed = row.status == RunStatus.FAILED.value
        kind = SPARED_KINDS[row.spared] if failed else str(row.status)
        found.setdefault(kind, []).append(str(row.id))
        if kind == SKIPPED_STARTED_OVER:
            restarted.append(row)
    return found, restarted


async def _spare_started_over(
    conn: AsyncConnection, rows: Sequence[Any], outcome: RetryOutcome
) -> list[str]:
    """The ids of the FAILED runs of `rows` a retry may take: not those whose root was started
    over (their steps and calls would run twice), which go to `outcome.refused` and
    `outcome.started_over` with their refusal."""
    found = await restarts.started_over(conn, rows)
    for run_id, start in found.items():
        outcome.refused[run_id] = RunStatus.FAILED.value
        outcome.started_over[run_id] = restarts.started_over_refusal(
            run_id, RunStatus.FAILED.value, start, "retry"
        )
    return [row.id for row in rows if row.id not in found]


async def _spare_past_retention(
    conn: AsyncConnection, rows: Sequence[Any], now: float, outcome: RetryOutcome
) -> list[str]:
    """The ids of the FAILED runs of `rows` a retry may take: not those whose tree is being
    deleted (`past_retention`: a retry would reopen what is left of it), which go to
    `outcome.refused` and `outcome.past_retention` with their refusal."""
    found = await past_retention.past_retention(conn, rows, now)
    for run_id, past in found.items():
        outcome.refused[run_id] = RunStatus.FAILED.value
        outcome.past_retention[run_id] = past_retention.past_retention_refusal(
            run_id, RunStatus.FAILED.value, past, "retry"
        )
    return [row.id for row in rows if row.id not in found]


def _ended(run_id: str, status: str) -> WrongState:
    return WrongState(
        f"run {run_id} has already ended ({status})", state=status, code="run_ended", run_id=run_id
    )


def _check_restartable(old: Any) -> None:
    if old.status not in _TERMINAL:
        raise WrongState(
            f"run {old.id} is {old.status}; only an ended run can be started over",
            state=old.status,
            code="run_not_ended",
            run_id=old.id,
        )
    if old.parent_run_id is not None:
        # A child's context (its item and index) only exists under its parent's spawner: a new
        # run of it alone would be no one's child, its result joined nowhere. The request is
        # well formed; this run refuses the action (409, as a wrong state), saying what does.
        instead = (
            f"retry it, or start over its parent {old.parent_run_id}"
            if old.status == RunStatus.FAILED.value
            else f"start over its parent {old.parent_run_id} instead"
        )
        raise WrongState(
            f"run {old.id} is a child run, which cannot be started over alone; {instead}",
            state=old.status,
            code="start_over_child_run",
            run_id=old.id,
        )


def _check_resolvable(run: Any, step: Any, vertex_id: str) -> None:
    if run.status == RunStatus.CANCELLED.value:
        raise RunCancelled(f"run {run.id} is CANCELLED", run_id=run.id)
    if step.status == StepStatus.RESOLVED.value:
        raise WrongState(
            f"step {vertex_id} was already resolved with another output",
            state=step.status,
            code="step_already_resolved",
            run_id=run.id,
            vertex_id=vertex_id,
        )
    if step.status != StepStatus.FAILED.value:
        raise WrongState(
            f"step {vertex_id} is {step.status}; only a FAILED step can be resolved",
            state=step.status,
            code="step_not_failed",
            run_id=run.id,
            vertex_id=vertex_id,
        )


def _resolve_message(vertex_id: str, actor: str, reopened: Sequence[recovery.JoinReopened]) -> str:
    """The resolved run's log line: who, and (as a retry's says it) the run above that had
    ended SUCCEEDED and runs again from its join."""
    message = f"step {vertex_id} resolved by {actor} with an operator-supplied output"
    finished = next((j for j in reopened if j.ended == RunStatus.SUCCEEDED.value), None)
    if finished is not None:
        join = retry_checks.join_of(finished.workflow, finished.spawner)
        message += f"; {_reopened_clause(f'run {finished.run_id}', join)}"
    return message


def _further_up_lines(
    run_id: str,
    resumed: Sequence[tuple[str, str, int]],
    reopened: Sequence[recovery.JoinReopened],
    action: Action,
    actor: str,
) -> list[LogLine]:
    """A line in the log of each ancestor above the parents (`resumed`, which
    `_reopened_lines` tells) whose join reopened because `run_id` below runs again, in the
    words a reprocess uses for such an ancestor."""
    parents = {parent for parent, _, _ in resumed}
    return [
        _below_line(run_id, join, action, actor) for join in reopened if join.run_id not in parents
    ]


def _below_line(run_id: str, join: recovery.JoinReopened, action: Action, actor: str) -> LogLine:
    """The line in an ancestor's log saying its join reopens because `run_id`, below it, runs
    again by `actor`'s `action` (a reprocess, a resolve)."""
    name = retry_checks.join_of(join.workflow, join.spawner)
    said = f"{action.value} by {actor} of run {run_id} below: the join {name!r} reopens"
    return action_line(join.run_id, action, actor, said, name)


def _retry_message(actor: str, failed: int, held: int, reopens: ReopenedAncestor | None) -> str:
    message = f"retry by {actor}: {sql.retried_words(failed, held)}"
    if reopens is not None:
        message += f"; {_reopened_clause(f'run {reopens.run_id}', reopens.join)}"
    return message


def _reprocess_message(actor: str, done: recovery.Reprocessed) -> str:
    """The reprocessed run's log line: who, how many children, and each run that had ended
    SUCCEEDED and runs again, with the steps after its join that run a second time."""
    message = f"reprocess by {actor}: {recovery.revived_words(done.revived)} again"
    for join in done.reopened:
        if join.ended == RunStatus.SUCCEEDED.value:
            who = f"run {join.run_id}" if join.ancestor else "the run"
            name = retry_checks.join_of(join.workflow, join.spawner)
            message += f"; {_reopened_clause(who, name)}"
            again = [vertex for vertex in join.again if vertex != name]
            if again:
                message += f" ({', '.join(again)} run a second time)"
    return message


def _reopened_clause(who: str, join: str) -> str:
    """A run that had SUCCEEDED and runs again, as a retry's and a reprocess's log say it."""
    return f"{who}, which had SUCCEEDED, runs again from its join {join!r}"


def _restart_row(
    record: Any, version: Any, new_id: str, key: str, now: float, *, actor: str
) -> dict[str, Any]:
    return {
        "id": new_id,
        "workflow_name": record.workflow_name,
        "workflow_version": record.workflow_version,
        "definition_hash": version.definition_hash,
        "tenant_id": record.tenant_id,
        "status": RunStatus.RUNNING.value,
        "timeout_tier": record.timeout_tier,
        "input": record.input,
        "output": None,
        "error": None,
        "steps_remaining": len(version.workflow.vertices),
        "created_at": now,
        "started_at": now,
        "ended_at": None,
        "idempotency_key": key,
        "root_run_id": new_id,
        "restarted_from": record.id,
        # Its version is the old run's, whatever routing would give now: recorded as such, so
        # a running deployment's stage checks (which count `candidate` and `serving` runs) do
        # not take an operator's start over for a new submission.
        "route": RunRoute.START_OVER.value,
        "pinned_versions": record.pinned_versions,
        "created_by": actor,
    }
