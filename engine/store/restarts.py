"""Runs an operator started over, and why a retry, resolve or reprocess of them is refused:
part of `engine.store` (the operator actions read these in their transactions).

A start over creates a new run of the same version with the same input (`restarted_from`
names the old one), which makes every call of the old run again. Running the old run on too
(a retry of its FAILED steps, a resolve that lets it go on, a reprocess of its dead letters,
the retry of a child under it that reopens its join) would send those calls a second time,
beside the new run's: so once a run is started over, those actions refuse it and its
descendants (409 `started_over`; a reprocess only when it has dead letters to revive, else it
stays a no-op), naming the new run and its status, as a second start over of it names that
run (`start_over_next`).

Each of them checks, then writes: on PostgreSQL (at READ COMMITTED) a start over and a retry
of the same run committed at once would each pass its check. The root run's row serialises
them. A start over locks it first (it is the only row of the old run tree it locks, and a
flush holding it waits for nothing the start over holds). The other actions lock it last
(`lock_roots`), after their other rows, in the order a worker's flush locks them (steps,
then runs, up to the root), and only then read the start overs again (`started_over`): one
committed before that, or waiting on the lock, is found, and one that comes later finds the
run as the action left it (RUNNING: `run_not_ended`). SQLite runs one writer at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Exists, Select, exists, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.models import Run, RunRoute, RunStatus
from engine.store.operator_actions import chunks
from schemas.errors import WrongState

runs = Run.__table__  # type: ignore[attr-defined]

STARTED_OVER = "started_over"
"""The code of the refusal (and a batch retry's skip reason)."""


_DONE = {"retry": "retried", "resolve": "resolved", "reprocess": "reprocessed"}


@dataclass(frozen=True)
class StartedOver:
    """The start over of a run's root: `root_id` (the run itself, or the root run above it)
    was started over as `new_run_id`, which is `new_status` now."""

    root_id: str
    new_run_id: str
    new_status: str


def root_of(row: Any) -> str:
    """The root run of a run's row (`id`, `root_run_id`): only a root run is started over,
    and a retry below it can reopen its joins."""
    return str(row.root_run_id or row.id)


async def new_runs(conn: AsyncConnection, run_ids: Iterable[str]) -> dict[str, Any]:
    """For each of `run_ids` that was started over, the run its start over made (`id`,
    `status`): the first run `restarted_from` it, the one its idempotency key names. One
    indexed read (`ix_run_restarted_from`) per `ID_CHUNK` ids."""
    found: dict[str, Any] = {}
    for chunk in chunks(sorted(set(run_ids))):
        for row in (await conn.execute(new_runs_statement(chunk))).all():
            found.setdefault(row.restarted_from, row)
    return found


def new_runs_statement(run_ids: Sequence[str]) -> Select[Any]:
    """The runs started over from `run_ids`, oldest first: a range of `ix_run_restarted_from`
    per id (the index is partial, and `IN` implies the `IS NOT NULL` it holds)."""
    return (
        select(runs.c.id, runs.c.status, runs.c.restarted_from)
        .where(runs.c.restarted_from.in_(list(run_ids)))
        .order_by(runs.c.created_at, runs.c.id)
    )


async def started_over(conn: AsyncConnection, rows: Iterable[Any]) -> dict[str, StartedOver]:
    """For each run of `rows` (with `id` and `root_run_id`) whose root was started over, that
    start over (`new_runs` of the roots)."""
    roots = {row.id: root_of(row) for row in rows}
    found = await new_runs(conn, roots.values())
    return {
        run_id: StartedOver(root, str(found[root].id), str(found[root].status))
        for run_id, root in roots.items()
        if root in found
    }


async def submitted_routes(conn: AsyncConnection, rows: Sequence[Any]) -> list[str | None]:
    """Each of `rows`' (with `route` and `restarted_from`) route of the submission it repeats:
    its own, or for a start over the route of the run at the start of its chain
    (`original_routes`, read only when a row is a start over); None when that run is gone."""
    repeated = [
        row.restarted_from
        if row.route == RunRoute.START_OVER.value and row.restarted_from is not None
        else None
        for row in rows
    ]
    wanted = {run_id for run_id in repeated if run_id is not None}
    originals = await original_routes(conn, wanted) if wanted else {}
    return [
        row.route if of is None else originals.get(of)
        for row, of in zip(rows, repeated, strict=True)
    ]


MAX_CHAIN_LINKS = 1_000
"""The most links of a chain of start overs `original_routes` follows."""


async def original_routes(conn: AsyncConnection, run_ids: Iterable[str]) -> dict[str, str | None]:
    """For each of `run_ids` (runs started over from: a start over's `restarted_from`), the
    route of the run at the start of its chain of start overs: how the submission that every
    start over in the chain repeats chose its version (a start over's own route,
    `start_over`, says only that an operator made it). One read per `ID_CHUNK` ids per link
    of the longest chain (a chain ends: each link names an older run); a run not found is
    left out."""
    found: dict[str, str | None] = {}
    reading = {run_id: run_id for run_id in run_ids}  # asked -> the run of its chain to read
    # Bounded all the same: a chain that loops (rows restored or edited by hand) must not
    # hold a request for ever; what it did not reach is left out, as a run not found.
    for _ in range(MAX_CHAIN_LINKS):
        if not reading:
            break
        rows: dict[str, Any] = {}
        for chunk in chunks(sorted(set(reading.values()))):
            query = select(runs.c.id, runs.c.route, runs.c.restarted_from)
            rows.update(
                (row.id, row)
                for row in (await conn.execute(query.where(runs.c.id.in_(chunk)))).all()
            )
        further: dict[str, str] = {}
        for asked, at in reading.items():
            row = rows.get(at)
            if row is None:
                continue
            if row.route == RunRoute.START_OVER.value and row.restarted_from is not None:
                further[asked] = row.restarted_from
            else:
                found[asked] = row.route
        reading = further
    return found


def root_started_over(run_id: ColumnElement[Any], root_run_id: ColumnElement[Any]) -> Exists:
    """True for a run (by its `id` and `root_run_id` columns) whose root was started over:
    an EXISTS on the partial index of `restarted_from`, so a batch preview counts them in the
    statement that counts its runs."""
    new = runs.alias()
    return exists().where(new.c.restarted_from == func.coalesce(root_run_id, run_id))


def start_over_next(new_run_id: str, new_status: str) -> str:
    """What an operator can do about the run a start over created, by its status: the advice
    a second start over and the refusals below give."""
    if new_status == RunStatus.FAILED.value:
        return (
            f"retry it (`schemabridge runs retry {new_run_id}`) or start it over "
            f"(`schemabridge runs start-over {new_run_id}`)"
        )
    if new_status == RunStatus.CANCELLED.value:
        return f"start it over (`schemabridge runs start-over {new_run_id}`) to run the input again"
    if new_status == RunStatus.SUCCEEDED.value:
        return "it has done the work"
    return f"it is still going (`schemabridge runs watch {new_run_id}`)"


def started_over_refusal(run_id: str, state: str, found: StartedOver, action: str) -> WrongState:
    """The refusal of `action` ("retry", "resolve", "reprocess") on `run_id` (in `state`),
    whose root `found` names was started over. 409 `started_over`, `details`: `state`,
    `startedOverRun` (the run started over: `run_id` or its root), `newRunId`,
    `newRunStatus`."""
    new, status = found.new_run_id, found.new_status
    if found.root_id == run_id:
        which = f"run {run_id} was started over"
    else:
        which = f"run {run_id} is under run {found.root_id}, which was started over"
    refusal = WrongState(
        f"{which} as run {new}, {status}: a {action} would run its steps and send their "
        f"calls a second time, beside that run's. Look at run {new} instead: "
        f"{start_over_next(new, status)}. A run can be {_DONE.get(action, action)} only "
        "while nobody has started it over",
        state=state,
        code=STARTED_OVER,
        run_id=run_id,
    )
    refusal.details.update(startedOverRun=found.root_id, newRunId=new, newRunStatus=status)
    return refusal


async def lock_roots(conn: AsyncConnection, rows: Iterable[Any]) -> set[str]:
    """Lock the rows of the root runs of `rows` (with `id` and `root_run_id`) until the
    transaction ends, in id order (a batch's roots as concurrent batches take them), so that
    no start over of them commits meanwhile and one that already did is read after it. Taken
    after the action's other locks: a worker's flush takes a root last too. On PostgreSQL the
    lock is FOR KEY SHARE: it conflicts with the start over's FOR UPDATE (and a purge's, which
    marks a root as being deleted), which is all it is for, and not with the plain UPDATEs of
    a worker's flush or of another retry, which could otherwise wait on it in a cycle.

    Answers the roots a purge has marked (`purge_started_at`), read under the lock, as the
    latest commit left them: the action then rolls back (`engine.store.past_retention`)."""
    roots = sorted({root_of(row) for row in rows})
    marked: set[str] = set()
    for chunk in chunks(roots):
        locking = (
            select(runs.c.id, runs.c.purge_started_at)
            .where(runs.c.id.in_(chunk))
            .order_by(runs.c.id)
        )
        locked = await conn.execute(locking.with_for_update(read=True, key_share=True))
        marked.update(str(row.id) for row in locked if row.purge_started_at is not None)
    return marked


@dataclass(frozen=True)
class Meanwhile:
    """What an action's end finds under its roots' locks (`started_over_meanwhile`): the
    start overs of its runs' roots, and those roots a purge has marked as being deleted."""

    started_over: dict[str, StartedOver]
    marked: set[str]


async def started_over_meanwhile(conn: AsyncConnection, rows: Sequence[Any]) -> Meanwhile:
    """`started_over(rows)` read again once their roots are locked (`lock_roots`), at the end
    of an action that checked them before its writes: a start over that committed since that
    check is found here, before the action commits, and so is a purge's mark."""
    if not rows:
        return Meanwhile({}, set())
    marked = await lock_roots(conn, rows)
    return Meanwhile(await started_over(conn, rows), marked)


async def refuse_started_over(conn: AsyncConnection, row: Any, action: str) -> bool:
    """Refuse `action` on the run of `row` (`id`, `status`, `root_run_id`) when its root was
    started over. Called once the action has written (the refusal rolls it back): its root is
    locked first (`started_over_meanwhile`). Answers whether a purge has marked the root
    meanwhile (the caller rolls back too)."""
    found = await started_over_meanwhile(conn, [row])
    start = found.started_over.get(row.id)
    if start is not None:
        raise started_over_refusal(row.id, row.status, start, action)
    return bool(found.marked)
