"""Executes one claimed step: builds its context, calls the vertex, turns the outcome into a
`StepResult` for the store.

Every exception becomes a recorded failure: a `StepFailure` keeps its kind; anything else is an
`internal_error` with the exception's type, so a bug in one step never kills the worker.

A GATEWAY step that references secrets reads them here, just before its call
(`step_secrets.resolve`), and its `Redactor` learns their values: everything the step records
(its output, its error, its log lines) and every line this module logs about it passes through
that redactor on the way out of `execute`, the one place all of it leaves the worker's memory
(docs/architecture.md, 'Secrets').
"""

from __future__ import annotations

import dataclasses
import logging
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as SATimeoutError

from admission import Admission, DestinationPaced, TenantRateLimited
from engine import payload_defaults
from engine.execution import breaker_parks, deploy_stage, fanout, merge_outputs, step_secrets
from engine.execution import step_rules as scheduler
from engine.execution.admission_guard import (
    AdmissionGuard,
    AdmissionTickets,
    AdmissionWaits,
    CoordinationDown,
    candidate_scope,
)
from engine.execution.child_input import ChildInputs
from engine.execution.step_memory import StepMemory
from engine.execution.stops import CLAIM_KEPT
from engine.execution.worker_metrics import MeteredCalls, WorkerMetrics
from engine.secret_cipher import SecretCipher
from engine.store import ClaimLost, Store
from engine.store.records import (
    ClaimedStep,
    LogLine,
    StepAbandoned,
    StepAwaitingChildren,
    StepFailed,
    StepParked,
    StepResult,
    StepSucceeded,
    Waiting,
)
from schemas.clock import Clock
from schemas.definitions import (
    DeployStageVertex,
    GatewayVertex,
    MergeVertex,
    SpawnerVertex,
    Vertex,
    Workflow,
)
from schemas.errors import FailureKind, StepFailure
from schemas.expressions import SECRETS_ROOT, secret_references
from schemas.json_depth import DEFAULT_MAX_NESTING_DEPTH
from schemas.redaction import Redactor
from schemas.waiting import WaitReason, redispatch_words
from vertices import contract, gateway, spawner
from vertices.contract import (
    Parked,
    StepContext,
    StepStopped,
    StopSignal,
    Succeeded,
    TimeoutTier,
)
from vertices.http_client import HttpClient

logger = logging.getLogger(__name__)

STORE_RETRY_S = 1.0
"""How soon a step interrupted by a transient store error runs again."""
STORE_RETRY_LIMIT = 10
"""Transient store errors in a row (in one worker, `StepMemory`) at which a step fails
visibly; not its executions, which a long outage of Redis counts up by one every few
seconds."""
COORDINATION_RETRY_S = 2.0
"""How soon a step whose admission could not reach Redis runs again."""
SECRET_NAMES_CACHED = 4_096
"""GATEWAY vertices whose secret names a worker remembers (by workflow version and vertex id:
versions are immutable). Walking a config costs about 10 µs, a tenth of a call's client CPU."""


RETRY_WAIT_SHOWN_S = 1.0
"""The shortest in-process retry wait a step records while it lasts: a shorter one is over
before anyone could read it (the monitor redraws every second or two), so it costs no write."""


def _transient(exc: SQLAlchemyError) -> bool:
    """Errors that another try may not meet: not the data's fault (integrity, data, SQL)."""
    if isinstance(exc, IntegrityError | DataError | ProgrammingError):
        return False
    return isinstance(exc, OperationalError | InterfaceError | DBAPIError | SATimeoutError)


