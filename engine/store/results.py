"""Recording step results in batches: part of `engine.store` (called only from there).

A worker's flusher hands over every result that finished since its last write; recording a
batch of K results takes a fixed number of round trips instead of several per result:

1. `live_claims` — one SELECT … FOR UPDATE of the steps whose claim tokens are still live
   (a token is `<batch>:<step id>`, unique per claim); the others are late results, dropped.
2. `release` — one UPDATE writing every live step's new state.
3. `steps_done` — for the successes: one executemany decrementing dependants' `deps_pending`
   (READY at 0), one SELECT … FOR UPDATE of the runs concerned (in id order, as every
   transaction locks them), then one UPDATE ending SUCCEEDED, in the same statement that
   counts their last steps down, the runs whose remaining steps are all in this batch, and one
   UPDATE counting down the others. A child of a fan-out (one step) is thus written once
   when it ends, not counted down and then ended: one row version instead of two.

On PostgreSQL each of those UPDATEs is one statement whose rows come as arrays (`unnest`),
elsewhere an executemany (one execution per row): the same writes, ~10 % less PostgreSQL CPU
per fan-out child (bench/RESULTS.md).

Terminal failures and spawner parks are rare and handled one by one by the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, bindparam, case, func, insert, or_, select, text, update
from sqlalchemy.engine import Dialect as SQLDialect
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import deployment_rows
from engine.store.children import EndedChild
from engine.store.dialect import Dialect, dialect_of
from engine.store.models import DONE_STEP_STATUSES, Run, RunLog, RunStatus, Step, StepStatus
from engine.store.records import (
    CompletionReport,
    LogLine,
    StepAwaitingChildren,
    StepFailed,
    StepParked,
    StepResult,
    StepSucceeded,
)
from schemas.definitions import GRADUAL_DEPLOY, Workflow
from schemas.waiting import WAIT_MESSAGE_MAX_CHARS

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
logs = RunLog.__table__  # type: ignore[attr-defined]

_DONE = [s.value for s in DONE_STEP_STATUSES]


@dataclass
class Tx:
    """One `complete` transaction: its connection, time, report and the child runs it ended."""

    conn: AsyncConnection
    now: float
    report: CompletionReport
    ended: list[EndedChild] = field(default_factory=list)
    logs: list[LogLine] = field(default_factory=list)
    """Log lines to insert with the transaction's other lines (one INSERT for all)."""


@dataclass(frozen=True)
class DoneStep:
    """A step that reached SUCCEEDED (or a join that closed) in this transaction."""

    run_id: str
    vertex_id: str
    workflow: Workflow
    output: Any
    """What it recorded: a run whose sinks all end in this transaction takes its output from
    here instead of reading it back."""


# ── named statements ────────────────────────────────────────────────────────────────────────

RUN_IS_RUNNING = (
    select(runs.c.status).where(runs.c.id == steps.c.run_id).scalar_subquery()
    == RunStatus.RUNNING.value
)
"""Correlated check used where a step would turn READY: only while its run is RUNNING."""

# Writes whose answer no caller reads are deferred: on SQLite they ride with the transaction's
# next statement or its COMMIT (`engine.store.sqlite_cursor`).
RELEASE = (
    update(steps)
    .where(steps.c.id == bindparam("b_id"))
    .values(
        # A redispatched or parked step of a run that stopped meanwhile is held as PENDING.
        status=case(
            (
                (bindparam("b_status") == StepStatus.READY.value) & ~RUN_IS_RUNNING,
                StepStatus.PENDING.value,
            ),
            else_=bindparam("b_status"),
        ),
        output=bindparam("b_output", type_=steps.c.output.type),
        error=bindparam("b_error", type_=steps.c.error.type),
        not_before=func.coalesce(
            bindparam("b_not_before", type_=steps.c.not_before.type), steps.c.not_before
        ),
        ended_at=bindparam("b_ended_at", type_=steps.c.ended_at.type),
        auto_retries=steps.c.auto_retries + bindparam("b_retry"),
        tenant_item_taken=or_(
            steps.c.tenant_item_taken,
            bindparam("b_item_taken", type_=steps.c.tenant_item_taken.type),
        ),
        children_total=func.coalesce(
            bindparam("b_children_total", type_=steps.c.children_total.type),
            steps.c.children_total,
        ),
        # Why a parked or redispatched step waits; every other result clears it.
        wait_reason=bindparam("b_wait_reason", type_=steps.c.wait_reason.type),
        wait_message=bindparam("b_wait_message", type_=steps.c.wait_message.type),
        claim_token=None,
        claimed_by=None,
        lease_expires_at=None,
    )
    .execution_options(deferred=True)
)

