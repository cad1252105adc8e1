"""The SchemaBridge error tree, grouped by phase (docs/architecture.md, 'The error tree').

    SchemaBridgeError                 base; every error has a stable `code`
    ├── DefinitionError               a workflow document is invalid (setup/validation phase);
    │                                 carries every `Problem` found, each with a JSON pointer
    ├── ExpressionError               a `{{ }}` expression failed to compile or evaluate
    │                                 (`schemas.expressions`; also a ValueError)
    ├── StepFailure                   a vertex failed at run time; carries `kind`, optional HTTP
    │   │                             details, and whether the engine may redispatch it
    │   ├── RetryRefused              the retry budget refused a retry
    │   └── BreakerOpen               a circuit breaker of the destination refused the call
    ├── StepDeferred                  a step cannot go on now and waits: parked, never failed
    │   ├── TenantRateLimited         the tenant's rate window is full (`admission.rate_limit`)
    │   └── CoordinationDown          admission cannot reach Redis before a call
    │                                 (`engine.execution.admission_guard`)
    ├── InvalidResponse               a destination's answer the step cannot use; the gateway
    │                                 records it as a StepFailure (`vertices.gateway_response`)
    ├── ClaimLost                     the worker's claim on a step is gone (`engine.store.core`)
    ├── TicketAlreadySettled          an admission ticket was settled twice (`admission.ticket`;
    │                                 also a RuntimeError)
    ├── OperationError                an operation (`engine.operations`) was refused; carries a
    │   │                             `Refusal` category every front door maps the same way
    │   ├── NotFound                  no such run, workflow, version or step
    │   │   └── UnknownWorkflow       no such published workflow or version
    │   │                             (`engine.store.core`; also a LookupError)
    │   ├── WrongState                the run or step is not in a state the action accepts
    │   │   └── RunCancelled              the run is CANCELLED (`runId`, `state`)
    │   ├── IdempotencyConflict       the idempotency key was used with another request
    │   ├── InvalidRequest            the request itself is wrong (input, cursor, filter)
    │   ├── LimitReached              a quota or the ready queue's high-water mark
    │   │   └── QuotaExceeded         the tenant's run quota is used up (waiting never helps)
    │   └── Unavailable               the database or Redis cannot be reached right now
    └── ApiError                      a request to the REST API was refused (status + code)

Errors raised where they arise are defined in the module that raises them (named above); the
rest live here. The retry decision is a property of the failure (`StepFailure.redispatchable`),
not an `isinstance` chain elsewhere.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from schemas.waiting import WaitReason


class SchemaBridgeError(Exception):
    """Base class. `code` is stable and machine-readable."""

    code: str = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ── definition phase ────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a workflow document.

    `pointer` is an RFC 6901 JSON pointer into the document as written ("" = the whole
    document); `message` is one plain sentence that says what to fix.
    """

    pointer: str
    message: str
    code: str = "invalid"
    source: str = ""
    """The document the pointer is into, as the caller named it (e.g. a file path)."""

    def as_dict(self) -> dict[str, str]:
        return {"pointer": self.pointer, "code": self.code, "message": self.message}


class DefinitionError(SchemaBridgeError):
    """A workflow document failed validation; `problems` lists every problem at once."""

    code = "invalid_workflow"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        first = self.problems[0] if self.problems else Problem("", "invalid workflow")
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{first.pointer or '/'}: {first.message}{more}")


# ── runtime phase ───────────────────────────────────────────────────────────────────────────