@dataclass
class StepLog:
    """Collects a step's log lines; they are written with its result in one transaction."""

    step: ClaimedStep
    clock: Clock
    lines: list[LogLine] = field(default_factory=list)
    tenant_item_taken: bool = False
    """Admission took the step's tenant item (now or in an earlier execution): recorded with
    a redispatch or a park so the next execution does not take another."""
    redactor: Redactor = field(default_factory=Redactor)
    """The values this step must not record (its secrets, a URL's password)."""

    store: Store | None = None
    """Where `retry_wait` shows a wait (None: nowhere; the lines go with the result)."""
    changed: Callable[[Iterable[str]], Awaitable[None]] | None = None
    """Tells watchers of the step's run (and its parent) that it changed."""
    written: int = 0
    """How many of `lines` `retry_wait` has written already (the result writes the rest)."""

    async def __call__(self, level: str, message: str, data: dict[str, Any]) -> None:
        self.lines.append(
            LogLine(self.step.run_id, level, message, self.step.vertex_id, data, self.clock.now())
        )

    async def retry_wait(self, wait_s: float, message: str) -> None:
        """Show a wait before the step's next in-process attempt while it lasts: one write of
        the wait reason and the lines not written yet, only while the claim is live."""
        if self.store is None or wait_s < RETRY_WAIT_SHOWN_S:
            return
        upto = len(self.lines)
        lines = self.lines[self.written : upto]
        if self.redactor:
            lines = [_redacted_line(line, self.redactor) for line in lines]
            message = self.redactor.text(message)
        step = self.step
        until = self.clock.now() + wait_s
        try:
            shown = await self.store.show_retry_wait(step.claim_token, lines, message, until)
        except SQLAlchemyError as exc:
            # Showing the wait is a courtesy: the attempts go on, their lines with the result
            # (written twice in the rare case of a commit whose answer was lost).
            logger.warning(
                "retry wait of %s/%s not shown: %s", step.run_id, step.vertex_id, type(exc).__name__
            )
            return
        if shown:
            self.written = upto
            if self.changed is not None:
                await self.changed([step.run_id, *filter(None, [step.parent_run_id])])


@dataclass(frozen=True)
class ExecutorDeps:
    """What a worker shares among all its steps."""

    store: Store
    http: HttpClient
    timeouts: gateway.GatewayTimeouts
    clock: Clock
    redispatch_delays_s: tuple[float, ...]
    fanout_limits: spawner.FanoutLimits = field(default_factory=spawner.FanoutLimits)
    payload_high_water_bytes: int = payload_defaults.PAYLOAD_HIGH_WATER_BYTES
    merge_outputs_read_max_bytes: int = payload_defaults.MERGE_OUTPUTS_READ_MAX_BYTES
    """Largest MERGE `outputs` (in the payload store) a step's expressions may load
    (`merge_outputs`; `MERGE_OUTPUTS_READ_MAX_BYTES`)."""
    payload_retention_s: float = payload_defaults.PAYLOAD_RETENTION_S
    """How long payloads outlive their run (`PAYLOAD_RETENTION_S`), for the message of a step
    that reads a join's outputs after they were deleted."""
    admission: Admission | None = None
    """None: GATEWAY calls go out without admission (measurements only)."""
    admission_wait_s: float = 30.0
    max_response_bytes: int = gateway.DEFAULT_MAX_BODY_BYTES
    """Most response-body bytes a GATEWAY step keeps in its output (`MAX_RESPONSE_BYTES`)."""
    max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH
    """The deepest a GATEWAY's JSON answer may nest (`Settings.nesting_depth_limit`)."""
    notify: Callable[[], Awaitable[None]] | None = None
    """Wakes idle workers (here and in other processes) when steps became ready."""
    rng: random.Random = field(default_factory=random.Random)
    """Spreads redispatches (see `scheduler.redispatch_at`); tests seed it."""
    secret_cipher: SecretCipher = field(default_factory=lambda: SecretCipher.from_setting(None))
    """Decrypts the secrets GATEWAY steps reference (default: no key, so such steps fail with
    `secret_unreadable`)."""
    secret_names: dict[tuple[str, int, str], frozenset[str]] = field(default_factory=dict)
    """The secrets each GATEWAY vertex references (see `SECRET_NAMES_CACHED`)."""
    admission_waits: AdmissionWaits = field(default_factory=AdmissionWaits)
    """The steps waiting for an admission slot now (the worker's lease renewer records them)."""
    admission_tickets: AdmissionTickets = field(default_factory=AdmissionTickets)
    """The admission slots of the calls under way (the worker's lease renewer extends them)."""
    run_changed: Callable[[Iterable[str]], Awaitable[None]] | None = None
    """Tells watchers of these runs that they changed (a step started a retry wait)."""
    child_inputs: ChildInputs = field(default_factory=ChildInputs)
    """The inputSchemas child runs are checked against, compiled once per version."""
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    """Counts and times the GATEWAY attempts (and, at the worker's flush, the steps)."""
    step_memory: StepMemory = field(default_factory=StepMemory)
    """What the steps' earlier executions in this worker left: store errors in a row, the
    outage whose park line was written."""


