"""The work-queue role of the durable store: claim, renew, requeue, complete.

The store is both the source of truth and the work queue (docs/architecture.md,
'The store as the queue'); only `engine.store` talks SQL.

Claiming. Ready steps are claimed in batches by atomic statements (one for the tenants'
shares and one for the fill, see `engine.store.claims`):

    UPDATE step SET status='RUNNING', claim_token=<batch>||id, lease_expires_at=…,
                    claimed_by=<the worker's service id>
    WHERE id IN (SELECT id FROM step WHERE status='READY' AND not_before <= now
                 [AND tenant_id = …] ORDER BY created_at, id LIMIT n
                 FOR UPDATE OF step SKIP LOCKED)
    RETURNING …

On PostgreSQL `FOR UPDATE SKIP LOCKED` lets concurrent workers claim disjoint rows without
waiting; on SQLite the clause compiles away and the statement is atomic because SQLite runs
one writer at a time (write transactions begin IMMEDIATE, see `engine.store.db`).

Results. A result is written with `WHERE id=… AND claim_token=… AND status='RUNNING'`: only
the holder of a live claim can record it, a completed step is never overwritten, and a late
result from an expired claim matches no row and is dropped. The same transaction decrements
the dependants' `deps_pending` (a dependant turns READY when it reaches 0) and the run's
`steps_remaining` (the run succeeds when it reaches 0), so no scan of the run's steps is needed.

Leases. A claim carries a lease; workers renew it while the step runs. `requeue_expired`
returns steps whose lease passed (their worker died) to READY, to run again: at-least-once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import children as fanout
from engine.store import claims, recovery
from engine.store import results as results_
from engine.store.children import EndedChild
from engine.store.core import (
    StoreCore,
    runs,
    steps,
)
from engine.store.models import (
    RunStatus,
    StepStatus,
)
from engine.store.records import (
    ClaimedStep,
    CompletionReport,
    LogLine,
    StepAwaitingChildren,
    StepFailed,
    StepResult,
    StepSucceeded,
)
from schemas.errors import BREAKER_KEY
from schemas.waiting import WAIT_MESSAGE_MAX_CHARS, WaitReason

GIVEN_BACK = "claim given back: its worker stopped; step requeued"
HELD_BACK = "claim given back: its run failed; the step waits for the run's retry"
LEASE_EXPIRED = "lease expired; step requeued"
LOST_LEASE_EXPIRED = "lease_expired"
"""A claimed step's execution ended without a result because its lease expired: its worker
was killed, crashed or hung mid-execution (a call it had in flight may have been sent)."""
LOST_WORKER_STOPPED = "worker_stopped"
"""Its worker stopped (a graceful stop) and gave the claim back mid-execution (idem)."""
LOST_RUN_FAILED = "run_failed"
"""Its run failed while it waited before its next attempt: the claim was given back held."""
LOST_REASONS = (LOST_LEASE_EXPIRED, LOST_WORKER_STOPPED, LOST_RUN_FAILED)
"""What the `lost` of a requeue's log line may say (the line a claim taken back writes:
`{"lost": reason, "execution": the step's attempts, "worker": its holder}`), which a step's
attempt history shows as the execution that ended without a result."""
STRANDED = "step held back while its run was stopped released: the run was reopened"
REOPENED_RECHECK_S = 600.0
"""How long after a run is reopened the reaper still looks for its held steps: far longer than
any transaction that could have read the run as stopped before the reopen committed."""
MAX_NESTING = 16
"""Fan-outs nest (a child can spawn); joins cascade upwards at most this deep per commit."""


RELEASE_BATCH = 1_000
"""Parked steps a breaker reset releases per transaction (`release_breaker_parks`)."""
MAX_RELEASE_BATCHES = 1_000
"""The most batches one reset releases: a million steps, the most children one fan-out may
start; a bound on the loop. Steps past it run at their own time, as before the reset."""


class WorkQueue(StoreCore):
    """The store as the work queue: claim, renew, requeue, complete."""

    async def ready_depth(self) -> int:
        """How many steps are READY (the backpressure signal)."""
        query = select(func.count()).select_from(steps).where(steps.c.status == "READY")
        async with self._engines.read.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    # ── the queue ───────────────────────────────────────────────────────────────────────────

    async def claim(
        self, limit: int, lease_s: float, worker: str | None = None
    ) -> list[ClaimedStep]:
        """Atomically claim up to `limit` due READY steps of RUNNING runs, recording `worker`
        (the claimer's service id, as its heartbeat names it) as their holder."""
        now = self._clock.now()
        batch = claims.new_batch()
        ring = self._tenant_ring
        # One transaction, even for a single statement: the follow-up reads (the outputs of
        # dependencies, the stopped-run backstop) must see the steps under the claim's row
        # locks, and a failure before COMMIT must leave no step claimed by nobody.
        async with self._engines.write.begin() as conn:
            tenants = await ring.turn(conn, limit)
            rows = await claims.claim_rows(
                conn, now, limit, lease_s, batch, tenants=tenants, worker=worker
            )
            ring.claimed(limit, len(rows))
            return await self._claimed(conn, rows)

    async def _claimed(self, conn: AsyncConnection, rows: list[Any]) -> list[ClaimedStep]:
        """The claimed `rows` as steps to execute, those of stopped runs held back."""
        if not rows:
            return []
        # Backstop: a step whose run stopped (a race with a failing flush on PostgreSQL)
        # is not executed; it goes back to PENDING until an operator resumes the run (to
        # READY when another transaction holds the run's lock: `claims.hold`).
        stopped = [row for row in rows if row.run_status != RunStatus.RUNNING.value]
        if stopped:
            held = await claims.hold(conn, stopped)
            rows = [row for row in rows if row.id not in held]
        # Only steps with dependencies read other steps' outputs (expressions may reference
        # ancestors only), so root steps — every child of a simple fan-out — need no read.
        needs_outputs = sorted(
            {row.run_id for row in rows if await self._has_dependencies(row, row.vertex_id)}
        )
        outputs = await results_.outputs_of(conn, needs_outputs) if needs_outputs else {}
        return [claims.claimed_step(row, outputs) for row in rows]

    async def _has_dependencies(self, run_row: Any, vertex_id: str) -> bool:
        version = await self.get_version(run_row.workflow_name, run_row.workflow_version)
        vertex = version.workflow.vertices.get(vertex_id)
        return vertex is None or bool(vertex.depends_on)

    async def renew(self, tokens: Iterable[str], lease_s: float) -> int:
        """Extend the leases of live claims; returns how many are still held."""
        token_list = list(tokens)
        if not token_list:
            return 0
        statement = (
            update(steps)
            .where(steps.c.id.in_(_live(token_list).scalar_subquery()))
            .values(lease_expires_at=self._clock.now() + lease_s)
        )
        async with self._engines.write.begin() as conn:
            return (await conn.execute(statement)).rowcount

    async def lost_claims(self, tokens: Iterable[str]) -> dict[str, bool]:
        """Of `tokens`, the claims no longer held, each with whether its step was cancelled
        (else its lease expired or it was given back: another worker may hold it now). A plain
        read by primary key, without locks; a worker asks only when a renewal renewed fewer
        claims than it holds (docs/architecture.md, 'Cancelling a run')."""
        by_token = {token: claims.claimed_step_ids([token]) for token in tokens}
        ids = sorted({step_id for found in by_token.values() for step_id in found})
        if not ids:
            return {}
        query = select(steps.c.id, steps.c.claim_token, steps.c.status).where(steps.c.id.in_(ids))
        async with self._engines.read.connect() as conn:
            rows = {row.id: row for row in (await conn.execute(query)).all()}
        lost: dict[str, bool] = {}
        for token, found in by_token.items():
            row = rows.get(found[0]) if found else None
            if row is None:
                continue  # not a claim token (nothing held it): nothing to stop
            if row.claim_token != token or row.status != StepStatus.RUNNING.value:
                lost[token] = row.status == StepStatus.CANCELLED.value
        return lost

    async def mark_admission_waits(self, waiting: Mapping[str, str], over: Iterable[str]) -> None:
        """Record on the live claims in `waiting` (claim token → destination) that they wait
        for an admission slot, and clear that from the claims in `over` (docs/architecture.md,
        'Why a step waits'). Rows locked right now are skipped, as by `renew`."""
        by_destination: dict[str, list[str]] = {}
        for token, destination in waiting.items():
            by_destination.setdefault(destination, []).append(token)
        cleared = list(over)
        if not by_destination and not cleared:
            return
        async with self._engines.write.begin() as conn:
            for destination, tokens in sorted(by_destination.items()):
                message = f"waiting for an admission slot of {destination} (its limit is reached)"
                await conn.execute(
                    update(steps)
                    .where(
                        steps.c.id.in_(_live(tokens).scalar_subquery()),
                        # A step may have been admitted, failed and started a retry wait
                        # since the snapshot: that wait is what it does now.
                        or_(
                            steps.c.wait_reason.is_(None),
                            steps.c.wait_reason == WaitReason.ADMISSION_WAIT.value,
                        ),
                    )
                    .values(wait_reason=WaitReason.ADMISSION_WAIT.value, wait_message=message)
                )
            if cleared:
                await conn.execute(
                    update(steps)
                    .where(
                        steps.c.id.in_(_live(cleared).scalar_subquery()),
                        steps.c.wait_reason == WaitReason.ADMISSION_WAIT.value,
                    )
                    .values(wait_reason=None, wait_message=None)
                )

    async def show_retry_wait(
        self, claim_token: str, lines: Sequence[LogLine], message: str, until: float
    ) -> bool:
        """Record on the step claimed with `claim_token` that it sleeps before its next
        in-process attempt (`retry_backoff`, `message`) until `until` (its `not_before`,
        unused by a RUNNING step otherwise), and write its log `lines` so far, in one
        transaction, so its attempts show while it waits (docs/architecture.md, 'Why a
        step waits'). A claim that is no longer `_held` (the step id the token names, the
        token, RUNNING: what a flush matches) changes nothing: returns False, and its lines
        stay the caller's to write with its result."""
        statement = (
            update(steps)
            .where(_held([claim_token]))
            .values(
                wait_reason=WaitReason.RETRY_BACKOFF.value,
                wait_message=message[:WAIT_MESSAGE_MAX_CHARS],
                not_before=until,
            )
        )
        async with self._engines.write.begin() as conn:
            if (await conn.execute(statement)).rowcount != 1:
                return False
            await results_.insert_logs(conn, lines, self._clock.now())
        return True

    async def release_breaker_parks(self, destination: str, tenant_id: str | None) -> int:
        """Make the steps waiting behind a breaker of `destination` claimable now: an operator
        closed it (`Admission.reset_breakers`), and its waiting steps would otherwise wait out
        their redispatch or park. Only `tenant_id`'s steps behind its tenant layer when given
        (the global layer stays as it was); None: every tenant's, behind either layer. Their
        `not_before` becomes now and their wait reason is cleared, so no front door says the
        breaker is open any more; their error stays (it names the opening they counted).
        Statements over the steps that wait (`ix_step_waiting`), `RELEASE_BATCH` at a time,
        none of them claimed, so no claim or lease changes. Returns how many it released."""
        now = self._clock.now()
        where = [
            steps.c.status == StepStatus.READY.value,
            steps.c.wait_reason == WaitReason.BREAKER_OPEN.value,
            # The partial index's predicate and a range of its column: SQLite then reads the
            # waiting steps from `ix_step_waiting` rather than every step.
            steps.c.wait_reason.is_not(None),
            steps.c.run_id >= "",
            steps.c.not_before > now,
            steps.c.error[(BREAKER_KEY, "destination")].as_string() == destination,
        ]
        if tenant_id is not None:
            where += [
                steps.c.tenant_id == tenant_id,
                steps.c.error[(BREAKER_KEY, "layer")].as_string() == "tenant",
            ]
        # Rows locked right now are skipped, so the statement never waits for a lock (and
        # needs no lock order): such a row is being claimed or written by its owner. A batch
        # at a time, each its own short transaction: a 100,000-child fan-out's parked steps
        # are not all locked at once inside the operator's request.
        parked = (
            select(steps.c.id).where(*where).limit(RELEASE_BATCH).with_for_update(skip_locked=True)
        )
        statement = (
            update(steps)
            .where(
                steps.c.id.in_(parked.scalar_subquery()), steps.c.status == StepStatus.READY.value
            )
            .values(not_before=now, wait_reason=None, wait_message=None)
        )
        released = 0
        for _ in range(MAX_RELEASE_BATCHES):  # each batch moves its steps out of `where`
            async with self._engines.write.begin() as conn:
                count = (await conn.execute(statement)).rowcount
            released += count
            if count < RELEASE_BATCH:
                break
        return released

    async def with_parents(self, run_ids: Iterable[str]) -> set[str]:
        """`run_ids` and the parents of those that are child runs (one read by primary key)."""
        ids = set(run_ids)
        if not ids:
            return ids
        query = select(runs.c.parent_run_id).where(
            runs.c.id.in_(sorted(ids)), runs.c.parent_run_id.is_not(None)
        )
        async with self._engines.read.connect() as conn:
            return ids | {row.parent_run_id for row in (await conn.execute(query)).all()}

    async def give_back(
        self, tokens: Iterable[str], *, why: str = GIVEN_BACK, lost: str = LOST_WORKER_STOPPED
    ) -> int:
        """Return the steps claimed with `tokens` (this worker's, abandoned mid-execution as it
        stops, or because their run failed) to READY at once instead of leaving their leases
        to expire (a stopped run's step is held back as PENDING); `why` is their log line,
        `lost` what it records of the execution that ended (`LOST_REASONS`). Their attempts
        stay counted: a call may have been sent. Returns how many were given back."""
        token_list = list(tokens)
        if not token_list:
            return 0
        return len(await self._requeue(_held(token_list), why, lost=lost))

    async def requeue_expired(self) -> list[tuple[int, str, str]]:
        """Return RUNNING steps whose lease expired (their worker died) to READY.

        Returns (step id, run id, vertex id) of each requeued step.
        """
        expired = (steps.c.status == StepStatus.RUNNING.value) & (
            steps.c.lease_expires_at < self._clock.now()
        )
        return await self._requeue(expired, LEASE_EXPIRED, lost=LOST_LEASE_EXPIRED)

    async def release_stranded(self, *, every_run: bool = False) -> list[tuple[int, str, str]]:
        """Steps held back in runs that are RUNNING again become READY: the safety net for a
        flush or a requeue that read the run as stopped and held its step back while an
        operator's reopen committed (the reopen's `release_held` cannot see a hold not yet
        committed). Only runs reopened in the last `REOPENED_RECHECK_S` are looked at, and
        only their held steps (both through partial indexes); when there are none, a read
        says so and no write transaction is opened. `every_run` looks at every RUNNING run's
        held steps instead (once, as a worker starts: a step stranded while no worker
        reaped). Returns (step id, run id, vertex id) of each step released."""
        running = select(runs.c.id).where(runs.c.status == RunStatus.RUNNING.value)
        if not every_run:
            running = running.where(runs.c.reopened_at >= self._clock.now() - REOPENED_RECHECK_S)
            async with self._engines.read.connect() as conn:
                if (await conn.execute(running.limit(1))).first() is None:
                    return []
        return await self._requeue(steps.c.run_id.in_(running) & recovery.HELD, STRANDED)

    async def _requeue(
        self, where: Any, message: str, *, lost: str | None = None
    ) -> list[tuple[int, str, str]]:
        """The steps `where` selects (claimed, or held back) go back to READY now (PENDING
        while their run is stopped), their claims and wait reasons cleared, each with `message`
        in its run's log. `lost`: they are claimed steps whose execution ends here without a
        result (`LOST_REASONS`): each line also records that, the execution (the step's
        `attempts`, the claim's number) and the worker that held it (`claimed_by`, which the
        requeue clears), so its attempt history shows the execution that was lost. Returns
        (step id, run id, vertex id) of each."""
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            holders: dict[int, Any] = {}
            if lost is not None:
                # Who held each claim, read under the rows' locks before the UPDATE clears it
                # (RETURNING answers the new values). The UPDATE selects with the same `where`,
                # not by these ids: a reaper may take back tens of thousands of steps at once,
                # more than a statement may bind.
                held = select(steps.c.id, steps.c.attempts, steps.c.claimed_by).where(where)
                locked = await conn.execute(held.order_by(steps.c.id).with_for_update())
                holders = {row.id: row for row in locked}
                if not holders:
                    return []
            statement = self._requeue_statement(where, now)
            rows = [(r.id, r.run_id, r.vertex_id) for r in (await conn.execute(statement)).all()]
            await results_.insert_logs(
                conn,
                [
                    LogLine(run_id, "warning", message, vertex_id, _lost(holders.get(id_), lost))
                    for id_, run_id, vertex_id in rows
                ],
                now,
            )
        return rows

    @staticmethod
    def _requeue_statement(where: Any, now: float) -> Any:
        return (
            update(steps)
            .where(where)
            .values(
                # READY only while the run is RUNNING; a stopped run's step is held back.
                status=case(
                    (results_.RUN_IS_RUNNING, StepStatus.READY.value),
                    else_=StepStatus.PENDING.value,
                ),
                claim_token=None,
                claimed_by=None,
                lease_expires_at=None,
                not_before=now,
                wait_reason=None,
                wait_message=None,
            )
            .returning(steps.c.id, steps.c.run_id, steps.c.vertex_id)
        )

    async def complete(
        self, results: Sequence[StepResult], log_lines: Sequence[LogLine] = ()
    ) -> CompletionReport:
        """Record results of claimed steps and their log lines in one transaction, in a fixed
        number of round trips (see `engine.store.results`).

        Ending a child run updates its parent spawner's counters in the same transaction; when
        that closes the join, the spawner step succeeds and the MERGE becomes READY — which may
        end the parent run, and so on up a nested fan-out.
        """
        report = CompletionReport()
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            tx = results_.Tx(conn, now, report)
            live, late = await results_.live_claims(conn, results) if results else ([], [])
            report.dropped = [r.step.step_id for r in late]
            report.recorded = len(live)
            report.changed_runs.update(r.step.run_id for r in live)
            # A child's step that ends or waits moves its parent's fan-out progress.
            report.changed_runs.update(r.step.parent_run_id for r in live if r.step.parent_run_id)
            await results_.release(conn, live, now)
            done = [
                results_.DoneStep(
                    r.step.run_id, r.step.vertex_id, await self._workflow_of(r.step), r.output
                )
                for r in live
                if isinstance(r, StepSucceeded)
            ]
            await results_.steps_done(tx, done)
            for result in live:
                step = result.step
                if isinstance(result, StepFailed) and result.retry_at is None:
                    await results_.fail_run(tx, step.run_id, step.vertex_id, result.error)
                elif isinstance(result, StepAwaitingChildren):
                    await self._check_join(tx, step.run_id, step.vertex_id)
            # Why a result came too late: its step was cancelled, or its claim expired (a
            # read only when a result came late, which is rare).
            cancelled = await results_.cancelled_of(conn, [r.step.step_id for r in late])
            dropped = [_late(r, r.step.step_id in cancelled) for r in late]
            await results_.insert_logs(conn, [*log_lines, *dropped, *tx.logs], now)
            tx.logs = []
            # Last before COMMIT: adding to a spawner's counters locks its row, and every
            # worker's flush that ends one of its children waits for that lock.
            for _ in range(MAX_NESTING):
                if not tx.ended:
                    break
                batch, tx.ended = tx.ended, []
                await self._children_ended(tx, batch)
            if tx.ended:
                # Deeper than MAX_NESTING: fail loudly rather than leave a join waiting.
                raise RuntimeError(f"fan-out nested deeper than {MAX_NESTING} levels")
            await results_.insert_logs(conn, tx.logs, now)
        return report

    async def _children_ended(self, tx: results_.Tx, children: Sequence[EndedChild]) -> None:
        """Add ended children to their spawners' counters (one UPDATE per spawner, however
        many of its children ended in this batch) and close joins that can close."""
        for (parent_run_id, vertex_id), counts in fanout.group_ended(children).items():
            tx.report.changed_runs.add(parent_run_id)
            row = await fanout.add_to_counters(tx.conn, parent_run_id, vertex_id, counts)
            if (
                row is not None
                and row.status == StepStatus.PARKED.value
                and fanout.join_may_close(fanout.counts_of(row))
            ):
                await self._check_join(tx, parent_run_id, vertex_id, row)

    async def _check_join(
        self, tx: results_.Tx, run_id: str, vertex_id: str, counters: Any = None
    ) -> None:
        """Close the spawner's join if its children allow it (see `vertices.merge`)."""
        if counters is None:
            counters = await fanout.read_counters(tx.conn, run_id, vertex_id)
        workflow = await self._workflow_of_run(tx.conn, run_id)
        counts = fanout.counts_of(counters)
        if not fanout.join_closes(workflow, vertex_id, counts):
            return
        if await fanout.close_join(tx.conn, run_id, vertex_id, counts, tx.now):
            message = f"fan-out joined: {counts.in_words()}"
            tx.logs.append(LogLine(run_id, "info", message, vertex_id, counts.as_dict()))
            done = results_.DoneStep(run_id, vertex_id, workflow, counts.as_dict())
            await results_.steps_done(tx, [done])


def _lost(holder: Any, lost: str | None) -> dict[str, Any] | None:
    """The data of a requeue's log line: for a claim taken back (`holder`: its row as the
    requeue read it), the execution that ended without a result and who held it."""
    if holder is None or lost is None:
        return None
    data: dict[str, Any] = {"lost": lost, "execution": holder.attempts}
    if holder.claimed_by is not None:
        data["worker"] = holder.claimed_by
    return data


def _late(result: StepResult, cancelled: bool) -> LogLine:
    """The log line of a result dropped because its claim is no longer live."""
    step = result.step
    why = "step cancelled" if cancelled else "claim expired"
    return LogLine(step.run_id, "warning", f"late result dropped: {why}", step.vertex_id)


def _held(tokens: list[str]) -> ColumnElement[bool]:
    """The RUNNING steps claimed with `tokens`, found by primary key (the ids the tokens
    name), so that a renewal or a give-back reads its own claims, not every RUNNING step."""
    return and_(
        steps.c.id.in_(claims.claimed_step_ids(tokens)),
        steps.c.claim_token.in_(tokens),
        steps.c.status == StepStatus.RUNNING.value,
    )


def _live(tokens: list[str]) -> Select[Any]:
    """The ids of the steps `_held` by `tokens`, locked, skipping rows locked right now: such
    a row is being written by its owner (a flush, a spawner batch), and waiting for it while
    holding other rows could deadlock with them."""
    return (
        select(steps.c.id)
        .where(_held(tokens))
        .order_by(steps.c.id)
        .with_for_update(skip_locked=True)
    )