class FailureKind(StrEnum):
    """Why a step failed. Only `EXTERNAL_OVERLOAD` is redispatched automatically
    (docs/architecture.md, 'Failure classes')."""

    EXTERNAL_OVERLOAD = "external_overload"
    """Final 429/503, an open circuit breaker, or admission wait exhausted."""
    HTTP_ERROR = "http_error"
    """The destination answered with a status outside `successCodes` (not an overload)."""
    TIMEOUT = "timeout"
    """The call did not answer within its timeout tier, after the in-process retries."""
    NETWORK_ERROR = "network_error"
    """Connection refused/reset or another I/O error, after the in-process retries."""
    EXPRESSION_ERROR = "expression_error"
    """A `{{ }}` expression failed to evaluate against the run context."""
    QUOTA_EXCEEDED = "quota_exceeded"
    """The tenant has too few runs left for a fan-out."""
    SPAWN_FAILED = "spawn_failed"
    """A spawner could not create its children."""
    CHILD_FAILURES = "child_failures"
    """A merge saw more failed children than it tolerates."""
    INVALID_RESPONSE = "invalid_response"
    """The destination answered with a body the step cannot use (too large, invalid JSON)."""
    INVALID_CONFIG = "invalid_config"
    """A configuration value evaluated to something unusable (e.g. a non-list `items`, or a
    SPAWNER's child inputs over their size limits)."""
    SECRET_NOT_FOUND = "secret_not_found"
    """The step references a secret its tenant does not have (set it, then retry the run)."""
    SECRET_UNREADABLE = "secret_unreadable"
    """The worker cannot decrypt a secret the step references: no encryption key configured,
    an invalid one, or none of its keys is the one the secret was encrypted with."""
    EGRESS_DENIED = "egress_denied"
    """The egress policy refused the call's address or scheme; nothing was sent."""
    INVALID_INPUT = "invalid_input"
    """A child run's input (rendered by its SPAWNER) does not match its workflow's
    inputSchema; nothing was sent (a root run's is refused on submission, same code)."""
    TOO_MANY_ITEMS = "too_many_items"
    """A SPAWNER's items exceed the most children one fan-out may start."""
    INTERNAL_ERROR = "internal_error"
    """A bug or an unexpected exception inside SchemaBridge."""
    DEPLOYMENT_ENDED = "deployment_ended"
    """A `gradual_deploy` stage found its deployment rolled back or aborted (its run then
    fails: the deployment's figures say why)."""