async def execute(
    step: ClaimedStep,
    workflow: Workflow,
    deps: ExecutorDeps,
    *,
    stop: StopSignal | None = None,
    worker: str | None = None,
) -> tuple[StepResult | StepAbandoned, list[LogLine]]:
    """Run `step` to an outcome. Never raises (except cancellation). What it returns is
    redacted (see the module docstring). `stop` set (its claim is gone: its run was
    cancelled) ends it before its next HTTP attempt, as `StepAbandoned`; so does a stop that
    came while its last call was on the wire (its answer is not recorded). `worker`: the
    service id it was claimed under (`claimed_by`), which its attempts' log lines keep."""
    log = StepLog(
        step,
        deps.clock,
        tenant_item_taken=step.tenant_item_taken,
        store=deps.store,
        changed=deps.run_changed,
    )
    result = await _execute(step, workflow, deps, log, stop=stop, worker=worker)
    if not isinstance(result, StepParked):
        deps.step_memory.forget(step.step_id)
    # The lines a retry wait wrote already are not written again.
    unwritten = log.lines[log.written :] if log.written else log.lines
    if not log.redactor:
        return result, unwritten
    lines = [_redacted_line(line, log.redactor) for line in unwritten]
    return _redacted(result, log.redactor), lines


def _redacted(result: StepResult | StepAbandoned, redactor: Redactor) -> StepResult | StepAbandoned:
    if isinstance(result, StepSucceeded):
        return dataclasses.replace(result, output=redactor.scrub(result.output))
    if isinstance(result, StepFailed):
        return dataclasses.replace(
            result,
            error=redactor.scrub(result.error),
            waiting=_redacted_waiting(result.waiting, redactor),
        )
    if isinstance(result, StepParked):
        return dataclasses.replace(
            result,
            reason=redactor.text(result.reason),
            waiting=_redacted_waiting(result.waiting, redactor),
            error=redactor.scrub(result.error),
        )
    return result


def _redacted_waiting(waiting: Waiting | None, redactor: Redactor) -> Waiting | None:
    if waiting is None:
        return None
    return dataclasses.replace(waiting, message=redactor.text(waiting.message))


def _redacted_line(line: LogLine, redactor: Redactor) -> LogLine:
    return dataclasses.replace(
        line, message=redactor.text(line.message), data=redactor.scrub(line.data)
    )


