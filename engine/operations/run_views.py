"""Views of runs and steps built from the store's records, and each step's attempt history
assembled from the run's log.

Attempts are not stored as rows: the GATEWAY writes one log line per HTTP attempt (data:
`attempt`, `maxAttempts`, `status`, `durationMs`, `error`, `retryInMs`, `worker` when its
worker runs as a service, and `request` when the attempt failed, with `bodyExcerpt` when it
failed on an answer) and one per attempt admission refused (data: `attempt`, `kind`,
`error`, `worker`), with the step's vertex id. A step's
history is those lines in order. Each line names its execution (`execution`: the step's
claim number, its `attempts` when claimed); a line written before lines did starts a new
execution where the attempt number starts again (a redispatch, a re-run after a lost lease,
an operator's retry).

An execution can end without any attempt line: its worker was killed mid-call, or stopped and
gave its claim back, or its run failed while it waited for its next attempt. The requeue that
takes the step back writes a line saying so (data: `lost`, `execution`, `worker`, see
`engine.store.queue.LOST_REASONS`): the history shows it as an entry of that execution with
`lost` set and no HTTP status, since none was read, though a call may have been sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from engine.coordination.heartbeat import ServiceStatus
from engine.operations.fix_first import run_fix_first_words
from engine.operations.submission import client_key
from engine.operations.views import (
    UNKNOWN_KIND,
    AttemptView,
    BreakerRef,
    ChildCauseView,
    ErrorKind,
    ErrorView,
    FanoutProgress,
    HeldChildren,
    HolderView,
    LogEntry,
    LostExecution,
    RunDetail,
    RunProgress,
    RunSummary,
    SentRequestView,
    SpawnerCounts,
    StepProgress,
    StepView,
    WaitingChildren,
    WaitingView,
)
from engine.store import records
from engine.store.listing import LogRecord
from engine.store.models import TERMINAL_RUN_STATUSES, RunStatus, StepStatus
from engine.store.records import RunHeader, RunRecord, StepRecord, WaitingGroup
from schemas.definitions import Workflow
from schemas.errors import BreakerRefusal, FailureKind
from schemas.waiting import NO_WORKER_MESSAGE, WaitReason, reason_words, wait_text

_TERMINAL = frozenset(s.value for s in TERMINAL_RUN_STATUSES)
_KINDS = frozenset(kind.value for kind in FailureKind)


def _kind(value: Any) -> ErrorKind:
    """A stored failure kind as the views type it: one `FailureKind` does not name (a row an
    older release wrote) is `unknown`, not an answer that breaks its own schema."""
    return FailureKind(value) if value in _KINDS else UNKNOWN_KIND


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def sent_view(sent: Any) -> SentRequestView | None:
    """A failed attempt's stored `request` (`SentRequest.as_dict()`) as a view; None when
    there is none, or it is not what the gateway writes (a log line's data is free-form)."""
    if not isinstance(sent, Mapping):
        return None
    method, url = _text(sent.get("method")), _text(sent.get("url"))
    if method is None or url is None:
        return None
    names = sent.get("headerNames")
    return SentRequestView(
        method=method,
        url=url,
        header_names=[n for n in names if isinstance(n, str)] if isinstance(names, list) else [],
        body_excerpt=_text(sent.get("bodyExcerpt")) or "",
        body_bytes=_int(sent.get("bodyBytes")) or 0,
        body_truncated=sent.get("bodyTruncated") is True,
    )


def error_view(
    error: Any, *, sent: bool = True, vertex_id: str | None = None, tenant_id: str | None = None
) -> ErrorView | None:
    """A stored error (`StepFailure.as_dict()`, plus `vertexId` on a run) as a view; anything
    else stored there is shown as its text. `sent=False` leaves out what the request sent:
    lists and progress streams carry an error per run, and read only its summary.
    `vertex_id`: the step the error is stored on, whose error has no `vertexId` of its own:
    a step's error names its vertex as the run's error does. `tenant_id`: the run's tenant,
    whose layer a breaker refusal of the tenant layer names (`breaker`)."""
    if error is None:
        return None
    if not isinstance(error, Mapping):
        return ErrorView(kind=UNKNOWN_KIND, message=str(error), vertex_id=vertex_id)
    http = error.get("http")
    http = http if isinstance(http, Mapping) else {}
    return ErrorView(
        kind=_kind(error.get("kind")),
        message=str(error.get("message", "")),
        vertex_id=_text(error.get("vertexId")) or vertex_id,
        http_status=_int(http.get("status")),
        body_excerpt=_text(http.get("bodyExcerpt")),
        attempts=_int(http.get("attempts")),
        retry_after_s=_number(error.get("retryAfterS")),
        child_cause=_child_cause(error.get("childCause")),
        children_cancelled=_int(error.get("childrenCancelled")),
        request=sent_view(http.get("request")) if sent else None,
        breaker=breaker_ref(BreakerRefusal.of_error(error), tenant_id),
    )


def _child_cause(value: Any) -> ChildCauseView | None:
    if not isinstance(value, Mapping):
        return None
    count, read = _int(value.get("count")), _int(value.get("read"))
    if count is None or read is None:
        return None
    return ChildCauseView(kind=_kind(value.get("kind")), count=count, read=read)


def summary(
    run: RunRecord | RunHeader, *, sent: bool = False, started_over_as: str | None = None
) -> RunSummary:
    """A run as lists show it (`sent`: with what its error's request sent, as one run's
    detail shows it; `started_over_as`: the run its start over made, read by the caller)."""
    return RunSummary(
        id=run.id,
        workflow=run.workflow_name,
        version=run.workflow_version,
        tenant_id=run.tenant_id,
        status=run.status,
        created_at=run.created_at,
        started_at=run.started_at,
        ended_at=run.ended_at,
        parent_run_id=run.parent_run_id,
        parent_vertex_id=run.parent_vertex_id,
        item_index=run.item_index,
        root_run_id=run.root_run_id,
        restarted_from=run.restarted_from,
        started_over_as=started_over_as,
        dlq_at=run.dlq_at,
        route=run.route,
        error=error_view(run.error, sent=sent, tenant_id=run.tenant_id),
    )


_LOST = frozenset(get_args(LostExecution))


def _attempt(
    line: LogRecord, execution: int, number: int, show_worker: bool, lost: LostExecution | None
) -> AttemptView:
    data: Mapping[str, Any] = line.data
    refused = "maxAttempts" not in data and isinstance(data.get("kind"), str)
    return AttemptView(
        execution=execution,
        attempt=number,
        at=line.at,
        level=line.level,
        message=line.message,
        http_status=_int(data.get("status")),
        duration_ms=_number(data.get("durationMs")),
        error=_text(data.get("error")),
        retry_in_ms=_int(data.get("retryInMs")),
        refused=_kind(data["kind"]) if refused else None,
        request=sent_view(data.get("request")),
        body_excerpt=_text(data.get("bodyExcerpt")),
        lost=lost,
        worker=_text(data.get("worker")) if show_worker else None,
    )


def _next_execution(history: Sequence[AttemptView], number: int) -> int:
    """The execution of an attempt whose line does not name one (written before lines did):
    the last one's, unless the attempt number starts again or the last execution was lost."""
    if not history:
        return 1
    last = history[-1]
    return last.execution + (1 if last.lost is not None or number <= last.attempt else 0)


def histories(lines: Iterable[LogRecord], *, show_worker: bool) -> dict[str, list[AttemptView]]:
    """Each step's attempts and lost executions, by vertex id, from the run's log lines
    (oldest first); `show_worker`: name the worker of each (False for a tenant key)."""
    found: dict[str, list[AttemptView]] = {}
    for line in lines:
        data = line.data if isinstance(line.data, Mapping) else {}
        number = _int(data.get("attempt"))
        lost = data.get("lost") if data.get("lost") in _LOST else None
        if line.vertex_id is None or (number is None and lost is None):
            continue
        history = found.setdefault(line.vertex_id, [])
        execution = _int(data.get("execution")) or _next_execution(history, number or 1)
        if number is None:
            # A lost execution: the attempt it was making, or about to make, after those it
            # logged (a call on the wire when its worker died writes no line).
            made = [a.attempt for a in history if a.execution == execution and a.lost is None]
            number = max(made, default=0) + 1
        history.append(_attempt(line, execution, number, show_worker, lost))
    return found


def _counts(step: StepRecord) -> SpawnerCounts | None:
    if step.children_total is None:
        return None
    return SpawnerCounts(
        total=step.children_total,
        succeeded=step.children_succeeded,
        failed=step.children_failed,
        cancelled=step.children_cancelled,
    )


_WAITING_STATUSES = frozenset({StepStatus.READY.value, StepStatus.RUNNING.value})


def waiting_view(
    step: StepRecord,
    now: float | None = None,
    tenant_id: str | None = None,
    *,
    no_worker: bool = False,
) -> WaitingView | None:
    """Why the step waits: only a READY step (parked, redispatched; due at `not_before`) or a
    RUNNING one (waiting in-process) waits; any other status has ended or holds. A RUNNING
    step's retry wait is due at its `not_before` too (written with the wait); after `now` it
    is over: the next attempt runs, and its result or next wait rewrites the row. Behind a
    breaker, the breaker its stored refusal names (`tenant_id`: the run's, the tenant layer's
    tenant). `no_worker`: no worker is alive, which a READY step with no recorded reason
    waits for (`WaitReason.NO_WORKER`)."""
    if no_worker and step.wait_reason is None and step.status == StepStatus.READY.value:
        return WaitingView(
            reason=WaitReason.NO_WORKER, message=NO_WORKER_MESSAGE, text=NO_WORKER_MESSAGE
        )
    if step.wait_reason is None or step.status not in _WAITING_STATUSES:
        return None
    until = step.not_before if step.status == StepStatus.READY.value else None
    if step.wait_reason == WaitReason.RETRY_BACKOFF.value:
        until = step.not_before
        if now is not None and until <= now:
            return None
    message = step.wait_message or ""
    text = message if now is None else wait_text(step.wait_reason, message, until, now)
    breaker = None
    if step.wait_reason == WaitReason.BREAKER_OPEN.value:
        breaker = breaker_ref(BreakerRefusal.of_error(step.error), tenant_id)
    return WaitingView(
        reason=step.wait_reason, message=message, until=until, text=text, breaker=breaker
    )


def breaker_ref(refusal: BreakerRefusal | None, tenant_id: str | None) -> BreakerRef | None:
    """The layer a breaker refusal names as the front doors link to it: a tenant layer with
    its tenant (`tenant_id`, the refused step's), the global layer with none."""
    if refusal is None or (refusal.layer == "tenant" and tenant_id is None):
        return None
    tenant = tenant_id if refusal.layer == "tenant" else None
    return BreakerRef(destination=refusal.destination, tenant_id=tenant)


def fanout_view(
    counts: Mapping[str, int],
    waiting: Iterable[WaitingGroup],
    now: float,
    held: Iterable[records.HeldChildren] = (),
    holders: Holders | None = None,
) -> FanoutProgress:
    """The fan-out's progress; with `held` (its running children by holder) and `holders`
    (the heartbeats), those held by a worker presumed dead, judged as a step's holder is: by
    the latest lease of each group's claims (a worker restarted under its name holds a group
    of its predecessor's claims beside its own: `restarted_holders_part` says which to read
    apart)."""
    dead: list[tuple[str, HeldChildren]] = []
    for group in held:
        holder = None if holders is None else claim_holder(group.worker, group.lease_until, holders)
        if holder is not None and holder.state == "presumed_dead":
            children = HeldChildren(
                holder=holder, children=group.children, lease_expires_at=group.lease_until
            )
            dead.append((group.worker or "", children))
    # Ties by worker (named or not): the groups come in no set order, and two reads listing
    # the same holders in turn would be two changes to a progress stream.
    dead.sort(key=lambda pair: (-pair[1].children, pair[0]))
    return FanoutProgress(
        **counts,
        presumed_dead=[children for _, children in dead],
        waiting_children=counts["pending"],
        waiting=[
            WaitingChildren(
                reason=group.reason,
                children=group.children,
                message=group.message,
                until=group.until,
                # Their messages share nothing: the reason in words, as the CLI says it
                # (a tour's monitor read "1,875 children waiting: (breaker open)").
                text=wait_text(group.reason, group.message, group.until, now)
                or reason_words(group.reason),
                breaker=breaker_ref(group.breaker, group.tenant_id),
            )
            for group in waiting
        ],
    )


@dataclass(frozen=True)
class Holders:
    """What is known of the workers holding a run's RUNNING steps when it is read."""

    statuses: Mapping[str, ServiceStatus] | None
    """By service id (`read_named_services`); None when Redis did not answer."""
    show_worker: bool
    """Name them: False for a tenant key (docs/security.md, 'What a tenant key reads')."""
    now: float
    lease_s: float | None = None
    """The claim lease (`Settings.lease_s`) of the reading process, for a holder whose
    heartbeat does not say its own (`ServiceStatus.lease_s`): a claim last renewed (its
    lease's end less the lease) before the live heartbeat's process started is not that
    process's. None: not judged."""


def holder_view(step: StepRecord, holders: Holders | None) -> HolderView | None:
    """Who holds a RUNNING step, and whether it is alive by its heartbeat (None: not RUNNING,
    or nothing was read)."""
    if step.status != StepStatus.RUNNING.value or holders is None:
        return None
    return claim_holder(step.claimed_by, step.lease_expires_at, holders)


def claim_holder(
    claimed_by: str | None, lease_expires_at: float | None, holders: Holders
) -> HolderView:
    """Who holds a claim (of the service `claimed_by`, with its lease ending at
    `lease_expires_at`) and whether it is alive by its heartbeat."""
    worker = claimed_by if holders.show_worker else None
    status = None
    if claimed_by is not None and holders.statuses is not None:
        status = holders.statuses.get(claimed_by)
    seen = None if status is None else status.last_seen
    if status is None or seen is None:
        # A holder whose heartbeat this Redis never saw is not known dead: with the embedded
        # Redis a separate worker process beats into its own.
        return HolderView(worker=worker, state="unknown")
    renewed = _renewed_before_start(lease_expires_at, status, holders.lease_s, holders.now)
    if renewed is not None:
        # A process killed and restarted at once under the same name: the live beat is its
        # successor's, which never held this claim; the holder was last seen renewing it.
        return HolderView(
            worker=worker,
            state="presumed_dead",
            last_seen=renewed,
            silent_s=round(max(0.0, holders.now - renewed), 1),
        )
    return HolderView(
        worker=worker,
        state="alive" if status.up else "presumed_dead",
        last_seen=seen,
        silent_s=round(max(0.0, holders.now - seen), 1),
    )


LEASE_CLOCK_SLACK_S = 1.0
"""How far a worker's clock, which set a lease's end, may be ahead of the reader's."""


def _renewed_before_start(
    lease_expires_at: float | None, status: ServiceStatus, lease_s: float | None, now: float
) -> float | None:
    """When a claim (its lease ending at `lease_expires_at`) was last renewed, if another
    process than the one beating under its holder's name now set it (`predecessor_leases`);
    else None. A lease further off than the live process's own is not dated: only that it
    came before the live process started is known."""
    leases = predecessor_leases(status, lease_s, now)
    holders_lease_s = status.lease_s if status.lease_s is not None else lease_s
    if leases is None or lease_expires_at is None or holders_lease_s is None:
        return None
    if not leases.hold(lease_expires_at):
        return None
    if leases.after is not None and lease_expires_at > leases.after:
        return status.started_at
    return lease_expires_at - holders_lease_s


def predecessor_leases(
    status: ServiceStatus, lease_s: float | None, now: float
) -> records.LeaseRanges | None:
    """The lease ends a live holder's predecessor under its name set and it could not have:
    renewed before it started, or (its heartbeat says its own lease) further off than that
    lease from now. None when nothing can be told (not up, no start or lease known).

    The lease is the holder's own when its heartbeat says it: a reader's longer one would date
    a live holder's renewal before it started. A lease further off than the live process's
    own was set by a predecessor started with a longer one (a tour restarted a worker leasing
    90 s as one leasing 30 s, and read its dead claims as held by the live one). The reader's
    lease says nothing of the holder's, so it never decides that."""
    own_lease_s = status.lease_s
    lease_s = own_lease_s if own_lease_s is not None else lease_s
    if not status.up or status.started_at is None or lease_s is None:
        return None
    after = None if own_lease_s is None else now + own_lease_s + LEASE_CLOCK_SLACK_S
    return records.LeaseRanges(before=status.started_at + lease_s, after=after)


def restarted_holders_part(
    group: records.HeldChildren, holders: Holders
) -> records.LeaseRanges | None:
    """The leases to count again when `group`'s claims were set by two processes under its
    worker's name (a worker restarted at once holds its predecessor's claims beside its own
    until they are taken back): its earliest and latest leases fall on either side of what
    the live process could have set. None when one process set them all: the group is
    judged whole by its latest lease."""
    status = None if holders.statuses is None else holders.statuses.get(group.worker)
    if status is None or status.last_seen is None:
        return None
    leases = predecessor_leases(status, holders.lease_s, holders.now)
    first, last = group.lease_from, group.lease_until
    if leases is None or first is None or last is None:
        return None
    every = last < leases.before or (leases.after is not None and first > leases.after)
    none = first >= leases.before and (leases.after is None or last <= leases.after)
    return None if every or none else leases


def step_view(
    step: StepRecord,
    workflow: Workflow,
    history: list[AttemptView],
    now: float | None = None,
    holders: Holders | None = None,
    *,
    tenant_id: str | None = None,
    no_worker: bool = False,
) -> StepView:
    vertex = workflow.vertices.get(step.vertex_id)
    running = step.status == StepStatus.RUNNING.value
    return StepView(
        vertex_id=step.vertex_id,
        type=None if vertex is None else vertex.type.value,
        status=step.status,
        attempts=step.attempts,
        auto_retries=step.auto_retries,
        output=step.output,
        error=error_view(step.error, vertex_id=step.vertex_id, tenant_id=tenant_id),
        not_before=step.not_before,
        created_at=step.created_at,
        started_at=step.started_at,
        ended_at=step.ended_at,
        children=_counts(step),
        waiting=waiting_view(step, now, tenant_id, no_worker=no_worker),
        lease_expires_at=step.lease_expires_at if running else None,
        holder=holder_view(step, holders),
        history=history,
    )


def detail(
    run: RunRecord,
    workflow: Workflow,
    *,
    steps: Iterable[StepRecord],
    lines: Iterable[LogRecord],
    restarts: list[str],
    fanout: FanoutProgress,
    now: float | None = None,
    holders: Holders | None = None,
    deployment_id: str | None = None,
    root_started_over_as: str | None = None,
    restarted_from_purged: bool = False,
    no_worker: bool = False,
    show_worker: bool,
) -> RunDetail:
    """The whole view of one run (`now`: when it is read, which ends a past retry wait;
    `holders`: the liveness of its RUNNING steps' holders; `deployment_id`: the deployment it
    belongs to; `root_started_over_as`: for a child, the run a start over of its root made;
    `restarted_from_purged`: the run it started over from is deleted; `no_worker`: no worker
    is alive, as its READY steps say; `show_worker`: name the worker
    of each attempt, False for a tenant key, docs/security.md)."""
    by_vertex = histories(lines, show_worker=show_worker)
    steps = list(steps)
    # The first of `restarts`: the run the start over's idempotency key names, as a list page
    # and a retry's refusal name it.
    started_over_as = restarts[0] if restarts else root_started_over_as
    return RunDetail(
        **summary(run, sent=True, started_over_as=started_over_as).model_dump(),
        input=run.input,
        output=run.output,
        item=run.item,
        timeout_tier=run.timeout_tier,
        idempotency_key=client_key(run.idempotency_key),
        created_by=run.created_by,
        pinned_versions=run.pinned_versions,
        restarts=restarts,
        restarted_from_purged=restarted_from_purged,
        steps=[
            step_view(
                s,
                workflow,
                by_vertex.get(s.vertex_id, []),
                now,
                holders,
                tenant_id=run.tenant_id,
                no_worker=no_worker,
            )
            for s in steps
        ],
        fanout=fanout,
        deployment_id=deployment_id,
        fix_first=run_fix_first(run, steps, workflow, started_over=started_over_as is not None),
    )


def run_fix_first(
    run: RunRecord, steps: Sequence[StepRecord], workflow: Workflow, *, started_over: bool
) -> str | None:
    """The fix-first warning of a FAILED run (`run_fix_first_words`), None for any other."""
    if run.status != RunStatus.FAILED.value:
        return None
    return run_fix_first_words(
        steps,
        workflow,
        version=run.workflow_version,
        tenant_id=run.tenant_id,
        run_id=run.id,
        child_run=run.parent_run_id is not None,
        started_over=started_over,
    )


def progress(
    run: RunRecord,
    *,
    steps: Iterable[StepRecord],
    fanout: FanoutProgress,
    now: float,
    no_worker: bool = False,
) -> RunProgress:
    """What a progress stream shows of one run (read at `now`; `no_worker`: as `detail`)."""
    return RunProgress(
        id=run.id,
        status=run.status,
        ended=run.status in _TERMINAL,
        ended_at=run.ended_at,
        error=error_view(run.error, sent=False, tenant_id=run.tenant_id),
        steps=[
            StepProgress(
                vertex_id=s.vertex_id,
                status=s.status,
                children=_counts(s),
                waiting=waiting_view(s, now, run.tenant_id, no_worker=no_worker),
            )
            for s in steps
        ],
        fanout=fanout,
    )


def log_entry(line: LogRecord, *, show_worker: bool) -> LogEntry:
    """A log line as `GET /runs/{id}/logs` pages it; `show_worker` False (a tenant key) leaves
    out the service id an attempt's line keeps (`data.worker`), as its history does."""
    data = line.data
    if not show_worker and isinstance(data, Mapping) and "worker" in data:
        data = {key: value for key, value in data.items() if key != "worker"}
    return LogEntry(
        id=line.id,
        at=line.at,
        level=line.level,
        message=line.message,
        vertex_id=line.vertex_id,
        data=data,
    )