UNLOCK_DEPENDANT = (
    update(steps)
    .where(
        steps.c.run_id == bindparam("b_run"),
        steps.c.vertex_id == bindparam("b_vertex"),
        steps.c.status == StepStatus.PENDING.value,
    )
    .values(
        deps_pending=steps.c.deps_pending - bindparam("b_n"),
        status=case(
            ((steps.c.deps_pending == bindparam("b_n")) & RUN_IS_RUNNING, StepStatus.READY.value),
            else_=steps.c.status,
        ),
        not_before=bindparam("b_now"),
    )
    .execution_options(deferred=True)
)

COUNT_DOWN_RUN = (
    update(runs)
    .where(runs.c.id == bindparam("b_run"))
    .values(steps_remaining=runs.c.steps_remaining - bindparam("b_n"))
    .execution_options(deferred=True)
)


def _runs_to_count_down(dialect: Dialect) -> Any:
    """The runs `b_runs` a flush counts down, locked, so what it says about their remaining
    steps stays true until this commit (another worker's flush may be counting down a
    parallel step of the same run)."""
    return (
        select(
            runs.c.id,
            runs.c.status,
            runs.c.steps_remaining,
            runs.c.parent_run_id,
            runs.c.parent_vertex_id,
        )
        .where(dialect.one_of(runs.c.id, "b_runs"))
        .order_by(runs.c.id)
        .with_for_update()
    )


FINISH_RUN = (
    update(runs)
    .where(runs.c.id == bindparam("b_run"), runs.c.status == RunStatus.RUNNING.value)
    .values(
        steps_remaining=runs.c.steps_remaining - bindparam("b_n"),
        status=RunStatus.SUCCEEDED.value,
        output=bindparam("b_output", type_=runs.c.output.type),
        ended_at=bindparam("b_now"),
    )
    .execution_options(deferred=True)
)


# PostgreSQL: the same writes for a whole batch in one statement, its rows passed as arrays
# (`unnest`) instead of one execution per row (executemany). The rows are locked already
# (`live_claims`, `_runs_to_count_down`), so the order the join visits them in takes no new lock.
# JSON values travel as the text SQLAlchemy's JSON type would bind (`_write_rows`).

RELEASE_BATCH = text(
    """
    UPDATE step SET
        status = CASE
            WHEN v.status = 'READY'
                 AND (SELECT run.status FROM run WHERE run.id = step.run_id) <> 'RUNNING'
            THEN 'PENDING' ELSE v.status END,
        output = CAST(v.output AS JSON),
        error = CAST(v.error AS JSON),
        not_before = COALESCE(v.not_before, step.not_before),
        ended_at = v.ended_at,
        auto_retries = step.auto_retries + v.retry,
        tenant_item_taken = step.tenant_item_taken OR v.item_taken,
        children_total = COALESCE(v.children_total, step.children_total),
        wait_reason = v.wait_reason,
        wait_message = v.wait_message,
        claim_token = NULL,
        claimed_by = NULL,
        lease_expires_at = NULL
    FROM unnest(
        CAST(:b_id AS BIGINT[]), CAST(:b_status AS VARCHAR[]), CAST(:b_output AS TEXT[]),
        CAST(:b_error AS TEXT[]), CAST(:b_not_before AS FLOAT8[]),
        CAST(:b_ended_at AS FLOAT8[]), CAST(:b_retry AS INTEGER[]),
        CAST(:b_item_taken AS BOOLEAN[]), CAST(:b_children_total AS INTEGER[]),
        CAST(:b_wait_reason AS VARCHAR[]), CAST(:b_wait_message AS TEXT[])
    ) AS v(id, status, output, error, not_before, ended_at, retry, item_taken,
           children_total, wait_reason, wait_message)
    WHERE step.id = v.id
    """
)

COUNT_DOWN_RUNS = text(
    """
    UPDATE run SET steps_remaining = run.steps_remaining - v.n
    FROM unnest(CAST(:b_run AS VARCHAR[]), CAST(:b_n AS INTEGER[])) AS v(id, n)
    WHERE run.id = v.id
    """
)

FINISH_RUNS = text(
    """
    UPDATE run SET
        steps_remaining = run.steps_remaining - v.n,
        status = 'SUCCEEDED',
        output = CAST(v.output AS JSON),
        ended_at = :b_now
    FROM unnest(CAST(:b_run AS VARCHAR[]), CAST(:b_n AS INTEGER[]), CAST(:b_output AS TEXT[]))
        AS v(id, n, output)
    WHERE run.id = v.id AND run.status = 'RUNNING'
    """
)