@dataclass(frozen=True)
class SentRequest:
    """What a GATEWAY attempt sent, as an operator may see it: built only once an attempt has
    failed (`vertices.gateway`), with the step's secrets redacted before anything is cut."""

    method: str
    url: str
    """The URL as sent, query included, without `user:password@` or fragment."""
    header_names: tuple[str, ...] = ()
    """The names of the headers the step set; their values are never kept."""
    body_excerpt: str = ""
    """The start of the request body as text ("" when none was sent)."""
    body_bytes: int = 0
    """The whole body's size as sent."""
    body_truncated: bool = False
    """The body goes on past `body_excerpt`."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "headerNames": list(self.header_names),
            "bodyExcerpt": self.body_excerpt,
            "bodyBytes": self.body_bytes,
            "bodyTruncated": self.body_truncated,
        }


@dataclass(frozen=True)
class HttpDetail:
    """What the destination answered (for errors shown to operators), and what the step had
    sent it (`request`; None when nothing was sent)."""

    status: int | None
    body_excerpt: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    attempts: int = 1
    request: SentRequest | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status,
            "bodyExcerpt": self.body_excerpt,
            "headers": self.headers,
            "attempts": self.attempts,
        }
        if self.request is not None:
            data["request"] = self.request.as_dict()
        return data


def children_hint(run_id: str, status: str = "FAILED") -> str:
    """What a `child_failures` message ends with: where an operator lists those children (a
    command of a running API; `schemabridge run`, which has none, lists them itself)."""
    return f"; see `schemabridge runs children {run_id} --status {status}`"


@dataclass(frozen=True)
class ChildCause:
    """Why most of a join's failed children failed: the commonest error kind among the first
    `read` FAILED children (all of them when `read` is their count), and how many had it."""

    kind: str
    count: int
    read: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "read": self.read}


FIX_FIRST_KINDS = frozenset(
    {"invalid_input", "invalid_config", "expression_error", "too_many_items"}
)
"""Failures that come from the workflow or the run's input, not from a destination: running
the same version with the same input again (retry, reprocess, start over) fails the same way.
The workflow (or the input) must be fixed, published and a new run submitted."""


class StepFailure(SchemaBridgeError):
    """A vertex failed. Raised by vertices, recorded by the engine as the step's error."""

    code = "step_failed"

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        http: HttpDetail | None = None,
        retry_after_s: float | None = None,
        child_cause: ChildCause | None = None,
        children_cancelled: int = 0,
        wait_cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.http = http
        self.retry_after_s = retry_after_s
        """The destination asked us to wait at least this long (Retry-After)."""
        self.child_cause = child_cause
        """A `child_failures`' most common cause among the failed children read."""
        self.children_cancelled = children_cancelled
        """A `child_failures`: the CANCELLED children among those the join does not
        tolerate. No retry or reprocess runs a cancelled child again, so the join would fail
        again at once (`engine.store.retry_checks`)."""
        self.wait_cause = wait_cause
        """What the destination did, in words true of every step it answered so ("https://…
        answered 429 Too Many Requests, Retry-After 7 s"): a redispatch's wait leads with it,
        so a fan-out's children redispatched for it share it (`message` names each one's
        URL). Not stored in the error: it is the wait message's."""

    @property
    def wait_reason(self) -> WaitReason:
        """Why the step waits when this failure is redispatched (`schemas.waiting`)."""
        return WaitReason.REDISPATCH

    @property
    def redispatchable(self) -> bool:
        """Whether the engine may redispatch the step through admission (docs/architecture.md,
        'Redispatch')."""
        return self.kind is FailureKind.EXTERNAL_OVERLOAD

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind.value, "message": self.message}
        if self.http is not None:
            data["http"] = self.http.as_dict()
        if self.retry_after_s is not None:
            data["retryAfterS"] = self.retry_after_s
        if self.child_cause is not None:
            data["childCause"] = self.child_cause.as_dict()
        if self.children_cancelled:
            data["childrenCancelled"] = self.children_cancelled
        return data


class RetryRefused(StepFailure):
    """A retry was not let through because the destination's retry budget is low. Raised
    before an in-process retry, the previous attempt's failure is the step's failure (the
    retry simply did not happen); before a redispatch it is an `external_overload` itself."""

    def __init__(self, message: str) -> None:
        super().__init__(FailureKind.EXTERNAL_OVERLOAD, message)


class BreakerOpen(StepFailure):
    """A circuit breaker of the destination blocked the call (open, or half-open with every
    probe permit in use): an `external_overload`, redispatched once probes are let through
    (`retry_after_s`). `opened_at` names the breaker's opening: the engine counts one
    redispatch per opening a step is refused under, and parks it without counting when the
    same opening refuses it again (docs/architecture.md, 'Redispatch')."""

    def __init__(
        self,
        message: str,
        *,
        destination: str,
        layer: str,
        retry_after_s: float,
        opened_at: float = 0.0,
    ) -> None:
        super().__init__(FailureKind.EXTERNAL_OVERLOAD, message, retry_after_s=retry_after_s)
        self.destination = destination
        self.layer = layer
        """`tenant` or `global` (docs/architecture.md, 'Circuit breakers')."""
        self.opened_at = opened_at
        """The blocking layer's stored opening time (epoch seconds)."""

    @property
    def opening(self) -> BreakerOpening:
        return BreakerOpening(self.layer, self.opened_at)

    @property
    def wait_reason(self) -> WaitReason:
        return WaitReason.BREAKER_OPEN

    def as_dict(self) -> dict[str, Any]:
        # The destination beside the opening: a step waiting behind the breaker names it to
        # the front doors (`BreakerRefusal.of_error`), which link to its Reset.
        breaker = self.opening.as_dict() | {"destination": self.destination}
        return super().as_dict() | {BREAKER_KEY: breaker}


