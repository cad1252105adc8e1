"""Fan-out statements of the store: child creation, the join counters, merges, dead letters,
payloads and quotas. Part of `engine.store` (it is only called from there and from
`engine.execution.fanout`'s port over the store); split out to keep modules small.

Child identity. A child's idempotency key is `<parent run>/<spawner vertex>/<item index>` and
its run id is the UUIDv5 of that key. The key column is UNIQUE and children are inserted with
`ON CONFLICT DO NOTHING … RETURNING id`, so two deliveries of the same spawner racing each
other each create only the children the other has not: the database closes the window that a
look-up-before-insert leaves open. Steps are inserted only for the runs this statement created.

Join counters. Each child's end adds 1 to a counter on its spawner's step, in the transaction
that ends the child (grouped per spawner within a batch). The row lock serialises concurrent
ends, so exactly one transaction sees the counts that close the join and flips the spawner
from PARKED to SUCCEEDED (`WHERE status = 'PARKED'`); the MERGE then becomes READY once.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    CompoundSelect,
    Float,
    Select,
    Text,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.dialect import Dialect, dialect_of
from engine.store.models import (
    Payload,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TenantQuota,
)
from engine.store.records import (
    ChildRow,
    ClaimedStep,
    HeldChildren,
    LeaseRanges,
    RunningChildren,
    VersionRecord,
    WaitingGroup,
)
from schemas.definitions import MergeConfig, MergeVertex, Workflow
from schemas.errors import BreakerRefusal
from schemas.waiting import WaitReason
from vertices import merge

runs = Run.__table__  # type: ignore[attr-defined]
steps = Step.__table__  # type: ignore[attr-defined]
payloads = Payload.__table__  # type: ignore[attr-defined]
quotas = TenantQuota.__table__  # type: ignore[attr-defined]

CHILD_ID_NAMESPACE = uuid.UUID("6f1d3c1e-5b8a-4c44-9a57-2f0b8f5e8a10")


@dataclass(frozen=True)
class EndedChild:
    parent_run_id: str
    parent_vertex_id: str
    status: str


def child_key(parent_run_id: str, vertex_id: str, index: int) -> str:
    return f"{parent_run_id}/{vertex_id}/{index}"


def child_run_id(key: str) -> str:
    return str(uuid.uuid5(CHILD_ID_NAMESPACE, key))


# ── the join ────────────────────────────────────────────────────────────────────────────────


def group_ended(children: Sequence[EndedChild]) -> dict[tuple[str, str], Counter[str]]:
    grouped: dict[tuple[str, str], Counter[str]] = {}
    for child in children:
        grouped.setdefault((child.parent_run_id, child.parent_vertex_id), Counter())[
            child.status
        ] += 1
    return grouped


_COUNTER_COLUMNS = (
    steps.c.status,
    steps.c.children_total,
    steps.c.children_succeeded,
    steps.c.children_failed,
    steps.c.children_cancelled,
)


async def add_to_counters(
    conn: AsyncConnection, run_id: str, vertex_id: str, counts: Counter[str]
) -> Any:
    statement = (
        update(steps)
        .where(steps.c.run_id == run_id, steps.c.vertex_id == vertex_id)
        .values(
            children_succeeded=steps.c.children_succeeded + counts["SUCCEEDED"],
            children_failed=steps.c.children_failed + counts["FAILED"],
            children_cancelled=steps.c.children_cancelled + counts["CANCELLED"],
        )
        .returning(*_COUNTER_COLUMNS)
    )
    return (await conn.execute(statement)).first()


async def read_counters(conn: AsyncConnection, run_id: str, vertex_id: str) -> Any:
    statement = select(*_COUNTER_COLUMNS).where(
        steps.c.run_id == run_id, steps.c.vertex_id == vertex_id
    )
    return (await conn.execute(statement)).one()


def counts_of(row: Any) -> merge.ChildCounts:
    return merge.ChildCounts(
        total=row.children_total or 0,
        succeeded=row.children_succeeded,
        failed=row.children_failed,
        cancelled=row.children_cancelled,
    )


def merge_config_for(workflow: Workflow, spawner_vertex_id: str) -> MergeConfig:
    """The config of the MERGE that joins `spawner_vertex_id` (defaults when it has none)."""
    for vertex in workflow.vertices.values():
        if isinstance(vertex, MergeVertex) and spawner_vertex_id in vertex.depends_on:
            return vertex.config
    return MergeConfig()


def join_may_close(counts: merge.ChildCounts) -> bool:
    """Cheap pre-check before reading the merge's config: while children are still running,
    only a failure (failFast) can close a join."""
    return counts.ended >= counts.total or counts.failed + counts.cancelled > 0


def join_closes(workflow: Workflow, spawner_vertex_id: str, counts: merge.ChildCounts) -> bool:
    config = merge_config_for(workflow, spawner_vertex_id)
    return merge.join_state(config, counts) is merge.JoinState.CLOSED


async def close_join(
    conn: AsyncConnection, run_id: str, vertex_id: str, counts: merge.ChildCounts, now: float
) -> bool:
    """Flip the spawner from PARKED to SUCCEEDED; True for the one caller that did it."""
    statement = (
        update(steps)
        .where(
            steps.c.run_id == run_id,
            steps.c.vertex_id == vertex_id,
            steps.c.status == StepStatus.PARKED.value,
        )
        .values(status=StepStatus.SUCCEEDED.value, output=counts.as_dict(), ended_at=now)
    )
    return (await conn.execute(statement)).rowcount == 1


# ── creating children ───────────────────────────────────────────────────────────────────────


async def existing_children(conn: AsyncConnection, run_id: str, vertex_id: str) -> int:
    statement = (
        select(func.count())
        .select_from(runs)
        .where(runs.c.parent_run_id == run_id, runs.c.parent_vertex_id == vertex_id)
    )
    return int((await conn.execute(statement)).scalar_one())


async def claim_is_live(conn: AsyncConnection, step: ClaimedStep, total: int) -> bool:
    """Record the fan-out size on the spawner step; False when our claim is gone."""
    statement = (
        update(steps)
        .where(
            steps.c.id == step.step_id,
            steps.c.claim_token == step.claim_token,
            steps.c.status == StepStatus.RUNNING.value,
        )
        .values(children_total=total)
    )
    return (await conn.execute(statement)).rowcount == 1


def _insert_runs_ignoring_duplicates(dialect: Dialect) -> Any:
    """The children's INSERT. Their inputs arrive as JSON text (`b_input`), serialized once by
    the spawner, which sized them on the way: bound as text, not through the column's JSON
    type, which would serialize them again (PostgreSQL casts the text, checking it).

    The conflict names no target: a child's id is derived from its key, so two racing
    deliveries collide on both unique indexes, and PostgreSQL raises a conflict on an index
    that is not an arbiter instead of skipping the row."""
    return (
        dialect.insert(runs)
        .values(input=dialect.json_from_bound_text("b_input"))
        .on_conflict_do_nothing()
        .returning(runs.c.id)
    )


async def insert_children(
    conn: AsyncConnection,
    *,
    parent: ClaimedStep,
    child: VersionRecord,
    batch: Sequence[ChildRow],
    step_rows: Callable[[str], list[dict[str, Any]]],
    now: float,
) -> int:
    """Create the children in `batch` that do not exist yet; returns how many were created."""
    rows = []
    for spec in batch:
        key = child_key(parent.run_id, parent.vertex_id, spec.index)
        rows.append(
            {
                "id": child_run_id(key),
                "workflow_name": child.name,
                "workflow_version": child.version,
                "definition_hash": child.definition_hash,
                "tenant_id": parent.tenant_id,
                "status": RunStatus.RUNNING.value,
                "timeout_tier": "process",
                "b_input": spec.input_json,
                "item": spec.item,
                "output": None,
                "error": None,
                "steps_remaining": len(child.workflow.vertices),
                "created_at": now,
                "started_at": now,
                "ended_at": None,
                "idempotency_key": key,
                "parent_run_id": parent.run_id,
                "parent_vertex_id": parent.vertex_id,
                "item_index": spec.index,
                "root_run_id": parent.root_run_id or parent.run_id,
                "restarted_from": None,
                "dlq_at": None,
                # The whole run tree starts the child versions fixed at its root.
                "pinned_versions": parent.pinned_versions,
            }
        )
    if not rows:
        return 0
    dialect = dialect_of(conn)
    insert_runs = dialect.statement(_insert_runs_ignoring_duplicates)
    result = await conn.execute(insert_runs, rows)
    created = [row.id for row in result.all()]
    if created:
        await conn.execute(insert(steps), [r for run_id in created for r in step_rows(run_id)])
        await conn.execute(
            update(quotas)
            .where(quotas.c.tenant_id == parent.tenant_id)
            .values(used_runs=quotas.c.used_runs + len(created))
        )
    return len(created)


async def running_children(conn: AsyncConnection, run_id: str) -> RunningChildren:
    """Children of `run_id` still going with a step claimed right now, and by whom (see
    `running_children_statement`)."""
    count, held = 0, []
    for row in (await conn.execute(running_children_statement(run_id))).all():
        if row.every:
            count = int(row.children)
        elif row.claimed_by is not None:  # `schemabridge run` claims as no service
            held.append(
                HeldChildren(row.claimed_by, int(row.children), row.lease_until, row.lease_from)
            )
    return RunningChildren(count, held)


async def held_with_leases(
    conn: AsyncConnection, run_id: str, worker: str, leases: LeaseRanges
) -> HeldChildren | None:
    """Of the children of `run_id` still going, those with a RUNNING step `worker` holds under
    a lease ending in `leases` (how many, and the latest end); None when there are none. Read
    only for a holder whose claims were set by two processes (`running_children`'s
    `lease_from` and `lease_until` on either side of a restart): rare, and one holder."""
    lease = steps.c.lease_expires_at
    in_range = lease < leases.before
    if leases.after is not None:
        in_range = or_(in_range, lease > leases.after)
    query = (
        select(
            func.count(func.distinct(steps.c.run_id)).label("children"),
            func.max(lease).label("lease_until"),
            func.min(lease).label("lease_from"),
        )
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(*_running_steps_of_children(run_id), steps.c.claimed_by == worker, in_range)
    )
    row = (await conn.execute(query)).one()
    if not row.children:
        return None
    return HeldChildren(worker, int(row.children), row.lease_until, row.lease_from)


def _running_steps_of_children(run_id: str) -> tuple[ColumnElement[bool], ...]:
    """The RUNNING steps of `run_id`'s children still going (steps joined to runs): what
    `running_children_statement` counts and `held_with_leases` splits."""
    return (
        runs.c.parent_run_id == run_id,
        runs.c.status == RunStatus.RUNNING.value,
        steps.c.status == StepStatus.RUNNING.value,
    )


def running_children_statement(run_id: str) -> CompoundSelect[Any]:
    """Counts the children of `run_id` still going with a step claimed right now: all of
    them (the row with `every`), and by the service that claimed the step (`claimed_by`),
    with the latest end of those claims' leases.

    Both sides are read from small indexes: the RUNNING steps (`ix_step_running_lease`) and
    the children still RUNNING (`ix_run_parent_status_item`), so a fan-out's finished
    children cost nothing however many there are. A child that has ended is counted by its
    spawner's counters, never here, even while a step of it finishes in flight. One read for
    both counts: a second join for the holders made `GET /runs/{id}` half again as slow at
    100,000 children; the groups cannot give the total, since a child's two running steps
    may have two holders.
    """
    running = (
        select(steps.c.run_id, steps.c.claimed_by, steps.c.lease_expires_at)
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(*_running_steps_of_children(run_id))
        .cte("running")
    )
    children = func.count(func.distinct(running.c.run_id)).label("children")
    by_holder = select(
        running.c.claimed_by,
        children,
        func.max(running.c.lease_expires_at).label("lease_until"),
        func.min(running.c.lease_expires_at).label("lease_from"),
        literal(False).label("every"),
    ).group_by(running.c.claimed_by)
    every = select(
        null().label("claimed_by"),
        children,
        null().label("lease_until"),
        null().label("lease_from"),
        literal(True),
    )
    return union_all(by_holder, every)


async def holding_a_step(conn: AsyncConnection, run_ids: Sequence[str]) -> set[str]:
    """Which of `run_ids` (a page of children) have a step claimed right now: the others among
    the RUNNING ones wait (the same split as `running_children`, per child)."""
    if not run_ids:
        return set()
    query = (
        select(steps.c.run_id)
        .where(steps.c.run_id.in_(run_ids), steps.c.status == StepStatus.RUNNING.value)
        .distinct()
    )
    return {row.run_id for row in (await conn.execute(query)).all()}


async def waiting_children(conn: AsyncConnection, run_id: str, now: float) -> list[WaitingGroup]:
    """Children of `run_id` still going with a step that waits at `now`, grouped by why they
    wait, most first (see `waiting_children_statement`), each with a message true of all and,
    behind a breaker they all share, that breaker."""
    groups = []
    statement = waiting_children_statement(run_id, now, dialect_of(conn))
    for row in (await conn.execute(statement)).all():
        message = common_message(row.least or "", row.greatest or "")
        group = WaitingGroup(row.wait_reason, int(row.children), message, row.until)
        if row.wait_reason == WaitReason.BREAKER_OPEN.value and message:
            group = await _with_breaker(conn, group, row.sample)
        groups.append(group)
    return groups


async def _with_breaker(conn: AsyncConnection, group: WaitingGroup, step_id: int) -> WaitingGroup:
    """`group` with the breaker one of its steps (`step_id`) was refused by. A message they
    share names one destination and layer (the refusal's words), so one step's stored refusal
    is theirs all: one read by primary key, not one per child."""
    query = select(steps.c.error, steps.c.tenant_id).where(steps.c.id == step_id)
    row = (await conn.execute(query)).first()
    if row is None:  # it ended between the two reads
        return group
    refusal = BreakerRefusal.of_error(row.error)
    return dataclasses.replace(group, breaker=refusal, tenant_id=row.tenant_id)


_COUNTED = re.compile(r"^redispatch \d+/\d+ after ")
"""How a redispatch's wait message starts (`engine.execution.executor.redispatch_message`)."""
_PARKED = re.compile(r"; this opening already counted as redispatch \d+/\d+.*$")
"""How a breaker park's wait message ends (`engine.execution.breaker_parks.park_message`)."""
_OPENED_AT = re.compile(r"(\(opened by [^()]*) at \d{2}:\d{2}:\d{2} UTC\)")
"""When a breaker's refusal says its layer opened (`admission.breaker.opened_by`): one
outage opens a layer again at each failed half-open, so the children it refuses wait under
several openings."""


_CLAUSE_ENDS = ("; ", ", ")
"""Where a message's leading words may be cut from the rest (`shared_start`)."""
_PAIRS = (("(", ")"), ("[", "]"))
_QUOTES = ("'", "`")


def _closed(head: str) -> bool:
    """Whether `head` closes every bracket and quote it opens."""
    return all(head.count(o) == head.count(c) for o, c in _PAIRS) and all(
        head.count(q) % 2 == 0 for q in _QUOTES
    )


def shared_start(least: str, greatest: str) -> str:
    """The leading clauses `least` and `greatest` share, cut where both go on with "; " or
    ", " (or where the shorter ends and the other goes on so), with its brackets and quotes
    closed; empty when none. Every string between the two in byte order starts with what
    they share, so it is true of every message of a group whose least and greatest they
    are: the waits that lead with what the destination did and end with each call's own URL
    and count (a retry wait, a redispatch after an answer) share that much when they wait
    for one destination's same answer."""
    same = 0
    for a, b in zip(least, greatest, strict=False):
        if a != b:
            break
        same += 1
    for cut in range(same, 0, -1):
        # How each goes on after the cut ("" where one ends there: the other goes on).
        goes_on = {least[cut : cut + 2], greatest[cut : cut + 2]} - {""}
        if len(goes_on) == 1 and goes_on <= set(_CLAUSE_ENDS) and _closed(least[:cut]):
            return least[:cut]
    return ""


def common_message(least: str, greatest: str) -> str:
    """A message true of every step of a group, from its least and greatest messages: the
    message when they are the same; else the leading clauses they share (`shared_start`:
    what the destination answered, before each step's URL and count); else the cause they
    share once the per-step counts are taken off ("redispatch 2/3 after …", "… already
    counted as redispatch 1/3 …"), and when that differs only by when a breaker opened, that
    cause without the times; else empty (front doors then name the reason). Never one
    step's count or time said of them all."""
    if least == greatest:
        return least
    shared = shared_start(least, greatest)
    if shared:
        return shared
    causes = {_PARKED.sub("", _COUNTED.sub("", m)) for m in (least, greatest)}
    if len(causes) == 1:
        return causes.pop()
    # Refused under different openings of one breaker (a tour's outage outlived three): what
    # opened it and the breaker are true of them all, its times are not. Without this the
    # children read "waiting: breaker open", with no destination and no reset command.
    causes = {_OPENED_AT.sub(r"\1)", cause) for cause in causes}
    return causes.pop() if len(causes) == 1 else ""


def waiting_children_statement(
    run_id: str, now: float, dialect: Dialect | None = None
) -> Select[Any]:
    """Groups the waiting steps of `run_id`'s children still going by reason, most first,
    with their least and greatest messages. Only a wait still under way at `now` counts: a
    READY step whose `not_before` has passed is due (it waits for a worker, not for its
    reason, which is stale then), and so is a retry wait whose time has passed; a RUNNING
    step waiting for an admission slot has no time and counts while it is RUNNING.

    The steps come from the partial index of the waiting ones (`ix_step_waiting`, its
    predicate repeated here so that SQLite uses it too), the children from their RUNNING
    ones (`ix_run_parent_status_item`): neither reads the fan-out's finished children.

    The least and greatest messages are in byte order (PostgreSQL's "C" collation; SQLite's
    default), whatever the database's collation: what they share at their start is then
    shared by every message between them (`shared_start`).
    """
    dated = or_(
        steps.c.status == StepStatus.READY.value,
        steps.c.wait_reason == WaitReason.RETRY_BACKOFF.value,
    )
    children = func.count(func.distinct(steps.c.run_id))
    message: Any = steps.c.wait_message
    if dialect is not None and dialect.is_postgresql:
        message = message.collate("C")
    return (
        select(
            steps.c.wait_reason,
            children.label("children"),
            func.min(message).label("least"),
            func.max(message).label("greatest"),
            func.min(case((dated, steps.c.not_before), else_=None)).label("until"),
            # One of the group's steps, to read its breaker refusal (`_with_breaker`).
            func.min(steps.c.id).label("sample"),
        )
        .select_from(steps.join(runs, runs.c.id == steps.c.run_id))
        .where(
            steps.c.wait_reason.is_not(None),
            runs.c.parent_run_id == run_id,
            runs.c.status == RunStatus.RUNNING.value,
            steps.c.status.in_([StepStatus.READY.value, StepStatus.RUNNING.value]),
            or_(~dated, steps.c.not_before > bindparam("b_now", now, type_=Float)),
        )
        .group_by(steps.c.wait_reason)
        .order_by(children.desc(), steps.c.wait_reason)
    )


async def failed_children_errors(
    conn: AsyncConnection, run_id: str, vertex_id: str, *, limit: int
) -> list[Any]:
    """The errors of a spawner's first `limit` FAILED children, in item order: a range of
    `ix_run_parent_status_item` (parent, status, spawner, item), so the cost is the rows read,
    never the fan-out's size."""
    statement = (
        select(runs.c.error)
        .where(
            runs.c.parent_run_id == run_id,
            runs.c.status == RunStatus.FAILED.value,
            runs.c.parent_vertex_id == vertex_id,
        )
        .order_by(runs.c.item_index)
        .limit(limit)
    )
    return [row.error for row in (await conn.execute(statement)).all()]


async def children_outputs(
    conn: AsyncConnection, run_id: str, vertex_id: str, *, after_index: int = -1, limit: int
) -> list[tuple[int, str, str | None]]:
    """(item index, status, output as JSON text) of up to `limit` children after
    `after_index`, in item order (keyset pagination on the parent/item index). The outputs stay
    JSON text: a merge copies them without parsing them."""
    statement = (
        select(runs.c.item_index, runs.c.status, cast(runs.c.output, Text).label("raw"))
        .where(
            runs.c.parent_run_id == run_id,
            runs.c.parent_vertex_id == vertex_id,
            runs.c.item_index > after_index,
        )
        .order_by(runs.c.item_index)
        .limit(limit)
    )
    return [(r.item_index, r.status, r.raw) for r in (await conn.execute(statement)).all()]


COPY_CHILDREN_OUTPUTS = text(
    """
    WITH page AS (
        SELECT item_index,
               CASE WHEN status = 'SUCCEEDED' AND output IS NOT NULL
                    THEN output::text ELSE 'null' END AS result
        FROM run
        WHERE parent_run_id = :run_id AND parent_vertex_id = :vertex_id
          AND item_index > :after_index AND item_index <= :last_index
        ORDER BY item_index
        LIMIT :limit
    ),
    chunk AS (
        SELECT count(*) AS n, max(item_index) AS last_index,
               '[' || string_agg(result, ',' ORDER BY item_index) || ']' AS body
        FROM page
    ),
    stored AS (
        INSERT INTO payload (run_id, ref, chunk, size_bytes, data, created_at)
        SELECT :run_id, :ref, :chunk, octet_length(body), body::json, :now
        FROM chunk WHERE n > 0
        RETURNING size_bytes
    )
    SELECT chunk.n, chunk.last_index, (SELECT size_bytes FROM stored) AS size_bytes FROM chunk
    """
)
"""PostgreSQL: one payload chunk of a merge, assembled in the database from the children with
item indexes in (after_index, last_index], in item order (the same JSON text the Python path
would join)."""


@dataclass(frozen=True)
class CopiedChunk:
    count: int
    """Children in the chunk (0: none left after `after_index`)."""
    last_index: int
    size_bytes: int


async def copy_children_outputs(
    conn: AsyncConnection,
    run_id: str,
    vertex_id: str,
    *,
    ref: str,
    chunk: int,
    after_index: int,
    last_index: int,
    limit: int,
    now: float,
) -> CopiedChunk:
    row = (
        await conn.execute(
            COPY_CHILDREN_OUTPUTS,
            {
                "run_id": run_id,
                "vertex_id": vertex_id,
                "ref": ref,
                "chunk": chunk,
                "after_index": after_index,
                "last_index": last_index,
                "limit": limit,
                "now": now,
            },
        )
    ).one()
    if not row.n:
        return CopiedChunk(0, after_index, 0)
    return CopiedChunk(int(row.n), int(row.last_index), int(row.size_bytes))


# ── payloads ───────────────────────────────────────────────────────────────────────────


async def put_payload(
    conn: AsyncConnection, run_id: str, *, ref: str, chunk: int, data: Any, now: float
) -> None:
    await put_payload_json(
        conn,
        run_id,
        ref=ref,
        chunk=chunk,
        text=json.dumps(data, separators=(",", ":")),
        now=now,
    )


async def put_payload_json(
    conn: AsyncConnection, run_id: str, *, ref: str, chunk: int, text: str, now: float
) -> None:
    """Store one chunk given as JSON text (not parsed here; PostgreSQL validates it)."""
    value = dialect_of(conn).json_from_text(text)
    await conn.execute(
        insert(payloads).values(
            run_id=run_id,
            ref=ref,
            chunk=chunk,
            size_bytes=len(text.encode()),
            data=value,
            created_at=now,
        )
    )


async def get_payload(conn: AsyncConnection, ref: str) -> Any:
    """The payload `ref`: one chunk as stored, several chunks concatenated (lists)."""
    rows = (
        await conn.execute(
            select(payloads.c.data).where(payloads.c.ref == ref).order_by(payloads.c.chunk)
        )
    ).all()
    if not rows:
        return None
    if len(rows) == 1:
        return rows[0].data
    return [element for row in rows for element in row.data]


async def delete_payload(conn: AsyncConnection, ref: str) -> None:
    await conn.execute(payloads.delete().where(payloads.c.ref == ref))


ENDED_RUN_STATUSES = (
    RunStatus.SUCCEEDED.value,
    RunStatus.FAILED.value,
    RunStatus.CANCELLED.value,
)


def expired_payloads(ended_before: float) -> Select[Any]:
    """The payload chunks of runs that ended (SUCCEEDED, FAILED or CANCELLED) before
    `ended_before`, oldest first.

    A chunk is written while its run is RUNNING (by the run's MERGE), so it was created
    before its run ended: `created_at < ended_before` selects nothing the run's condition
    would not, and lets the read start from `ix_payload_created` and stop at the cutoff
    instead of joining every chunk of the store to its run. Chunks of older runs still
    RUNNING (a long run, or one an operator reopened: Retry, Resolve and Reprocess set
    `ended_at` back to None) are read and passed over; they are few."""
    return (
        select(payloads.c.id)
        .where(payloads.c.created_at < ended_before, _ended_at(payloads.c.run_id) < ended_before)
        .order_by(payloads.c.created_at)
    )


def _ended_at(run_id: Any) -> Any:
    """When the run `run_id` ended, NULL while it has not (or is RUNNING again)."""
    return (
        select(runs.c.ended_at)
        .where(runs.c.id == run_id, runs.c.status.in_(ENDED_RUN_STATUSES))
        .scalar_subquery()
    )


async def any_expired_payload(conn: AsyncConnection, ended_before: float) -> bool:
    """Whether a chunk is due for deletion (a read: a pass with nothing to do writes
    nothing, and on SQLite takes no write lock)."""
    return (await conn.execute(expired_payloads(ended_before).limit(1))).first() is not None


async def choose_expired_payloads(
    conn: AsyncConnection, ended_before: float, limit: int, max_bytes: int
) -> list[int]:
    """The ids of the oldest chunks of `expired_payloads`, up to `limit` of them and, past
    the first, up to `max_bytes` in all, locked with `SKIP LOCKED` (PostgreSQL; SQLite has
    one writer at a time), so two workers deleting at once take different chunks.

    The byte bound keeps the transaction short where chunks are large: a DELETE's time grows
    with the bytes it frees (~1.5 s for 300 MB on SQLite, whose write lock every other writer
    waits for meanwhile)."""
    chosen = (
        expired_payloads(ended_before)
        .add_columns(payloads.c.size_bytes)
        .limit(limit)
        .with_for_update(of=payloads, skip_locked=True)
    )
    ids: list[int] = []
    size = 0
    for row in (await conn.execute(chosen)).all():
        if ids and size + row.size_bytes > max_bytes:
            break
        ids.append(row.id)
        size += row.size_bytes
    return ids


async def delete_expired(
    conn: AsyncConnection, ids: Sequence[int], ended_before: float
) -> tuple[int, int]:
    """Delete the chunks `ids` (from `choose_expired_payloads`) whose runs are still ended
    before `ended_before`; returns (chunks, bytes) deleted.

    By primary key (as one `IN (subquery)` PostgreSQL would hash-join the whole table). The
    run rows are not locked (the flushes lock them), so on PostgreSQL an operator's Retry may
    reopen a run after its chunks were chosen: the run's end is checked again here, in this
    statement's own snapshot. A chunk another worker deleted first is simply not found."""
    if not ids:
        return 0, 0
    statement = (
        delete(payloads)
        .where(
            dialect_of(conn).one_of(payloads.c.id, "b_ids", BigInteger),
            _ended_at(payloads.c.run_id) < ended_before,
        )
        .returning(payloads.c.size_bytes)
    )
    sizes = (await conn.execute(statement, {"b_ids": list(ids)})).scalars().all()
    return len(sizes), sum(sizes)


async def payload_bytes(conn: AsyncConnection) -> int:
    result = await conn.execute(select(func.coalesce(func.sum(payloads.c.size_bytes), 0)))
    return int(result.scalar_one())