# ── steps ───────────────────────────────────────────────────────────────────────────────────


async def live_claims(
    conn: AsyncConnection, results: Sequence[StepResult]
) -> tuple[list[StepResult], list[StepResult]]:
    """`results` split into those whose claims are still live (their steps locked until
    commit) and the late ones. A claim is live when its token is: a step claimed again since
    (its lease expired, then this worker claimed it anew) has a live result and a late one, and
    only the first result of a claim counts."""
    tokens = [r.step.claim_token for r in results]
    ids = [r.step.step_id for r in results]
    query = dialect_of(conn).statement(_live_claims)
    rows = (await conn.execute(query, {"b_ids": ids, "b_tokens": tokens})).all()
    held = {(row.id, row.claim_token) for row in rows}
    live: list[StepResult] = []
    late: list[StepResult] = []
    for result in results:
        claim = (result.step.step_id, result.step.claim_token)
        if claim in held:
            held.discard(claim)
            live.append(result)
        else:
            late.append(result)
    return live, late


async def cancelled_of(conn: AsyncConnection, step_ids: Sequence[int]) -> set[int]:
    """Of `step_ids`, the steps that are CANCELLED."""
    if not step_ids:
        return set()
    query = select(steps.c.id).where(
        steps.c.id.in_(sorted(set(step_ids))), steps.c.status == StepStatus.CANCELLED.value
    )
    return {row.id for row in (await conn.execute(query)).all()}


def _live_claims(dialect: Dialect) -> Any:
    # In id order, as every transaction that locks several steps takes them (a lock taken in
    # the plan's order could deadlock with one taken in id order). By primary key: the
    # RUNNING steps of a whole cluster are many, a flush's claims a few.
    return (
        select(steps.c.id, steps.c.claim_token)
        .where(
            dialect.one_of(steps.c.id, "b_ids", BigInteger),
            dialect.one_of(steps.c.claim_token, "b_tokens"),
            steps.c.status == StepStatus.RUNNING.value,
        )
        .order_by(steps.c.id)
        .with_for_update()
    )


def _release_row(result: StepResult, now: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "b_id": result.step.step_id,
        "b_output": None,
        "b_error": None,
        "b_not_before": None,
        "b_ended_at": None,
        "b_retry": 0,
        "b_children_total": None,
        "b_item_taken": isinstance(result, StepFailed | StepParked) and result.tenant_item_taken,
        "b_wait_reason": None,
        "b_wait_message": None,
    }
    waiting = result.waiting if isinstance(result, StepFailed | StepParked) else None
    if waiting is not None:
        row["b_wait_reason"] = waiting.reason.value
        row["b_wait_message"] = waiting.message[:WAIT_MESSAGE_MAX_CHARS]
    if isinstance(result, StepSucceeded):
        row |= {
            "b_status": StepStatus.SUCCEEDED.value,
            "b_output": result.output,
            "b_ended_at": now,
        }
    elif isinstance(result, StepFailed) and result.retry_at is not None:
        row |= {
            "b_status": StepStatus.READY.value,
            "b_error": result.error,
            "b_not_before": result.retry_at,
            "b_retry": 1,
        }
    elif isinstance(result, StepFailed):
        row |= {"b_status": StepStatus.FAILED.value, "b_error": result.error, "b_ended_at": now}
    elif isinstance(result, StepParked):
        row |= {
            "b_status": StepStatus.READY.value,
            "b_not_before": result.not_before,
            "b_error": result.error,
        }
    elif isinstance(result, StepAwaitingChildren):
        row |= {"b_status": StepStatus.PARKED.value, "b_children_total": result.total}
    return row


async def release(conn: AsyncConnection, results: Sequence[StepResult], now: float) -> None:
    """Write the new state of every step in `results` (all known to hold live claims)."""
    if results:
        # Sorted by id: every transaction takes row locks in the same order (no deadlocks).
        ordered = sorted(results, key=lambda r: r.step.step_id)
        rows = [_release_row(r, now) for r in ordered]
        await _write_rows(
            conn, rows, each=RELEASE, arrays=RELEASE_BATCH, json=("b_output", "b_error")
        )