BREAKER_KEY = "breaker"
"""The key of a breaker refusal's opening in the step's stored error (`BreakerOpening`)."""


@dataclass(frozen=True)
class BreakerOpening:
    """One opening of one breaker layer of the step's destination: the layer and its stored
    `opened_at`. A step remembers the opening its last counted redispatch was refused under,
    in its stored error (`BREAKER_KEY`), so a refusal by the same opening is not counted
    again."""

    layer: str
    opened_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "openedAt": self.opened_at}

    @classmethod
    def of_error(cls, error: Any) -> BreakerOpening | None:
        """The opening a stored step error names, or None (no error, another failure, or an
        error written before openings were recorded)."""
        if not isinstance(error, dict):
            return None
        value = error.get(BREAKER_KEY)
        if not isinstance(value, dict):
            return None
        layer, opened_at = value.get("layer"), value.get("openedAt")
        if not isinstance(layer, str) or not isinstance(opened_at, int | float) or not opened_at:
            return None
        return cls(layer, float(opened_at))


@dataclass(frozen=True)
class BreakerRefusal:
    """The breaker layer a step's stored breaker refusal names: its destination and layer
    (`tenant` or `global`), what an operator resets (`schemabridge destinations reset-breaker
    DESTINATION [--tenant T]`, `POST /destinations/{key}/breakers/reset[?tenant=T]`)."""

    destination: str
    layer: str

    @classmethod
    def of_error(cls, error: Any) -> BreakerRefusal | None:
        """The breaker a stored step error names, or None (no error, another failure, or a
        refusal recorded before errors named their destination)."""
        value = error.get(BREAKER_KEY) if isinstance(error, dict) else None
        if not isinstance(value, dict):
            return None
        destination, layer = value.get("destination"), value.get("layer")
        if not isinstance(destination, str) or not destination or layer not in _LAYERS:
            return None
        return cls(destination, layer)


_LAYERS = ("tenant", "global")


class StepDeferred(SchemaBridgeError):
    """A step cannot go on now, through nobody's fault: the engine parks it (a durable timer)
    and runs it again later; it never becomes the step's failure."""

    code = "step_deferred"


# ── operations phase ────────────────────────────────────────────────────────────────────────


class Refusal(StrEnum):
    """How a front door should present an `OperationError` (REST status, CLI exit code)."""

    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    INVALID = "invalid"
    LIMITED = "limited"
    UNAVAILABLE = "unavailable"


class OperationError(SchemaBridgeError):
    """An operation was refused. `code` says exactly why; `refusal` groups codes for front
    doors; `details` carries machine-readable context (the current state, the problems)."""

    code = "operation_refused"
    refusal: Refusal = Refusal.INVALID

    def __init__(
        self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details or {}


class NotFound(OperationError):
    """No run, workflow, version or step with that id (codes `run_not_found`, ...)."""

    code = "not_found"
    refusal = Refusal.NOT_FOUND


class WrongState(OperationError):
    """The action does not apply in the current state; `state` names it. A refusal of an
    action on a run names it in `details.runId` (and its step in `vertexId`), so that a
    script reading a batch of answers need not pair each with its request."""

    code = "wrong_state"
    refusal = Refusal.CONFLICT

    def __init__(
        self,
        message: str,
        *,
        state: str,
        code: str | None = None,
        run_id: str | None = None,
        vertex_id: str | None = None,
    ) -> None:
        details: dict[str, Any] = {"state": state}
        if run_id is not None:
            details["runId"] = run_id
        if vertex_id is not None:
            details["vertexId"] = vertex_id
        super().__init__(message, code=code, details=details)
        self.state = state


class RunCancelled(WrongState):
    """The run is CANCELLED, so the action (resolve, reprocess) does not apply: `details` are
    `runId` and `state` ("CANCELLED"), the fields every `run_cancelled` has, `?wait=true`'s
    (a run cancelled while the request waited) included."""

    code = "run_cancelled"

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message, state="CANCELLED", code=self.code, run_id=run_id)
        self.run_id = run_id


