"""Runs: submit, read, list with keyset pagination, children, logs, wait for an end.

Tenant scope: every read takes `tenant`; when set, a run of another tenant is
`NotFound(code="run_not_found")` exactly like a run that does not exist, and never appears in
a list, so a scoped caller cannot even learn that it exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.coordination.heartbeat import ServiceStatus, read_named_services
from engine.coordination.redis_client import COORDINATION_ERRORS
from engine.coordination.run_events import RunWatch
from engine.operations import id_prefixes, routing, run_views, submission
from engine.operations.boundary import store_boundary
from engine.operations.pagination import (
    MAX_INTEGER,
    MAX_ROW_ID,
    check_limit,
    decode_cursor,
    encode_cursor,
    invalid_cursor,
    invalid_filter,
    scope_digest,
    time_and_id_key,
)
from engine.operations.read_pacing import ReadPacing
from engine.operations.row_cache import RowCache, shared_row_cache
from engine.operations.views import (
    ChildDuration,
    FanoutProgress,
    ListProgress,
    LogList,
    LongTail,
    RunDetail,
    RunEnd,
    RunFilter,
    RunIdMatches,
    RunList,
    RunProgress,
    RunSummary,
    SpawnerCounts,
    SubmitResult,
)
from engine.operations.worker_liveness import WorkersAlive
from engine.operations.workflows import not_found as workflow_not_found
from engine.operations.workflows import require_published, unknown_workflow
from engine.store import UnknownWorkflow
from engine.store.actions_store import no_step
from engine.store.catalogue import QuotaExhausted
from engine.store.committed_changes import SERVING_TOPIC
from engine.store.models import TERMINAL_RUN_STATUSES, RunRoute, RunStatus, StepStatus
from engine.store.monitor import RunProgressRow
from engine.store.operator_actions import run_not_found
from engine.store.records import (
    HeldChildren,
    RunHeader,
    RunRecord,
    ServingRecord,
    StepRecord,
    VersionRecord,
)
from engine.validation import validate_input
from schemas.clock import utc_moment
from schemas.close_names import typo_clause
from schemas.definitions import RESERVED_WORKFLOWS, SpawnerVertex
from schemas.durations import duration
from schemas.errors import (
    IdempotencyConflict,
    InvalidRequest,
    LimitReached,
    NotFound,
    Problem,
    QuotaExceeded,
)
from schemas.tenant_ids import TENANT_ID_RULE, check_tenant_id, reserved_words

if TYPE_CHECKING:
    from engine.runtime import Runtime

logger = logging.getLogger(__name__)

HISTORY_LINES = 5_000
"""The most recent step log lines a run's detail reads to assemble attempt histories."""
MAX_WAIT_S = 3_600.0
WAIT_FALLBACK_S = 1.0
"""`wait` reads the run when a run event says it may have ended, and at least this often
anyway (an event is a hint that can be lost)."""
WAIT_MAX_PASSED_EVENTS = 50
"""Events that say the run changed without ending which `wait` lets pass before it reads the
run all the same: a bound on its turns between reads, whatever a busy fan-out sends."""
WAIT_MIN_READ_S = 0.05
"""`wait` reads the run at most this often over time, however many events arrive."""
WAIT_READ_BURST = 3
"""Reads `wait` may make at once, one per event, before `WAIT_MIN_READ_S` spaces them
(`engine.operations.read_pacing`): a short run's few events (its step claimed, the run ended)
are each read as they come, where a fixed spacing held a `?wait=true` answer back for most of
50 ms (p50 62 → 21-35 ms for a run of one 1 ms call, one client, bench/RESULTS.md); a run that
changes all the time (a fan-out) is still read at most every `WAIT_MIN_READ_S`."""
MAX_RUN_ID_CHARS = 36
MAX_LONG_TAIL = 50
"""The most children `long_tail` lists in each of its two lists."""
SERVING_CACHE_MAX_AGE_S = 5.0
"""A kept routing row is read again after this long (what a change whose token Redis did not
take costs)."""
SERVING_CACHE_MAX_ROWS = 10_000
_STATUSES = frozenset(s.value for s in RunStatus)
"""The statuses a run can be in (a filter on a step's PENDING would only ever answer nothing)."""
_ROUTES = frozenset(r.value for r in RunRoute)
_TERMINAL = frozenset(s.value for s in TERMINAL_RUN_STATUSES)


def _run_status(status: str | None) -> str | None:
    """A status filter in the capitals the store keeps (`failed` is FAILED, as the CLI takes
    it), refused with the accepted ones when no run can be in it."""
    if status is None:
        return None
    if status.upper() not in _STATUSES:
        known = ", ".join(sorted(_STATUSES))
        hint = ""
        if status.upper() in ("PENDING", "WAITING"):
            # The fan-out's progress counts waiting children: they are RUNNING runs.
            hint = "; no run is PENDING: a waiting child is RUNNING, marked `waiting`"
        typo = typo_clause(status.upper(), sorted(_STATUSES))
        raise invalid_filter(
            f"unknown run status {status!r}{typo}; one of {known} (any case){hint}",
            "status",
            _STATUSES,
        )
    return status.upper()


