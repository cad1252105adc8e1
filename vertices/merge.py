"""MERGE: the join of one SPAWNER's children, with opt-in failure tolerance
(docs/architecture.md, 'Fan-out and the join').

Two pure decisions, both O(1) on counters:

* `join_state` — called by the engine each time a child ends (with the spawner's counters):
  whether the join can close now. It closes when every child has ended or, with `failFast`,
  as soon as the tolerance is certainly exceeded (the failures so far already break it,
  whatever the stragglers do).
* `check` — called when the MERGE step runs: fail with `child_failures`, or let the engine
  assemble counts and outputs in item order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from schemas.definitions import MergeConfig
from schemas.errors import FailureKind, StepFailure


@dataclass(frozen=True)
class ChildCounts:
    total: int
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "pending": self.total - self.ended,
        }

    def in_words(self) -> str:
        """`400 children, 397 succeeded, 3 failed`: for a person reading the run's log (the
        structured counts go in the line's `data`). Succeeded and failed are always said,
        cancelled and still going only when there are some (a `failFast` join closes while
        children run)."""
        parts = [
            f"{self.total:,} {'child' if self.total == 1 else 'children'}",
            f"{self.succeeded:,} succeeded",
            f"{self.failed:,} failed",
        ]
        if self.cancelled:
            parts.append(f"{self.cancelled:,} cancelled")
        if self.total > self.ended:
            parts.append(f"{self.total - self.ended:,} still going")
        return ", ".join(parts)


class JoinState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


def _intolerable(config: MergeConfig, counts: ChildCounts) -> int:
    """Children whose status the merge does not tolerate at all."""
    bad = 0
    if "FAILED" not in config.tolerate_child_failures:
        bad += counts.failed
    return bad + intolerable_cancelled(config, counts)


def intolerable_cancelled(config: MergeConfig, counts: ChildCounts) -> int:
    """The CANCELLED children among those the merge does not tolerate at all."""
    return 0 if "CANCELLED" in config.tolerate_child_failures else counts.cancelled


def _unsuccessful(counts: ChildCounts) -> int:
    return counts.failed + counts.cancelled


def tolerance_exceeded(config: MergeConfig, counts: ChildCounts) -> str | None:
    """Why the children so far break the merge's tolerance, or None when they don't.

    Ratios are taken over `total` (every child, ended or not), so once exceeded a ratio can
    never come back under: more failures only raise it. That makes the check safe to use for
    `failFast` before every child has ended.
    """
    intolerable = _intolerable(config, counts)
    if intolerable:
        return f"{intolerable:,} of {counts.total:,} children ended with a status not tolerated"
    tolerance = config.failure_tolerance
    failures = _unsuccessful(counts)
    if tolerance is None or failures == 0:
        return None
    if tolerance.max_failures is not None and failures > tolerance.max_failures:
        return f"{failures:,} children failed, more than maxFailures {tolerance.max_failures:,}"
    ratio = failures / counts.total if counts.total else 0.0
    if tolerance.max_failure_ratio is not None and ratio > tolerance.max_failure_ratio:
        return (
            f"{failures:,} of {counts.total:,} children failed ({ratio:.1%}), more than "
            f"maxFailureRatio {tolerance.max_failure_ratio:.1%}"
        )
    return None


def join_state(config: MergeConfig, counts: ChildCounts) -> JoinState:
    """Whether the join may close now (see the module docstring)."""
    if counts.ended >= counts.total:
        return JoinState.CLOSED
    if config.fail_fast and tolerance_exceeded(config, counts) is not None:
        return JoinState.CLOSED
    return JoinState.OPEN


def check(config: MergeConfig, counts: ChildCounts) -> None:
    """Raise StepFailure(child_failures) when the children break the tolerance.

    The engine then assembles the output: counts by status and the children's outputs in item
    order (None for a child that did not succeed), inline or in the payload store.
    """
    reason = tolerance_exceeded(config, counts)
    if reason is not None:
        raise StepFailure(FailureKind.CHILD_FAILURES, reason)
