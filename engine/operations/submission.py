"""The rules of a submission that are not SQL: what makes two submissions the same request,
how an idempotency key is stored, the timeout tier of a run, and the ready-queue high-water
mark at the door."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from engine.store import Store
from engine.store.records import RunRecord
from engine.validation import deep_pointer, nesting_exceeds
from engine.validation.common import pointer
from schemas.clock import Clock
from schemas.definitions import SpawnerVertex, Workflow
from schemas.errors import InvalidRequest, LimitReached, Problem

MAX_KEY_CHARS = 256
KEY_PREFIX = "submit:"
QUEUE_FULL_RETRY_S = 5.0
"""What a submission refused for a full ready queue is told to wait."""
QUIET_S = 1.0
"""How long a ready queue found at most half as deep as the mark is not counted again."""


def canonical_json(value: Any, what: str) -> str:
    """`value` as canonical JSON text (sorted keys, no spaces); not JSON → `InvalidRequest`."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{what} is not JSON: {exc}", code="invalid_input") from exc


def check_input_limits(run_input: Any, *, max_bytes: int, max_depth: int) -> None:
    """Refuse an input larger than `max_bytes` as compact JSON (`input_too_large`) or nested
    deeper than `max_depth` (`input_too_deep`), each with a problem pointing into the input.
    Measured on the value already parsed, whose size the request body limit bounds."""
    check_value_limits(
        run_input,
        Bound(
            "input",
            max_bytes,
            "pass large data by reference (a URL the workflow fetches) or raise "
            "SCHEMABRIDGE_MAX_INPUT_BYTES",
        ),
        max_depth=max_depth,
    )


@dataclass(frozen=True)
class Bound:
    """The size limit of one kind of JSON value a client hands in, as its refusal says it."""

    what: str
    """"input", "output": the codes are `<what>_too_large`, `<what>_too_deep`."""
    max_bytes: int
    advice: str
    """What to do instead, naming the setting that raises the limit."""


def check_value_limits(value: Any, bound: Bound, *, max_depth: int) -> None:
    """Refuse `value` when larger than `bound.max_bytes` as compact JSON (`<what>_too_large`)
    or nested deeper than `max_depth` (`<what>_too_deep`), each with a problem pointing into
    the value (`InvalidRequest`, answered 422)."""
    what = bound.what
    try:
        text = canonical_json(value, f"the {what}")
    except RecursionError:  # only a value built in Python can be this deep
        text = None
    size = 0 if text is None else len(text.encode("utf-8", "surrogatepass"))
    if size > bound.max_bytes:
        message = (
            f"The {what} is {size:,} bytes as compact JSON, over the limit of "
            f"{bound.max_bytes:,}; {bound.advice}."
        )
        raise InvalidRequest(
            message, code=f"{what}_too_large", problems=[Problem("", message, "too_large")]
        )
    deep = None
    if text is None or nesting_exceeds(text, max_depth):
        deep = deep_pointer(value, max_depth)
    if deep is not None:
        message = (
            f"The {what} nests arrays and objects more than {max_depth} levels deep; flatten "
            "it or raise SCHEMABRIDGE_MAX_NESTING_DEPTH."
        )
        raise InvalidRequest(
            message, code=f"{what}_too_deep", problems=[Problem(deep, message, "too_deep")]
        )


def request_hash(workflow: str, version: int | None, run_input: Any, tenant_id: str) -> str:
    """SHA-256 of what a submission asks for: the workflow, the version it pins (None: the
    latest), the input and the tenant. The same key with another hash is another request."""
    request = {"workflow": workflow, "version": version, "input": run_input, "tenant": tenant_id}
    return hashlib.sha256(canonical_json(request, "the input").encode()).hexdigest()


MAX_POINTER_CHARS = 200
"""The longest input pointer a conflict names (an input's keys may be long)."""


@dataclass(frozen=True)
class Request:
    """What a submission asks for: the parts `request_hash` covers."""

    workflow: str
    version: int | None
    """The version it names; None: it left the version to routing."""
    input: Any
    tenant_id: str


@dataclass(frozen=True)
class Difference:
    """Which parts of a request differ from those of the request an idempotency key was first
    sent with: their wire names (`workflow`, `version`, `input`, `tenantId`), a phrase for
    each, and where the input first differs (a JSON pointer). No value of the input is
    named: it may hold secrets."""

    parts: tuple[str, ...]
    phrases: tuple[str, ...]
    input_pointer: str | None = None


def first_version(run: RunRecord) -> tuple[bool, int | None]:
    """Whether the hash `run`'s row keeps tells the version the request that created it
    named, and that version (None: it named none, routing chose)."""
    for version in (None, run.workflow_version):
        if run.request_hash == request_hash(run.workflow_name, version, run.input, run.tenant_id):
            return True, version
    return False, None