def _roots_only(selection: RunFilter) -> bool:
    """Whether `selection` covers root runs only: as asked, else roots unless it names a
    `parent` (whose children are never roots). Every list and batch retry reads it so, so
    the same filter picks the same runs in each (docs/architecture.md, 'Keyset
    pagination')."""
    if selection.parent is None:
        return selection.roots_only is not False
    if selection.roots_only:
        raise invalid_filter(
            "a parent's children are never root runs: give parent without roots=true "
            "(roots=false, or no roots at all, lists its children)",
            "roots",
        )
    return False


def _check_parent(parent: str | None) -> None:
    """Refuse a `parent` that reads as a prefix of a run's id (the 8 characters the monitor
    shows): no run's id equals it, so it would select nothing, and an empty list reads as
    "that run has no children". Like the routes under `/runs/{id}`, the filter takes the
    whole id, and the refusal says how to find it."""
    if id_prefixes.reads_as_prefix(parent):
        raise invalid_filter(
            f"parent takes a run's whole id, as GET /runs/{{id}} does; {parent!r} reads as a "
            f"prefix of one: GET /run-ids?prefix={parent} lists the runs whose id starts "
            "with it",
            "parent",
        )


def checked_filter(selection: RunFilter) -> RunFilter:
    """`selection` checked, its status and route in the case the store keeps (`failed` is
    FAILED, `Serving` serving) and its `roots_only` decided (`_roots_only`): the filter every
    list and batch retry reads."""
    roots_only = _roots_only(selection)
    _check_parent(selection.parent)
    status = _run_status(selection.status)
    route = None if selection.route is None else selection.route.lower()
    if route is not None and route not in _ROUTES:
        known = ", ".join(sorted(_ROUTES))
        typo = typo_clause(route, sorted(_ROUTES))
        raise invalid_filter(
            f"unknown route {selection.route!r}{typo}; one of {known} (any case)",
            "route",
            _ROUTES,
        )
    if selection.version is not None:
        if selection.workflow is None:
            raise invalid_filter(
                "a version filter needs the workflow it is a version of", "version"
            )
        if isinstance(selection.version, bool) or selection.version < 1:
            raise invalid_filter(
                f"a workflow version is 1 or more; got {selection.version!r}", "version"
            )
    for parameter, bound in (
        ("createdAfter", selection.created_after),
        ("createdBefore", selection.created_before),
    ):
        if bound is not None and not math.isfinite(bound):
            raise invalid_filter(
                "createdAfter and createdBefore are finite epoch seconds", parameter
            )
    after, before = selection.created_after, selection.created_before
    if after is not None and before is not None and after > before:
        # Swapped bounds match nothing: said, not answered with an empty page that reads as
        # "no run in that window". Equal bounds are an empty window, not a mistake.
        raise invalid_filter(
            f"createdAfter ({utc_moment(after)}) is later than createdBefore "
            f"({utc_moment(before)}): no run is "
            "created in between; were they swapped? createdAfter is the window's start "
            "(inclusive), createdBefore its end (exclusive)",
            "createdBefore",
        )
    if (status, route, roots_only) == (selection.status, selection.route, selection.roots_only):
        return selection
    return dataclasses.replace(selection, status=status, route=route, roots_only=roots_only)


def _child_key(keys: list[Any]) -> tuple[str, int]:
    match keys:
        case [str() as vertex_id, int() as index] if not isinstance(index, bool):
            if 0 <= index <= MAX_INTEGER:
                return vertex_id, index
    raise invalid_cursor("it was altered")


def _list_progress(row: RunProgressRow | None) -> ListProgress | None:
    if row is None:
        return None
    children = None
    if row.children_total is not None:
        children = SpawnerCounts(
            total=row.children_total,
            succeeded=row.children_succeeded,
            failed=row.children_failed,
            cancelled=row.children_cancelled,
        )
    return ListProgress(
        steps=row.steps, steps_done=row.steps_done, children=children, waiting=row.waiting
    )


def _log_after(after: int | str | None) -> int:
    if after is None:
        return 0
    line = int(after) if isinstance(after, str) and after.isascii() and after.isdigit() else after
    if isinstance(line, int) and not isinstance(line, bool) and 0 <= line <= MAX_ROW_ID:
        return line
    raise invalid_cursor(f"it is the id of a log line (0 to {MAX_ROW_ID}); got {after!r}")