async def steps_done(tx: Tx, done: Sequence[DoneStep]) -> None:
    """Unlock dependants of the `done` steps and end the runs that have no step left."""
    if not done:
        return
    unlocks: Counter[tuple[str, str]] = Counter()
    per_run: Counter[str] = Counter()
    workflows: dict[str, Workflow] = {}
    known: dict[str, dict[str, Any]] = {}
    for item in done:
        per_run[item.run_id] += 1
        workflows[item.run_id] = item.workflow
        known.setdefault(item.run_id, {})[item.vertex_id] = item.output
        for dependant in item.workflow.dependants(item.vertex_id):
            unlocks[(item.run_id, dependant)] += 1
    if unlocks:
        await tx.conn.execute(
            UNLOCK_DEPENDANT,
            [
                {"b_run": r, "b_vertex": v, "b_n": n, "b_now": tx.now}
                for (r, v), n in sorted(unlocks.items())
            ],
        )
        tx.report.newly_ready += len(unlocks)
    counting = dialect_of(tx.conn).statement(_runs_to_count_down)
    counted = (await tx.conn.execute(counting, {"b_runs": sorted(per_run)})).all()
    # A run ends when this batch holds all its remaining steps (and it is still RUNNING).
    finished = [
        row
        for row in counted
        if row.status == RunStatus.RUNNING.value and row.steps_remaining == per_run[row.id]
    ]
    ending = {row.id for row in finished}
    going_on = [{"b_run": r, "b_n": n} for r, n in sorted(per_run.items()) if r not in ending]
    if going_on:
        await _write_rows(tx.conn, going_on, each=COUNT_DOWN_RUN, arrays=COUNT_DOWN_RUNS)
    if finished:
        await _finish_runs(tx, finished, per_run, workflows, known)


async def _finish_runs(
    tx: Tx,
    finished: Sequence[Any],
    per_run: Counter[str],
    workflows: dict[str, Workflow],
    known: dict[str, dict[str, Any]],
) -> None:
    ids = [row.id for row in finished]
    # A run's output is its sinks' outputs: read back only those not recorded just now.
    unknown = [r for r in ids if any(v not in known[r] for v in sinks(workflows[r]))]
    outputs = {r: known[r] for r in ids} | (await outputs_of(tx.conn, unknown) if unknown else {})
    rows = [
        {
            "b_run": run_id,
            "b_n": per_run[run_id],
            "b_output": {v: outputs.get(run_id, {}).get(v) for v in sinks(workflows[run_id])},
        }
        for run_id in ids
    ]
    await _write_rows(
        tx.conn, rows, each=FINISH_RUN, arrays=FINISH_RUNS, json=("b_output",), b_now=tx.now
    )
    # A child run's success is its status and its parent's count: a line of its own would be
    # a quarter of the rows a fan-out child writes, for nothing `runs children` does not show.
    # (A child has no "run created" line either: its spawner logs the children it created.)
    tx.logs.extend(
        LogLine(row.id, "info", "run succeeded") for row in finished if row.parent_run_id is None
    )
    for row in finished:
        tx.report.finished_runs.append((row.id, RunStatus.SUCCEEDED.value))
        if row.parent_run_id is not None:
            tx.ended.append(EndedChild(row.parent_run_id, row.parent_vertex_id, "SUCCEEDED"))


async def fail_run(tx: Tx, run_id: str, vertex_id: str, step_error: dict[str, Any]) -> None:
    """A step failed terminally: the run goes FAILED (a child run becomes a dead letter; a
    `gradual_deploy` run ends the deployment it drove, ABORTED)."""
    error = {"vertexId": vertex_id, **step_error}
    changed = await tx.conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING.value)
        .values(
            status=RunStatus.FAILED.value,
            error=error,
            ended_at=tx.now,
            dlq_at=case((runs.c.parent_run_id.is_not(None), tx.now), else_=None),
        )
        .returning(runs.c.parent_run_id, runs.c.parent_vertex_id, runs.c.workflow_name)
    )
    row = changed.first()
    if row is None:
        return
    await hold_ready_steps(tx.conn, run_id)
    message = f"run failed at {vertex_id}: {step_error.get('message', '')}"
    tx.logs.append(LogLine(run_id, "error", message, vertex_id))
    if row.workflow_name == GRADUAL_DEPLOY:
        # Nothing drives the deployment any more: end it now rather than leave its
        # candidate a weight and its workflow refusing the next deployment. (A stage's own
        # verdict ended it before failing the step: then this finds nothing to end.)
        await deployment_rows.end_driven_by(
            tx.conn, run_id, tx.now, reason=f"its gradual_deploy {message}", actor="engine"
        )
    tx.report.finished_runs.append((run_id, RunStatus.FAILED.value))
    if row.parent_run_id is not None:
        tx.ended.append(EndedChild(row.parent_run_id, row.parent_vertex_id, "FAILED"))