class IdempotencyConflict(OperationError):
    """The idempotency key already names a run submitted with a different request. `differs`
    names the parts of the request that differ (`workflow`, `version`, `input`, `tenantId`;
    `details.differs`), `input_pointer` where the input first does (`details.inputPointer`):
    names and pointers only, never an input's values."""

    code = "idempotency_conflict"
    refusal = Refusal.CONFLICT

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        differs: Sequence[str] = (),
        input_pointer: str | None = None,
    ) -> None:
        details: dict[str, Any] = {"runId": run_id, "differs": list(differs)}
        if input_pointer is not None:
            details["inputPointer"] = input_pointer
        super().__init__(message, details=details)
        self.run_id = run_id


class InvalidRequest(OperationError):
    """The request is wrong: an input the workflow's inputSchema refuses, a tampered cursor,
    an unknown filter value. `problems` point at what to fix (`details.problems`, when there
    are any); `details` adds other context (the `parameter` a cursor came in)."""

    code = "invalid_request"
    refusal = Refusal.INVALID

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        problems: list[Problem] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.problems = sorted(problems or [])
        listed = {"problems": [p.as_dict() for p in self.problems]} if self.problems else {}
        super().__init__(message, code=code, details={**(details or {}), **listed})


class LimitReached(OperationError):
    """A limit refuses the work for now: a tenant's run quota (`quota_exceeded`) or the ready
    queue past its high-water mark (`queue_full`, with `retry_after_s`)."""

    code = "limit_reached"
    refusal = Refusal.LIMITED

    def __init__(
        self, message: str, *, code: str | None = None, retry_after_s: float | None = None
    ) -> None:
        details = {} if retry_after_s is None else {"retryAfterS": retry_after_s}
        super().__init__(message, code=code, details=details)
        self.retry_after_s = retry_after_s


class QuotaExceeded(LimitReached):
    """The tenant used up its run quota. The quota counts every run the tenant created, not
    a rate: waiting never helps, so the answer has no `retry_after_s`; it says how an admin
    raises or removes the quota. `details`: `tenantId`, `usedRuns`, `maxRuns`."""

    code = "quota_exceeded"

    def __init__(self, tenant_id: str, *, used_runs: int, max_runs: int) -> None:
        runs = "run" if max_runs == 1 else "runs"
        super().__init__(
            f"tenant {tenant_id} used its quota of {max_runs} {runs} (a count of the runs it "
            "created, which waiting does not lower); an admin raises it with `schemabridge "
            f"tenants set-quota {tenant_id} N` or removes it with `schemabridge tenants "
            f"reset-quota {tenant_id}` (PUT /tenants/{{id}}/limits, maxRuns)",
            code=self.code,
        )
        self.details = {"tenantId": tenant_id, "usedRuns": used_runs, "maxRuns": max_runs}


def set_quota_command(tenant_id: str, max_runs: int) -> str:
    """The command that sets a tenant's run quota to `max_runs`, as a message names it."""
    return f"schemabridge tenants set-quota {shlex.quote(tenant_id)} {max_runs}"


SET_QUOTA_COMMAND = re.compile(r"`(schemabridge tenants set-quota [^`]+ \d+)`")
"""`set_quota_command` quoted in a message (a spawner's `quota_exceeded` names the quota its
fan-out needs): what `runs show` suggests running before the retry."""


class Unavailable(OperationError):
    """The database (`store_unavailable`) or Redis (`coordination_unavailable`) cannot be
    reached; nothing was changed, the same request may be sent again."""

    code = "unavailable"
    refusal = Refusal.UNAVAILABLE


# ── API phase ───────────────────────────────────────────────────────────────────────────────


class ApiError(SchemaBridgeError):
    """A REST request was refused by the API itself (authentication, a malformed request).
    Rendered as `{"code", "message", "details"}`, `details` `{}` when empty."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details: dict[str, Any] = details or {}