class RunOperations:
    """Runs: submit, read, list with keyset pagination, children, logs, wait for an end."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._store = runtime.store
        self._gauge = submission.ReadyGauge(
            runtime.store, runtime.clock, runtime.settings.submit_max_ready
        )
        self._serving: RowCache[ServingRecord] = shared_row_cache(
            runtime,
            SERVING_TOPIC,
            max_age_s=SERVING_CACHE_MAX_AGE_S,
            max_rows=SERVING_CACHE_MAX_ROWS,
        )
        """The routing rows submissions read, kept under their change token
        (`engine.operations.row_cache`; the store reports every committed change)."""
        self._workers_alive = WorkersAlive(runtime)

    # ── submit ──────────────────────────────────────────────────────────────────────────────

    @store_boundary
    async def submit(
        self,
        workflow: str,
        input: Any,
        *,
        tenant_id: str = "default",
        idempotency_key: str | None = None,
        version: int | None = None,
        synchronous: bool = False,
        child_versions: Mapping[str, int] | None = None,
        actor: str | None = None,
    ) -> SubmitResult:
        """Start a run of `workflow` with `input`: of `version` when given, else of the
        version routing picks (the serving version, or a running deployment's candidate for its
        share of runs; see `engine.operations.routing`). The run records which and how.

        `child_versions`: the version each named child workflow gets in this run tree where a
        spawner names none, instead of its serving version (`schemabridge run` pins the
        versions it has just published, so what serves for other clients does not change). Not
        part of an idempotent submission's identity. An unknown name or version:
        `NotFound(code="workflow_not_found")`.

        `synchronous`: the caller waits for the run's end (REST `?wait=true`), so its GATEWAY
        calls run under the gateway timeout tier (`TIMEOUT_GATEWAY_MS`, 15 s) instead of the
        tier the workflow would get (see docs/architecture.md, 'Timeout tiers'). A repeated
        submission answers the run the first one created, whatever its tier.

        Refusals: unknown workflow or version `NotFound(code="workflow_not_found")`; a system
        workflow `InvalidRequest(code="system_workflow")`; an input over `max_input_bytes` or
        `max_nesting_depth` `InvalidRequest(code="input_too_large" / "input_too_deep")`; input
        the workflow's inputSchema refuses `InvalidRequest(code="invalid_input")` with the
        problems; the tenant's run quota used up `LimitReached(code="quota_exceeded")`; the
        ready queue at `submit_max_ready` `LimitReached(code="queue_full", retry_after_s=5)`.

        `actor`: who submits it, in the operator actions' words (`key:<id>`, `demo`, `cli`),
        stored as the run's `created_by` by the creating INSERT itself and named in its
        first log line; every front door passes one (None: code that names nobody, tests).

        Idempotency: with an `idempotency_key` (scoped to the tenant), submitting the same
        request again returns the run the first submission created (`created` False), also
        when both race; the same key with another workflow, version, input or tenant is
        `IdempotencyConflict`. A repeated submission is answered even when a limit would
        refuse a new one (it creates nothing), and changes nothing of the run: its
        `created_by` stays the first submitter's, whoever repeats it.
        """
        check_tenant_id(tenant_id)
        reserved = reserved_words(tenant_id)
        if reserved is not None:
            raise InvalidRequest(
                reserved, code="invalid_tenant", details={"allowed": TENANT_ID_RULE}
            )
        submission.check_key(idempotency_key)
        settings = self._runtime.settings
        submission.check_input_limits(
            input, max_bytes=settings.max_input_bytes, max_depth=settings.nesting_depth_limit
        )
        request = submission.Request(workflow, version, input, tenant_id)
        digest = submission.request_hash(workflow, version, input, tenant_id)  # JSON or refused
        run_id = str(uuid.uuid4())
        key = None if idempotency_key is None else submission.stored_key(tenant_id, idempotency_key)
        record, route, serving = await self._routed(workflow, version, key or run_id)
        for name, child_version in (child_versions or {}).items():
            await self._version(name, child_version)  # unknown: not found
        problems = validate_input(record.workflow, input)
        if problems:
            refusal, ended = await self._input_refused(record, route, serving, input, problems)
            if not ended:
                raise refusal
            # The candidate's deployment ended while this request was routed to it: the
            # routing row as it is now decides, read from the store (once).
            record, route, serving = await self._routed(
                workflow, version, key or run_id, fresh=True
            )
            problems = validate_input(record.workflow, input)
            if problems:
                raise (await self._input_refused(record, route, serving, input, problems))[0]
        if key is not None:
            existing = await self._store.run_by_key(key)
            if existing is not None:
                return self._repeated(existing, request, digest, idempotency_key)
        await self._gauge.check()
        try:
            run, created = await self._store.create_run(
                record,
                input,
                tenant_id=tenant_id,
                timeout_tier=submission.timeout_tier(record.workflow, synchronous=synchronous),
                run_id=run_id,
                idempotency_key=key,
                request_hash=digest,
                count_in_quota=True,
                route=route.value,
                child_versions=child_versions,
                created_by=actor,
            )
        except QuotaExhausted as exc:
            raise await self._quota_exceeded(tenant_id, str(exc)) from exc
        if not created:
            return self._repeated(run, request, digest, idempotency_key)
        await self._runtime.wakeup.notify()
        return SubmitResult(run=run_views.summary(run), created=True)

    async def _quota_exceeded(self, tenant_id: str, message: str) -> LimitReached:
        """The refusal of a tenant without runs left, with its quota's figures (read after
        the refusing transaction; a quota removed meanwhile leaves the store's message)."""
        quota = await self._store.get_quota(tenant_id)
        if quota is None:
            return LimitReached(message, code="quota_exceeded")
        max_runs, used_runs = quota
        return QuotaExceeded(tenant_id, used_runs=used_runs, max_runs=max_runs)

    async def _routed(
        self, workflow: str, version: int | None, sticky_key: str, *, fresh: bool = False
    ) -> tuple[VersionRecord, RunRoute, ServingRecord | None]:
        """The version a submission gets, how it was chosen and the routing row that chose it
        (None: the request named the version, or the workflow has no routing row). The row
        is kept in memory under its change token (`fresh`: read from the store instead);
        versions themselves are cached."""
        if workflow in RESERVED_WORKFLOWS:
            raise InvalidRequest(
                f"{workflow} is a system workflow: the engine starts its runs itself",
                code="system_workflow",
            )
        if version is not None:
            return await self._version(workflow, version), RunRoute.PINNED, None
        serving = await (
            self._store.serving(workflow)
            if fresh
            else self._serving.get(workflow, lambda: self._store.serving(workflow))
        )
        if serving is None:  # no routing row (published before routing existed): the latest
            return await self._version(workflow, None), RunRoute.SERVING, None
        chosen, route = routing.choose(serving, sticky_key)
        return await self._version(workflow, chosen), route, serving

    async def _input_refused(
        self,
        record: VersionRecord,
        route: RunRoute,
        serving: ServingRecord | None,
        run_input: Any,
        problems: list[Problem],
    ) -> tuple[InvalidRequest, bool]:
        """The refusal of an input `record`'s inputSchema refuses, naming the version (the same
        request may be routed to another), and whether the deployment that routed it to its
        candidate has ended meanwhile (then the caller routes it again). Routed to a running
        deployment's candidate while the serving version accepts the input, the refusal is
        the candidate's doing: it is counted on the deployment (a failed run of the candidate,
        `count_refusal`: one UPDATE, in this path only) and the message says so. An input both
        versions refuse is the client's mistake and counts for neither."""
        name, number = record.name, record.version
        message = f"the input does not match the inputSchema of {name} v{number}"
        details: dict[str, Any] = {"workflow": name, "version": number}
        ended = False
        deployment_id = None if serving is None else serving.deployment_id
        if route is RunRoute.CANDIDATE and serving is not None and deployment_id is not None:
            details["deploymentId"] = deployment_id
            message += (
                f", the candidate of deployment {deployment_id}, which routed this request to it"
            )
            baseline = await self._version(name, serving.serving_version)
            if validate_input(baseline.workflow, run_input):
                message += f" (v{serving.serving_version}, the serving version, refuses it too)"
            elif await self._store.count_refusal(deployment_id):
                message += (
                    f"; v{serving.serving_version}, the serving version, accepts it, so the "
                    f"deployment counts this refusal as a failed run of v{number}"
                )
            else:
                ended = True
        refusal = InvalidRequest(message, code="invalid_input", problems=problems, details=details)
        return refusal, ended

    async def _version(self, workflow: str, version: int | None) -> VersionRecord:
        if version is not None and (isinstance(version, bool) or version < 1):
            raise workflow_not_found(workflow, version)
        try:
            return await self._store.get_version(workflow, version)
        except UnknownWorkflow as exc:
            raise await unknown_workflow(self._store, workflow, version) from exc

    @staticmethod
    def _repeated(
        run: RunRecord, request: submission.Request, digest: str, key: str | None
    ) -> SubmitResult:
        """The answer to a request whose key already names `run`: that run when the request
        is the same, else `IdempotencyConflict` naming what differs (never an input's
        values: only where the input first differs), so the client knows which of its
        requests changed, e.g. a version named where the first request left it to routing."""
        if run.request_hash == digest:
            return SubmitResult(run=run_views.summary(run), created=False)
        found = submission.difference(run, request)
        message = f"idempotency key {key!r} was used for another request (run {run.id})"
        if found.phrases:
            *most, last = found.phrases
            message += f"; this one differs in {', '.join(most) + ' and ' if most else ''}{last}"
        raise IdempotencyConflict(
            f"{message}: send it with a new key, or repeat the first request to get its run",
            run_id=run.id,
            differs=found.parts,
            input_pointer=found.input_pointer,
        )

    # ── one run ─────────────────────────────────────────────────────────────────────────────

    async def _run(self, run_id: str, tenant: str | None) -> RunRecord:
        run = None
        if isinstance(run_id, str) and len(run_id) <= MAX_RUN_ID_CHARS:
            run = await self._store.get_run(run_id)
        if run is None or (tenant is not None and run.tenant_id != tenant):
            raise self._not_found(run_id)
        return run

    def _not_found(self, run_id: str) -> NotFound:
        """`run_not_found`; while run retention is on, saying that old runs are deleted: a
        link kept elsewhere (a start over's, a bookmark) may name one that retention took."""
        refusal = run_not_found(run_id)
        retention_s = self._runtime.settings.run_retention_s
        if not retention_s:
            return refusal
        return NotFound(
            f"{refusal.message} (root runs are deleted with their trees {duration(retention_s)} "
            "after they end: SCHEMABRIDGE_RUN_RETENTION_S)",
            code=refusal.code,
        )

    async def _detail(self, run: RunRecord, tenant: str | None) -> RunDetail:
        store = self._store
        version = await store.get_version(run.workflow_name, run.workflow_version)
        steps = await store.get_steps(run.id)
        restarts, under = await self._start_overs(run)
        no_worker = await self._no_worker(steps)
        return run_views.detail(
            run,
            version.workflow,
            steps=steps,
            lines=await store.step_log_lines(run.id, limit=HISTORY_LINES),
            restarts=restarts,
            fanout=await self._fanout(run.id, show_worker=tenant is None),
            now=self._runtime.clock.now(),
            holders=await self._holders(steps, show_worker=tenant is None),
            deployment_id=await self._deployment_of(run),
            root_started_over_as=under,
            restarted_from_purged=await self._restarted_from_purged(run),
            no_worker=no_worker,
            show_worker=tenant is None,
        )

    async def _restarted_from_purged(self, run: RunRecord) -> bool:
        """Whether the run `run` was started over from is gone (run retention deleted it),
        so that a view shows its id without a link to follow (one read by primary key)."""
        if run.restarted_from is None:
            return False
        return bool(await self._store.runs_gone([run.restarted_from]))

    async def _no_worker(self, steps: list[StepRecord]) -> bool:
        """Whether a READY step of the run waits for a worker because none is alive (a tour
        stopped every worker: the run sat READY and nothing said why). Asked only while a step
        is READY with no reason of its own, of the process's answer of the last 2 s
        (`WorkersAlive`: a just-submitted run polled costs no Redis read each time)."""
        ready = any(s.status == StepStatus.READY.value and s.wait_reason is None for s in steps)
        return ready and await self._workers_alive() is False

    async def _deployment_of(self, run: RunRecord) -> str | None:
        """The deployment `run` belongs to (see `RunDetail.deployment_id`): a candidate's is
        read from the deployments (a run records only its route), a `gradual_deploy` run's is
        in its input."""
        if run.route == RunRoute.CANDIDATE.value:
            return await self._store.candidate_deployment(
                run.workflow_name, run.workflow_version, run.created_at
            )
        if run.route == RunRoute.SYSTEM.value and isinstance(run.input, dict):
            found = run.input.get("deploymentId")
            return found if isinstance(found, str) else None
        return None

    async def _holders(
        self, steps: list[StepRecord], *, show_worker: bool
    ) -> run_views.Holders | None:
        """The heartbeats of the workers holding `steps` that are RUNNING, by the rule
        `GET /services` applies; None when none is RUNNING (no Redis read). Redis not answering
        leaves their state `unknown` rather than failing the read of the run."""
        running = [s for s in steps if s.status == StepStatus.RUNNING.value]
        if not running:
            return None
        names = {s.claimed_by for s in running if s.claimed_by is not None}
        runtime = self._runtime
        statuses: dict[str, ServiceStatus] | None = {}
        if names:
            ttl_s = float(runtime.settings.heartbeat_ttl_s)
            try:
                statuses = await read_named_services(
                    runtime.redis, runtime.clock, names, ttl_s=ttl_s
                )
            except COORDINATION_ERRORS as error:
                logger.warning("reading the heartbeats of steps' holders failed: %s", error)
                statuses = None
        return run_views.Holders(
            statuses, show_worker, runtime.clock.now(), lease_s=runtime.settings.lease_s
        )

    async def _fanout(self, run_id: str, *, show_worker: bool) -> FanoutProgress:
        """The fan-out's progress; while children run, which of them a worker presumed dead
        holds: counted by holder in the read that counts them (as many rows as workers),
        judged by the process's answer of the last 2 s (`WorkersAlive.services`), never a
        Redis read per child or per read of the run."""
        store = self._store
        runtime = self._runtime
        counts, held = await store.fanout_with_holders(run_id)
        waiting = await store.waiting_children(run_id) if counts["total"] else []
        holders = None
        if held:
            holders = run_views.Holders(
                await self._workers_alive.services(),
                show_worker,
                runtime.clock.now(),
                lease_s=runtime.settings.lease_s,
            )
            held = [part for group in held if (part := await self._held(run_id, group, holders))]
        return run_views.fanout_view(counts, waiting, runtime.clock.now(), held, holders)

    async def _held(
        self, run_id: str, group: HeldChildren, holders: run_views.Holders
    ) -> HeldChildren | None:
        """`group` as its holder's liveness judges it: of a worker restarted under its name,
        whose predecessor's claims it holds beside its own, the predecessor's part alone (a
        read of that holder's children; None when none is left), since the group's latest
        lease is the live process's and would make them all read alive."""
        leases = run_views.restarted_holders_part(group, holders)
        if leases is None:
            return group
        return await self._store.held_with_leases(run_id, group.worker, leases)

    @store_boundary
    async def get(self, run_id: str, *, tenant: str | None = None) -> RunDetail:
        """The run with its steps, their attempt histories, its fan-out progress and the runs
        started over from it. Unknown (or another tenant's): `NotFound(code="run_not_found")`."""
        return await self._detail(await self._run(run_id, tenant), tenant)

    @store_boundary
    async def match_prefix(
        self, prefix: str, *, limit: int = 5, tenant: str | None = None
    ) -> RunIdMatches:
        """The ids of the runs whose id starts with `prefix` (8 to 32 hex digits, any case,
        hyphens or not: `engine.operations.id_prefixes`), at most `limit` (1 to 20) in id order,
        and whether more match; with `tenant`, only that tenant's runs, so a scoped caller
        learns nothing of another tenant's (an empty answer reads like no run at all).
        Front doors resolve the short ids people copy from the monitor with it. Refused:
        `InvalidRequest` (`invalid_run_id_prefix`, `invalid_limit`)."""
        limit = id_prefixes.check_limit(limit)
        found = id_prefixes.prefix_range(prefix)
        ids = await self._store.run_ids_in_range(
            found.low, found.high, tenant=tenant, limit=limit + 1
        )
        return RunIdMatches(prefix=found.prefix, ids=ids[:limit], more=len(ids) > limit)

    @store_boundary
    async def progress(self, run_id: str, *, tenant: str | None = None) -> RunProgress:
        """The run's status, its steps' statuses and its fan-out progress: three small reads
        (no log, no outputs), so a progress stream may read it a few times a second.
        Unknown (or another tenant's): `NotFound(code="run_not_found")`."""
        run = await self._run(run_id, tenant)
        store = self._store
        steps = await store.get_steps(run.id)
        return run_views.progress(
            run,
            steps=steps,
            fanout=await self._fanout(run.id, show_worker=tenant is None),
            now=self._runtime.clock.now(),
            no_worker=await self._no_worker(steps),
        )

    def watch(self, run_id: str) -> contextlib.AbstractContextManager[RunWatch]:
        """Events of `run_id` for as long as the block lasts: `await watch.wait(timeout_s)`
        returns True once the run's status, steps or fan-out progress may have changed (read
        it with `progress` or `get`), False after `timeout_s` without an event. An event is a
        hint: it can be late or lost (Redis down), so read the run after a bounded timeout too.
        Open the watch before the first read. It reveals nothing about the run: scope reads."""
        return self._runtime.run_events.watch(run_id)

    @store_boundary
    async def wait(self, run_id: str, timeout_s: float, *, tenant: str | None = None) -> RunDetail:
        """The run once it has ended, or as it is after `timeout_s` (0 to 3,600 s) if it has
        not. It is read again when a run event says it may have ended (at once for the first
        few such events, then at most every 50 ms), and at least once a second anyway."""
        return await self._detail(await self._waited(run_id, timeout_s, tenant), tenant)

    @store_boundary
    async def wait_for_end(
        self, run_id: str, timeout_s: float, *, tenant: str | None = None
    ) -> RunEnd | RunDetail:
        """As `wait`, for a synchronous submission: a run that has ended is answered with its
        summary and output alone (one read more, who started it over, rather than the six of
        the whole detail); a run still going with its whole detail, whose progress says why."""
        run = await self._waited(run_id, timeout_s, tenant)
        if run.status not in _TERMINAL:
            return await self._detail(run, tenant)
        restarts, under = await self._start_overs(run)
        started_over_as = restarts[0] if restarts else under
        shown = run_views.summary(run, sent=True, started_over_as=started_over_as)
        return RunEnd(**shown.model_dump(), output=run.output)

    async def _start_overs(self, run: RunRecord) -> tuple[list[str], str | None]:
        """A root run's start overs (the runs they made, the first the one its idempotency
        key names), or for a child, never started over itself, the run a start over of its
        root made: one read either way (a root's `root_run_id` is its own id)."""
        if run.root_run_id in (None, run.id):
            return await self._store.restarts_of(run.id), None
        under = await self._store.started_over_as({run.id: run.root_run_id})
        return [], under.get(run.id)

    async def _waited(self, run_id: str, timeout_s: float, tenant: str | None) -> RunRecord:
        """The run's row once it has ended, or after `timeout_s`: `wait`'s reads."""
        if not isinstance(timeout_s, int | float) or not 0 <= timeout_s <= MAX_WAIT_S:
            raise InvalidRequest(
                f"timeout_s is 0 to {MAX_WAIT_S:g} seconds; got {timeout_s!r}",
                code="invalid_timeout",
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        reads = math.ceil(timeout_s / WAIT_MIN_READ_S) + WAIT_READ_BURST
        with self.watch(run_id) as watch:
            run = await self._run(run_id, tenant)
            pacing = ReadPacing(WAIT_MIN_READ_S, WAIT_READ_BURST, loop.time())
            read_by = min(deadline, loop.time() + WAIT_FALLBACK_S)
            passed = 0
            for _ in range(reads * (WAIT_MAX_PASSED_EVENTS + 1)):
                if run.status in _TERMINAL or loop.time() >= deadline:
                    break
                woken = await watch.wait(max(0.0, read_by - loop.time()))
                if (
                    woken
                    and not watch.take_ended()
                    and passed < WAIT_MAX_PASSED_EVENTS
                    and loop.time() < read_by
                ):
                    passed += 1  # a step started, a child moved: only the end is wanted
                    continue
                pause = pacing.pause(loop.time())
                if pause > 0:
                    await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
                await watch.wait(0.0)  # events until now are covered by this read
                watch.take_ended()
                run = await self._run(run_id, tenant)
                pacing.read(loop.time())
                read_by = min(deadline, loop.time() + WAIT_FALLBACK_S)
                passed = 0
        return run

    # ── lists ───────────────────────────────────────────────────────────────────────────────

    @store_boundary
    async def list(
        self,
        filter: RunFilter,
        *,
        limit: int = 50,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> RunList:
        """A page of the runs `filter` selects, newest first (created_at, then id, descending).
        `next` continues the same list: runs created meanwhile never push a row into the next
        page twice or make one skip. `limit` is 1 to 500 (`invalid_limit`); a cursor of
        another list or filter, or an altered one, is `invalid_cursor`. The filter's status
        and route are taken in any case (`failed` is FAILED). A `workflow` (or its `version`)
        never published is `workflow_not_found`, as a batch retry by the filter refuses it,
        never an empty page that hides the typo; it is looked up only when the first page
        is empty, so a list that finds runs costs nothing more.

        Every filter reads one index range, except `parent`: the children of one run are
        indexed in item order (`children` reads them so, at any fan-out size), not newest
        first — one more index written by every child a spawner creates and ends was not worth
        it — so a `parent` filter over a very large fan-out is better read with `children`."""
        check_limit(limit)
        filter = checked_filter(filter)
        if tenant is not None:
            if filter.tenant not in (None, tenant):
                return RunList(items=[])
            filter = dataclasses.replace(filter, tenant=tenant)
        scope = scope_digest("runs", dataclasses.asdict(filter))
        after = None if cursor is None else time_and_id_key(decode_cursor(cursor, "runs", scope))
        rows = await self._store.runs_page(filter, after=after, limit=limit + 1)
        if not rows and cursor is None:
            await self._require_named(filter, tenant)
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor("runs", [rows[-1].created_at, rows[-1].id], scope)
        ids = [r.id for r in rows]
        progress = await self._store.runs_progress(ids)
        # One indexed read for the page, so that a FAILED run already started over (or a
        # child under one) reads as handled (a retry of it is refused), not as one more
        # failure to retry.
        started_over = await self._store.started_over_as(
            {r.id: r.root_run_id or r.id for r in rows}
        )
        items = [
            run_views.summary(r, started_over_as=started_over.get(r.id)).model_copy(
                update={"progress": _list_progress(progress.get(r.id))}
            )
            for r in rows
        ]
        return RunList(items=items, next=next_cursor)

    async def _require_named(self, filter: RunFilter, tenant: str | None) -> None:
        """Refuse a filter naming a workflow, or a version of it, never published, or a
        parent run that does not exist (or that `tenant`, the caller's scope, cannot see), as
        `children` refuses it. The engine's own workflows are left alone: `gradual_deploy` is
        published with the first deployment, and a filter on it before then is "no runs",
        not a typo."""
        if filter.workflow is not None and filter.workflow not in RESERVED_WORKFLOWS:
            await require_published(self._store, filter.workflow, filter.version)
        if filter.parent is not None:
            try:
                await self._run(filter.parent, tenant)
            except NotFound as refused:
                raise NotFound(
                    f"the parent filter names {refused.message}",
                    code=refused.code,
                    details={**refused.details, "parameter": "parent"},
                ) from None

    @store_boundary
    async def children(
        self,
        run_id: str,
        *,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> RunList:
        """A page of the run's children in item order (grouped by spawner), only those in
        `status` (any case) when given. `limit` 1 to 500; keyset pagination like `list`."""
        check_limit(limit)
        status = _run_status(status)
        run = await self._run(run_id, tenant)
        scope = scope_digest("children", {"run": run.id, "status": status})
        after = None if cursor is None else _child_key(decode_cursor(cursor, "children", scope))
        rows = await self._store.children_page(run.id, status=status, after=after, limit=limit + 1)
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            last = rows[-1]
            next_cursor = encode_cursor("children", [last.parent_vertex_id, last.item_index], scope)
        return RunList(items=[*await self._marked_waiting(rows)], next=next_cursor)

    async def _marked_waiting(self, rows: Sequence[RunHeader | RunRecord]) -> Sequence[RunSummary]:
        """`rows` (children) as summaries, each RUNNING one marked `waiting` unless a worker
        holds a step of it: the fan-out bar's running / waiting split, child by child."""
        going = [r.id for r in rows if r.status == RunStatus.RUNNING.value]
        held = await self._store.holding_a_step(going) if going else set()
        return [
            run_views.summary(r).model_copy(
                update={"waiting": r.id not in held} if r.id in going else {}
            )
            for r in rows
        ]

    @store_boundary
    async def logs(
        self,
        run_id: str,
        *,
        after: int | str | None = None,
        limit: int = 200,
        tenant: str | None = None,
    ) -> LogList:
        """The run's log lines with ids above `after` (from the start when None), oldest
        first. `next` (set when the page is full) is the last line's id as text and is
        accepted as `after`; to follow a live log pass the last id seen. `limit` 1 to 500."""
        check_limit(limit)
        start = _log_after(after)
        run = await self._run(run_id, tenant)
        lines = await self._store.log_page(run.id, after=start, limit=limit)
        next_after = str(lines[-1].id) if len(lines) == limit else None
        show_worker = tenant is None
        items = [run_views.log_entry(line, show_worker=show_worker) for line in lines]
        return LogList(items=items, next=next_after)

    # ── the long tail of a fan-out ──────────────────────────────────────────────────────────

    @store_boundary
    async def long_tail(
        self, run_id: str, vertex_id: str, *, limit: int = 10, tenant: str | None = None
    ) -> LongTail:
        """How the durations of one SPAWNER's children spread (nearest-rank p50/p95/p99, max,
        mean), its `limit` slowest ended children and the `limit` running longest (1 to 50,
        `invalid_limit`). Computed in the database from one index range of the fan-out, so it
        costs the same whatever else the store holds. Unknown run: `run_not_found`; a vertex
        the run's workflow does not have: `NotFound(code="step_not_found")`; a vertex that is
        not a SPAWNER: `InvalidRequest(code="not_a_spawner")`."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LONG_TAIL:
            raise InvalidRequest(
                f"limit is 1 to {MAX_LONG_TAIL}; got {limit!r}", code="invalid_limit"
            )
        run = await self._run(run_id, tenant)
        store = self._store
        version = await store.get_version(run.workflow_name, run.workflow_version)
        vertex = version.workflow.vertices.get(vertex_id)
        if vertex is None:
            raise no_step(run.id, vertex_id, sorted(version.workflow.vertices))
        if not isinstance(vertex, SpawnerVertex):
            raise InvalidRequest(
                f"{vertex_id!r} is a {vertex.type.value}; only a SPAWNER has a fan-out",
                code="not_a_spawner",
            )
        stats = await store.children_durations(run.id, vertex_id)
        counts = await store.spawner_counts(run.id, vertex_id)
        now = self._runtime.clock.now()
        slowest = [
            ChildDuration(
                run=run_views.summary(c), duration_s=(c.ended_at or 0) - (c.started_at or 0)
            )
            for c in await store.slowest_children(run.id, vertex_id, limit)
        ]
        oldest = await store.oldest_running_children(run.id, vertex_id, limit)
        running = [
            ChildDuration(run=summary, duration_s=max(0.0, now - (c.started_at or now)))
            for c, summary in zip(oldest, await self._marked_waiting(oldest), strict=True)
        ]
        p50, p95, p99 = (stats.percentiles.get(p) for p in (0.5, 0.95, 0.99))
        return LongTail(
            run_id=run.id,
            vertex_id=vertex_id,
            total=counts.total,
            ended=stats.ended,
            p50_s=p50,
            p95_s=p95,
            p99_s=p99,
            max_s=stats.max_s,
            mean_s=stats.mean_s,
            slowest=slowest,
            running_longest=running,
        )