async def hold_ready_steps(conn: AsyncConnection, run_id: str) -> None:
    """A run stopped: its READY steps go back to PENDING (deps_pending stays 0) so no claim
    takes them; an operator's Retry makes them READY again."""
    await conn.execute(
        update(steps)
        .where(steps.c.run_id == run_id, steps.c.status == StepStatus.READY.value)
        .values(status=StepStatus.PENDING.value, wait_reason=None, wait_message=None)
    )


# ── shared reads and writes ─────────────────────────────────────────────────────────────────


def sinks(workflow: Workflow) -> list[str]:
    """Vertices nothing depends on: their outputs form the run's output."""
    depended = {d for v in workflow.vertices.values() for d in v.depends_on}
    return [vid for vid in workflow.vertices if vid not in depended]


async def outputs_of(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Outputs of the done steps of `run_ids`, by run and vertex."""
    rows = await conn.execute(
        select(steps.c.run_id, steps.c.vertex_id, steps.c.output).where(
            steps.c.run_id.in_(list(run_ids)), steps.c.status.in_(_DONE)
        )
    )
    outputs: dict[str, dict[str, Any]] = {}
    for row in rows.all():
        outputs.setdefault(row.run_id, {})[row.vertex_id] = row.output
    return outputs


INSERT_LOGS = (
    insert(logs)
    .values(
        run_id=bindparam("b_run"),
        vertex_id=bindparam("b_vertex"),
        at=bindparam("b_at"),
        level=bindparam("b_level"),
        message=bindparam("b_message"),
        data=bindparam("b_data", type_=logs.c.data.type),
    )
    .execution_options(deferred=True)
)

INSERT_LOGS_BATCH = text(
    """
    INSERT INTO run_log (run_id, vertex_id, at, level, message, data)
    SELECT v.run_id, v.vertex_id, v.at, v.level, v.message, CAST(v.data AS JSON)
    FROM unnest(
        CAST(:b_run AS VARCHAR[]), CAST(:b_vertex AS VARCHAR[]), CAST(:b_at AS FLOAT8[]),
        CAST(:b_level AS VARCHAR[]), CAST(:b_message AS TEXT[]), CAST(:b_data AS TEXT[])
    ) WITH ORDINALITY AS v(run_id, vertex_id, at, level, message, data, n)
    ORDER BY v.n
    """
)
"""PostgreSQL: a batch of log lines as one statement (`_write_rows`), inserted in the order
given (ORDER BY the arrays' ordinal), so their ids (the log's order) are those one INSERT
per line would take."""


async def insert_logs(conn: AsyncConnection, lines: Sequence[LogLine], now: float) -> None:
    if not lines:
        return
    rows = [
        {
            "b_run": line.run_id,
            "b_vertex": line.vertex_id,
            "b_at": line.at if line.at is not None else now,
            "b_level": line.level,
            "b_message": line.message,
            "b_data": line.data,
        }
        for line in lines
    ]
    await _write_rows(conn, rows, each=INSERT_LOGS, arrays=INSERT_LOGS_BATCH, json=("b_data",))


BATCH_FROM_ROWS = 2
"""From how many rows a PostgreSQL write goes as one array statement (fewer: executemany)."""


def json_text(on: AsyncConnection | SQLDialect) -> Any:
    """The function that turns a value into the text SQLAlchemy's JSON type binds on `on` (a
    connection or its dialect; the engine's serializer, None as JSON `null`): JSON values of
    statements that take them as text (`unnest` arrays, data-modifying `WITH`) are then
    stored as the JSON type stores them elsewhere."""
    dialect = on.dialect if isinstance(on, AsyncConnection) else on
    return steps.c.output.type.bind_processor(dialect)


async def _write_rows(
    conn: AsyncConnection,
    rows: Sequence[dict[str, Any]],
    *,
    each: Any,
    arrays: Any,
    json: tuple[str, ...] = (),
    **shared: Any,
) -> None:
    """Write `rows` with `each` (executemany), or on PostgreSQL from BATCH_FROM_ROWS rows with
    `arrays`, which takes one list per parameter. `json` names the JSON parameters: in the
    arrays they travel as the text SQLAlchemy's JSON type binds (the engine's serializer, None
    as JSON `null`, as `each` stores it). `shared` parameters are the same for every row."""
    if not (dialect_of(conn).writes_rows_as_arrays and len(rows) >= BATCH_FROM_ROWS):
        await conn.execute(each, [row | shared for row in rows])
        return
    as_json = json_text(conn)
    columns = {
        key: [as_json(row[key]) for row in rows] if key in json else [row[key] for row in rows]
        for key in rows[0]
    }
    await conn.execute(arrays, columns | shared)