def difference(run: RunRecord, request: Request) -> Difference:
    """How `request` differs from the one that created `run` (which has the same key), read
    from the run's own fields: its workflow, tenant and input, and the version that request
    named (`first_version`). Empty when none differs as far as the row tells."""
    found: list[tuple[str, str]] = []
    if run.workflow_name != request.workflow:
        found.append(("workflow", f"the workflow ({request.workflow}, not {run.workflow_name})"))
    known, named = first_version(run)
    if known and named != request.version:
        found.append(("version", _version_phrase(named, request.version, run.workflow_version)))
    input_at = None
    if not _same(run.input, request.input):
        input_at = input_difference(run.input, request.input)
        found.append(("input", f"the input (first at {input_at})" if input_at else "the input"))
    if run.tenant_id != request.tenant_id:
        found.append(("tenantId", "the tenant (tenantId)"))
    if not found and not known:  # the hash differs and nothing else does: the version must
        found.append(("version", "the version (named, or left out, unlike the first time)"))
    return Difference(
        tuple(part for part, _ in found), tuple(phrase for _, phrase in found), input_at
    )


def _version_phrase(named: int | None, version: int | None, got: int) -> str:
    if named is None:
        return f"the version (v{version} named; the first request named none and got v{got})"
    if version is None:
        return f"the version (none named; the first request named v{named})"
    return f"the version (v{version}, not v{named})"


def input_difference(first: Any, second: Any) -> str:
    """The JSON pointer of the first place (keys in sorted order) where two inputs differ:
    a key one of them lacks, an item past the end of the shorter list, or a value of
    another type or JSON text; "" when they differ as a whole. Cut at `MAX_POINTER_CHARS`."""
    found = _difference_at(first, second, "")
    return found if len(found) <= MAX_POINTER_CHARS else found[:MAX_POINTER_CHARS] + "…"


def _same(first: Any, second: Any) -> bool:
    return canonical_json(first, "the input") == canonical_json(second, "the input")


def _difference_at(first: Any, second: Any, at: str) -> str:
    if isinstance(first, dict) and isinstance(second, dict):
        for key in sorted(first.keys() | second.keys()):
            if key not in first or key not in second:
                return at + pointer(key)
            if not _same(first[key], second[key]):
                return _difference_at(first[key], second[key], at + pointer(key))
    elif isinstance(first, list) and isinstance(second, list):
        for index, (one, other) in enumerate(zip(first, second, strict=False)):
            if not _same(one, other):
                return _difference_at(one, other, at + pointer(index))
        return at + pointer(min(len(first), len(second)))
    return at


def stored_key(tenant_id: str, key: str) -> str:
    """The idempotency key as stored: scoped to the tenant (two tenants may use the same key
    without seeing each other's runs) and apart from the keys the engine derives itself
    (children's `<run>/<vertex>/<index>`, an operator's start-over)."""
    tenant = hashlib.sha256(tenant_id.encode()).hexdigest()[:16]
    return f"{KEY_PREFIX}{tenant}:{key}"


def client_key(stored: str | None) -> str | None:
    """The key a client submitted, from its stored form (other keys are shown as they are)."""
    if stored is None or not stored.startswith(KEY_PREFIX):
        return stored
    return stored.split(":", 2)[2]


def check_key(key: str | None) -> str | None:
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS):
        raise InvalidRequest(
            f"an idempotency key is 1 to {MAX_KEY_CHARS} characters",
            code="invalid_idempotency_key",
        )
    return key


def timeout_tier(workflow: Workflow, *, synchronous: bool = False) -> str:
    """The GATEWAY timeout tier of a submitted run: "gateway" when its caller waits for its end
    (REST `?wait=true`: the answer is due within that tier), else "collect" when it feeds a
    fan-out (its calls gather the items), else "process". Child runs are always "process"."""
    if synchronous:
        return "gateway"
    spawns = any(isinstance(v, SpawnerVertex) for v in workflow.vertices.values())
    return "collect" if spawns else "process"


class ReadyGauge:
    """The door's high-water mark on the ready queue: at `max_ready` READY steps or more, a
    submission is refused with `LimitReached(code="queue_full", retry_after_s=5)`.

    Each check counts READY steps up to the mark (a bounded count). A queue found at most half
    as deep is not counted again for `QUIET_S`: one second of submissions cannot fill the other
    half in practice, and near the mark every submission counts again."""

    def __init__(self, store: Store, clock: Clock, max_ready: int) -> None:
        self._store = store
        self._clock = clock
        self._max_ready = max_ready
        self._quiet_until = float("-inf")

    async def check(self) -> None:
        if self._clock.monotonic() < self._quiet_until:
            return
        depth = await self._store.ready_steps(self._max_ready)
        if depth >= self._max_ready:
            raise LimitReached(
                f"the ready queue holds {self._max_ready} steps or more; workers are behind, "
                f"submit again in {QUEUE_FULL_RETRY_S:g} s",
                code="queue_full",
                retry_after_s=QUEUE_FULL_RETRY_S,
            )
        if depth * 2 <= self._max_ready:
            self._quiet_until = self._clock.monotonic() + QUIET_S
