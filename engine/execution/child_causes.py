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
    store: FailedChildren, failure: StepFailure, run_id: str, spawner_id: str, failed: int
) -> StepFailure:
    """`failure` (a `child_failures`) with the cause of the children's failures added to its
    message and as `child_cause`; as it was when no child FAILED (only cancelled ones)."""
    if failed <= 0:
        return failure
    errors = await store.failed_children_errors(run_id, spawner_id, limit=READ_AT_MOST)
    kinds: Counter[str] = Counter()
    first: dict[str, str] = {}
    for error in errors:
        kind = str(error.get("kind", "unknown")) if isinstance(error, Mapping) else "unknown"
        kinds[kind] += 1
        if kind not in first and isinstance(error, Mapping):
            first[kind] = str(error.get("message", ""))
    if not kinds:
        return failure
    kind, count = kinds.most_common(1)[0]
    read = sum(kinds.values())
    among = "" if read >= failed else f"of the first {read:,} failed: "
    others = read - count
    more = f", {others:,} other" if others else ""
    example = _short(first.get(kind, ""))
    # One child's message said of many reads as if they all failed alike (the same URL).
    if example:
        example = f", e.g. {example}" if count > 1 else f": {example}"
    message = f"{failure.message} ({among}{count:,} {kind}{example}{more}){children_hint(run_id)}"
    return StepFailure(
        FailureKind.CHILD_FAILURES, message, child_cause=ChildCause(kind, count, read)
    )


def _short(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"
