"""Why a join's children failed, for the `child_failures` message: the commonest error kind
among the spawner's FAILED children, read from at most `READ_AT_MOST` of them (an index range,
so a 100,000-child fan-out costs what 1,000 rows cost), with the count by kind it is from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

from schemas.errors import ChildCause, FailureKind, StepFailure, children_hint

READ_AT_MOST = 1000
"""Failed children read for the cause: enough for the commonest kind to show."""
_MESSAGE_CHARS = 160


class FailedChildren(Protocol):
    async def failed_children_errors(
        self, run_id: str, vertex_id: str, *, limit: int
    ) -> list[Any]: ...


async def with_cause(
    store: FailedChildren,
    failure: StepFailure,
    run_id: str,
    spawner_id: str,
    *,
    failed: int,
    cancelled: int = 0,
) -> StepFailure:
    """`failure` (a `child_failures`) with the cause of the children's failures added to its
    message and as `child_cause`, and the `cancelled` children among those the join does not
    tolerate: no retry runs a cancelled child again, so a join that failed on one fails again
    at once, which an operator must read in the message, not find out by retrying."""
    cause = await _cause(store, run_id, spawner_id, failed) if failed > 0 else None
    if cause is None:
        if cancelled <= 0:
            return failure
        message = (
            f"{failure.message}: {cancelled:,} CANCELLED, which no retry runs again"
            f"{children_hint(run_id, 'CANCELLED')}"
        )
        return StepFailure(FailureKind.CHILD_FAILURES, message, children_cancelled=cancelled)
    words, child_cause = cause
    also = "" if cancelled <= 0 else f", {cancelled:,} of them CANCELLED"
    message = f"{failure.message} ({words}){also}{children_hint(run_id)}"
    return StepFailure(
        FailureKind.CHILD_FAILURES,
        message,
        child_cause=child_cause,
        children_cancelled=max(cancelled, 0),
    )


async def _cause(
    store: FailedChildren, run_id: str, spawner_id: str, failed: int
) -> tuple[str, ChildCause] | None:
    """The commonest error kind among the first FAILED children, in words ("3
    invalid_config, e.g. …, 1 other") and as a `ChildCause`; None when none was read."""
    errors = await store.failed_children_errors(run_id, spawner_id, limit=READ_AT_MOST)
    kinds: Counter[str] = Counter()
    first: dict[str, str] = {}
    for error in errors:
        kind = str(error.get("kind", "unknown")) if isinstance(error, Mapping) else "unknown"
        kinds[kind] += 1
        if kind not in first and isinstance(error, Mapping):
            first[kind] = str(error.get("message", ""))
    if not kinds:
        return None
    kind, count = kinds.most_common(1)[0]
    read = sum(kinds.values())
    among = "" if read >= failed else f"of the first {read:,} failed: "
    others = read - count
    more = f", {others:,} other" if others else ""
    example = _short(first.get(kind, ""))
    # One child's message said of many reads as if they all failed alike (the same URL).
    if example:
        example = f", e.g. {example}" if count > 1 else f": {example}"
    return f"{among}{count:,} {kind}{example}{more}", ChildCause(kind, count, read)


def _short(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"
