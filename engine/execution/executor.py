"""Executes one claimed step: builds its context, calls the vertex, turns the outcome into a
`StepResult` for the store.

Every exception becomes a recorded failure: a `StepFailure` keeps its kind; anything else is an
`internal_error` with the exception's type, so a bug in one step never kills the worker.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
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

from admission import Admission, TenantRateLimited
from engine.execution import deploy_stage, fanout
from engine.execution import step_rules as scheduler
from engine.execution.admission_guard import AdmissionGuard, CoordinationDown
from engine.store import ClaimLost, Store
from engine.store.records import (
    ClaimedStep,
    LogLine,
    StepAwaitingChildren,
    StepFailed,
    StepParked,
    StepResult,
    StepSucceeded,
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
from vertices import contract, gateway, spawner
from vertices.contract import Parked, StepContext, Succeeded, TimeoutTier
from vertices.http_client import HttpClient

logger = logging.getLogger(__name__)

STORE_RETRY_S = 1.0
"""How soon a step interrupted by a transient store error runs again."""
STORE_RETRY_LIMIT = 10
"""Executions after which a step still hitting store errors fails visibly."""
COORDINATION_RETRY_S = 2.0
"""How soon a step whose admission could not reach Redis runs again."""


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

    async def __call__(self, level: str, message: str, data: dict[str, Any]) -> None:
        self.lines.append(
            LogLine(self.step.run_id, level, message, self.step.vertex_id, data, self.clock.now())
        )


@dataclass(frozen=True)
class ExecutorDeps:
    """What a worker shares among all its steps."""

    store: Store
    http: HttpClient
    timeouts: gateway.GatewayTimeouts
    clock: Clock
    redispatch_delays_s: tuple[float, ...]
    fanout_limits: spawner.FanoutLimits = field(default_factory=spawner.FanoutLimits)
    payload_high_water_bytes: int = 512 * 1024 * 1024
    admission: Admission | None = None
    """None: GATEWAY calls go out without admission (measurements only)."""
    admission_wait_s: float = 30.0
    notify: Callable[[], Awaitable[None]] | None = None
    """Wakes idle workers (here and in other processes) when steps became ready."""
    rng: random.Random = field(default_factory=random.Random)
    """Spreads redispatches (see `scheduler.redispatch_at`); tests seed it."""


async def execute(
    step: ClaimedStep, workflow: Workflow, deps: ExecutorDeps
) -> tuple[StepResult, list[LogLine]]:
    """Run `step` to an outcome. Never raises (except cancellation)."""
    log = StepLog(step, deps.clock, tenant_item_taken=step.tenant_item_taken)
    vertex = workflow.vertices.get(step.vertex_id)
    try:
        if vertex is None:
            raise StepFailure(
                FailureKind.INTERNAL_ERROR,
                f"vertex {step.vertex_id!r} is not in {workflow.name} v{step.workflow_version}",
            )
        outcome = await _dispatch(vertex, step, workflow, log, deps)
    except StepFailure as failure:
        return _failed(step, vertex, failure, deps, log), log.lines
    except SQLAlchemyError as exc:
        if _transient(exc) and step.attempts < STORE_RETRY_LIMIT:
            # A deadlock, a lost connection, an exhausted pool: not the step's fault. Park it
            # briefly so it runs again; if even that cannot be recorded, its lease expires.
            logger.warning("store error in %s/%s: %s", step.run_id, step.vertex_id, exc)
            reason = f"store unavailable ({type(exc).__name__}); trying again"
            park = StepParked(step, deps.clock.now() + STORE_RETRY_S, reason, log.tenant_item_taken)
            return park, log.lines
        logger.exception("store error in %s/%s", step.run_id, step.vertex_id)
        crash = StepFailure(FailureKind.INTERNAL_ERROR, f"store error: {type(exc).__name__}")
        return _failed(step, vertex, crash, deps, log), log.lines
    except ClaimLost as lost:
        # Another worker owns the step now; this result will be dropped by the store.
        logger.warning("%s", lost)
        crash = StepFailure(FailureKind.INTERNAL_ERROR, str(lost))
        return _failed(step, vertex, crash, deps, log), log.lines
    except Exception as exc:  # a bug must not kill the worker: record it on the step
        logger.exception("step %s/%s crashed", step.run_id, step.vertex_id)
        crash = StepFailure(FailureKind.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        return _failed(step, vertex, crash, deps, log), log.lines
    if isinstance(outcome, Parked):
        await log("info", f"parked: {outcome.reason}", {"delaySeconds": outcome.delay_s})
        park = StepParked(
            step, deps.clock.now() + outcome.delay_s, outcome.reason, log.tenant_item_taken
        )
        return park, log.lines
    if isinstance(outcome, contract.AwaitingChildren):
        return StepAwaitingChildren(step, outcome.total), log.lines
    return StepSucceeded(step, outcome.output), log.lines


async def _dispatch(
    vertex: Vertex, step: ClaimedStep, workflow: Workflow, log: StepLog, deps: ExecutorDeps
) -> contract.VertexOutcome:
    ctx = StepContext(
        run_id=step.run_id,
        vertex_id=step.vertex_id,
        tenant_id=step.tenant_id,
        attempt=step.attempts,
        context=scheduler.expression_context(step),
        timeout_tier=TimeoutTier(step.timeout_tier),
        idempotency_key=scheduler.idempotency_key(step.run_id, step.vertex_id),
        log=log,
    )
    if isinstance(vertex, GatewayVertex):
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
        return await deploy_stage.run_stage(deps.store, step, vertex, deps.clock)
    raise StepFailure(FailureKind.INTERNAL_ERROR, f"unknown vertex type {vertex!r}")


async def _gateway(
    vertex: GatewayVertex, step: ClaimedStep, ctx: StepContext, deps: ExecutorDeps, log: StepLog
) -> contract.VertexOutcome:
    if deps.admission is None:
        return await gateway.execute(vertex.config, ctx, deps.http, deps.timeouts)
    guard = AdmissionGuard(
        deps.admission,
        ctx.tenant_id,
        deps.admission_wait_s,
        redispatch=step.auto_retries > 0,
        item_taken=step.tenant_item_taken,
    )
    try:
        return await gateway.execute(vertex.config, ctx, deps.http, deps.timeouts, guard=guard)
    except TenantRateLimited as limited:
        # At the tenant's rate limit the step waits (a durable timer), it does not fail.
        decision = limited.decision
        reason = f"tenant {ctx.tenant_id} at its rate limit ({decision.used}/{decision.limit})"
        return Parked(decision.delay_s, reason)
    except CoordinationDown as down:
        # Nothing was sent: Redis is unreachable, so admission cannot be decided. Work waits.
        return Parked(COORDINATION_RETRY_S, str(down))
    finally:
        log.tenant_item_taken = guard.item_taken


def _failed(
    step: ClaimedStep,
    vertex: Vertex | None,
    failure: StepFailure,
    deps: ExecutorDeps,
    log: StepLog,
) -> StepFailed:
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
        log.lines.append(
            LogLine(
                step.run_id,
                "error",
                f"step failed: {failure.message}",
                step.vertex_id,
                error,
                deps.clock.now(),
            )
        )
    else:
        delay = round(retry_at - deps.clock.now(), 3)
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
    return StepFailed(step, error, retry_at, log.tenant_item_taken)