async def _execute(
    step: ClaimedStep,
    workflow: Workflow,
    deps: ExecutorDeps,
    log: StepLog,
    *,
    stop: StopSignal | None,
    worker: str | None,
) -> StepResult | StepAbandoned:
    vertex = workflow.vertices.get(step.vertex_id)
    try:
        if vertex is None:
            raise StepFailure(
                FailureKind.INTERNAL_ERROR,
                f"vertex {step.vertex_id!r} is not in {workflow.name} v{step.workflow_version}",
            )
        deps.child_inputs.check(step, workflow, vertex)
        outcome = await _dispatch(vertex, step, workflow, log, deps, stop=stop, worker=worker)
    except StepStopped as stopped:
        return _abandoned(step, stop, str(stopped), deps, log)
    except StepFailure as failure:
        if _claim_gone(stop):
            return _abandoned(step, stop, "its outcome is not recorded", deps, log)
        return _failed(step, vertex, failure, deps, log, worker=worker)
    except SQLAlchemyError as exc:
        if _transient(exc) and deps.step_memory.store_error(step.step_id) < STORE_RETRY_LIMIT:
            # A deadlock, a lost connection, an exhausted pool: not the step's fault. Park it
            # briefly so it runs again; if even that cannot be recorded, its lease expires.
            logger.warning(
                "store error in %s/%s: %s", step.run_id, step.vertex_id, log.redactor.text(str(exc))
            )
            reason = f"store unavailable ({type(exc).__name__}); trying again"
            return StepParked(
                step,
                deps.clock.now() + STORE_RETRY_S,
                reason,
                log.tenant_item_taken,
                Waiting(WaitReason.STORE_UNAVAILABLE, reason),
            )
        _log_crash(f"store error in {step.run_id}/{step.vertex_id}", exc, log.redactor)
        crash = StepFailure(FailureKind.INTERNAL_ERROR, f"store error: {type(exc).__name__}")
        return _failed(step, vertex, crash, deps, log, worker=worker)
    except ClaimLost as lost:
        # Another worker owns the step now; this result will be dropped by the store.
        logger.warning("%s", log.redactor.text(str(lost)))
        crash = StepFailure(FailureKind.INTERNAL_ERROR, str(lost))
        return _failed(step, vertex, crash, deps, log, worker=worker)
    except Exception as exc:  # a bug must not kill the worker: record it on the step
        _log_crash(f"step {step.run_id}/{step.vertex_id} crashed", exc, log.redactor)
        crash = StepFailure(FailureKind.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        return _failed(step, vertex, crash, deps, log, worker=worker)
    if _claim_gone(stop):
        return _abandoned(step, stop, "its outcome is not recorded", deps, log)
    if isinstance(outcome, Parked):
        return await _parked(step, outcome, deps, log)
    if isinstance(outcome, contract.AwaitingChildren):
        return StepAwaitingChildren(step, outcome.total)
    return StepSucceeded(step, outcome.output)


async def _parked(
    step: ClaimedStep, outcome: Parked, deps: ExecutorDeps, log: StepLog
) -> StepParked:
    """The step waits; its run's log says why, except again for an outage its last execution
    here said already (`StepMemory.parked`)."""
    if deps.step_memory.parked(step.step_id, outcome.code):
        await log("info", f"parked: {outcome.reason}", {"delaySeconds": outcome.delay_s})
    return StepParked(
        step,
        deps.clock.now() + outcome.delay_s,
        outcome.reason,
        log.tenant_item_taken,
        Waiting(outcome.code, outcome.reason),
    )


def _log_crash(message: str, exc: BaseException, redactor: Redactor) -> None:
    """Log an unexpected exception with its traceback, redacted like everything else the step
    leaves behind (an exception's message may quote a rendered URL or header)."""
    if not redactor:
        logger.error("%s", message, exc_info=exc)
        return
    text = redactor.text("".join(traceback.format_exception(exc)).rstrip())
    logger.error("%s\n%s", message, text)


async def _dispatch(
    vertex: Vertex,
    step: ClaimedStep,
    workflow: Workflow,
    log: StepLog,
    deps: ExecutorDeps,
    *,
    stop: StopSignal | None,
    worker: str | None,
) -> contract.VertexOutcome:
    outputs = await merge_outputs.with_outputs(
        deps.store,
        step.outputs,
        workflow,
        vertex,
        deps.merge_outputs_read_max_bytes,
        retention_s=deps.payload_retention_s,
    )
    ctx = StepContext(
        run_id=step.run_id,
        vertex_id=step.vertex_id,
        tenant_id=step.tenant_id,
        attempt=step.attempts,
        context=scheduler.expression_context(step, outputs),
        timeout_tier=TimeoutTier(step.timeout_tier),
        idempotency_key=scheduler.idempotency_key(step.run_id, step.vertex_id),
        log=log,
        retry_wait=log.retry_wait,
        redactor=log.redactor,
        stop=stop,
        worker=worker,
    )
    if isinstance(vertex, GatewayVertex):
        names = _secret_names(vertex, step, deps)
        if names:
            ctx = await _with_secrets(names, ctx, deps)
        return await _gateway(vertex, step, ctx, deps, log)
    if isinstance(vertex, SpawnerVertex):
        child = await fanout.child_version(deps.store, vertex.config, step.pinned_versions)
        port = fanout.StoreFanoutPort(
            deps.store, step, child, deps.payload_high_water_bytes, deps.notify
        )
        return await spawner.execute(vertex.config, ctx, port, deps.fanout_limits)
    if isinstance(vertex, MergeVertex):
        return Succeeded(await fanout.run_merge(deps.store, step, workflow, vertex))
    if isinstance(vertex, DeployStageVertex):
        return await deploy_stage.run_stage(deps.store, step, vertex, deps.clock, log)
    raise StepFailure(FailureKind.INTERNAL_ERROR, f"unknown vertex type {vertex!r}")


def _secret_names(vertex: GatewayVertex, step: ClaimedStep, deps: ExecutorDeps) -> frozenset[str]:
    """The secrets the vertex's url, headers, query and body reference (remembered)."""
    key = (step.workflow_name, step.workflow_version, step.vertex_id)
    names = deps.secret_names.get(key)
    if names is None:
        config = vertex.config
        names = secret_references([config.url, config.headers, config.query, config.body])
        if len(deps.secret_names) >= SECRET_NAMES_CACHED:
            deps.secret_names.clear()
        deps.secret_names[key] = names
    return names


async def _with_secrets(names: frozenset[str], ctx: StepContext, deps: ExecutorDeps) -> StepContext:
    """`ctx` with the values of the secrets `names` in its context (and its redactor)."""
    values = await step_secrets.resolve(deps.store, deps.secret_cipher, ctx.tenant_id, names)
    for value in values.values():
        ctx.redactor.add(value)
    return dataclasses.replace(ctx, context={**ctx.context, SECRETS_ROOT: values})


async def _gateway(
    vertex: GatewayVertex, step: ClaimedStep, ctx: StepContext, deps: ExecutorDeps, log: StepLog
) -> contract.VertexOutcome:
    limit = deps.max_response_bytes
    if deps.admission is None:
        metered = MeteredCalls(deps.metrics)
        return await gateway.execute(
            vertex.config,
            ctx,
            deps.http,
            deps.timeouts,
            guard=metered,
            max_body_bytes=limit,
            max_nesting_depth=deps.max_nesting_depth,
        )
    guard = AdmissionGuard(
        deps.admission,
        ctx.tenant_id,
        deps.admission_wait_s,
        redispatch=step.auto_retries > 0,
        item_taken=step.tenant_item_taken,
        waits=deps.admission_waits,
        tickets=deps.admission_tickets,
        claim_token=step.claim_token,
        meter=deps.metrics,
        breaker_scope=candidate_scope(step.route, step.workflow_name, step.workflow_version),
    )
    try:
        return await gateway.execute(
            vertex.config,
            ctx,
            deps.http,
            deps.timeouts,
            guard=guard,
            max_body_bytes=limit,
            max_nesting_depth=deps.max_nesting_depth,
        )
    except TenantRateLimited as limited:
        # At the tenant's rate limit the step waits (a durable timer), it does not fail.
        return Parked(
            limited.decision.delay_s,
            rate_limit_message(ctx.tenant_id, limited.decision.used, limited.decision.limit),
            WaitReason.TENANT_RATE_LIMIT,
        )
    except DestinationPaced as paced:
        # The destination's own cap (its rate or maxConcurrency) held the call for the whole
        # admission wait: the operator's pacing, so the step waits its turn, it does not fail.
        return Parked(paced.delay_s, paced.wait_message, paced.wait_reason)
    except CoordinationDown as down:
        # Nothing was sent: Redis is unreachable, so admission cannot be decided. Work waits.
        return Parked(COORDINATION_RETRY_S, str(down), WaitReason.COORDINATION_UNAVAILABLE)
    finally:
        log.tenant_item_taken = guard.item_taken


def _claim_gone(stop: StopSignal | None) -> bool:
    """Stopped for a reason that took the step's claim (a cancel, a lost lease): its outcome
    would be dropped. A step stopped because its run failed still holds its claim, so an
    outcome it reached (the attempt on the wire answered) is recorded as usual."""
    reason = stop.reason if stop is not None else None
    return reason is not None and reason not in CLAIM_KEPT


def _abandoned(
    step: ClaimedStep, stop: StopSignal | None, what: str, deps: ExecutorDeps, log: StepLog
) -> StepAbandoned:
    """The step ends without a result: its claim is gone (`stop`'s reason), `what` says what
    that left undone ("attempt 3/4 not sent")."""
    reason = (stop.reason if stop is not None else None) or "it was stopped"
    message = f"step stopped: {reason}; {what}"
    data = {"stopped": reason}
    now = deps.clock.now()
    log.lines.append(LogLine(step.run_id, "warning", message, step.vertex_id, data, now))
    return StepAbandoned(step, reason)


def _failed(
    step: ClaimedStep,
    vertex: Vertex | None,
    failure: StepFailure,
    deps: ExecutorDeps,
    log: StepLog,
    *,
    worker: str | None,
) -> StepFailed | StepParked:
    allowed = vertex.max_auto_retries if vertex is not None else 0
    repeat = breaker_parks.repeat_refusal(failure, step.breaker_opening, deps.clock.now())
    if repeat is not None and step.auto_retries > 0:
        # Refused again by the opening its last redispatch was counted under: wait for the
        # breaker's probes without spending another (`engine.execution.breaker_parks`). No log
        # line: a fan-out's children would write one each per second while it is half-open;
        # the wait reason says it. The error stays, naming the opening for the next refusal.
        message = breaker_parks.park_message(repeat, step.auto_retries, allowed)
        return StepParked(
            step,
            deps.clock.now() + breaker_parks.park_delay(repeat, deps.rng.random()),
            message,
            log.tenant_item_taken,
            Waiting(repeat.wait_reason, message),
            error=repeat.as_dict(),
        )
    retry_at = scheduler.redispatch_at(
        failure,
        max_auto_retries=vertex.max_auto_retries if vertex is not None else 0,
        auto_retries_used=step.auto_retries,
        now=deps.clock.now(),
        delays_s=deps.redispatch_delays_s,
        spread=deps.rng.random(),
    )
    error = failure.as_dict()
    if retry_at is None:
        # The worker is named here, not in the message: a tenant reads the message, and the
        # logs route leaves a line's `worker` out for tenant keys (service ids are operational).
        failed = error if worker is None else {**error, "worker": worker}
        log.lines.append(
            LogLine(
                step.run_id,
                "error",
                f"step failed: {failure.message}",
                step.vertex_id,
                failed,
                deps.clock.now(),
            )
        )
    else:
        delay = round(retry_at - deps.clock.now(), 3)
        waiting = Waiting(failure.wait_reason, redispatch_message(failure, step, vertex))
        log.lines.append(
            LogLine(
                step.run_id,
                "warning",
                f"{failure.kind.value}: redispatch {step.auto_retries + 1} in {delay} s",
                step.vertex_id,
                error,
                deps.clock.now(),
            )
        )
        return StepFailed(step, error, retry_at, log.tenant_item_taken, waiting)
    return StepFailed(step, error, retry_at, log.tenant_item_taken)


def rate_limit_message(tenant_id: str, used: int, limit: int) -> str:
    """What a step at its tenant's rate limit says, with the ways to raise the limit."""
    return (
        f"tenant {tenant_id} is at its rate limit ({used}/{limit} GATEWAY steps a minute); "
        f"an admin raises it with `schemabridge tenants set-rate {tenant_id} N` or, for every "
        "tenant, SCHEMABRIDGE_TENANT_RATE_PER_MINUTE"
    )


REDISPATCH_WORDS = "waiting to be sent again (redispatch) after"
"""How a redispatch's wait starts when the failure says what the destination did."""


def redispatch_message(failure: StepFailure, step: ClaimedStep, vertex: Vertex | None) -> str:
    """`redispatch n/max after <why>`: the redispatch this is, of how many the vertex allows
    (front doors add the countdown to `until`). Led by what the destination did when the
    failure says it (`wait_cause`, "waiting to be sent again (redispatch) after https://…
    answered 503 Service Unavailable; redispatch 1/3 after GET https://…/7: …"): the words a
    fan-out's children redispatched for it share come first, their own URL and count last,
    so their group says what they share (`engine.store.children.common_message`)."""
    allowed = vertex.max_auto_retries if vertex is not None else 0
    counted = redispatch_words(step.auto_retries + 1, allowed, failure.message)
    if failure.wait_cause is None:
        return counted
    return f"{REDISPATCH_WORDS} {failure.wait_cause}; {counted}"
