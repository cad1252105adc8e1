"""What a worker remembers of a step between its executions, in memory, for the steps it
executed last (`REMEMBERED_STEPS`): how many transient store errors in a row it hit, and
whether the wait it parked for last was an outage already written in its run's log.

Neither can be read from the step's row: a claim counts every execution (`attempts`), and a
step waiting out an outage is claimed again every few seconds, each time an execution. Bounding
store errors by executions failed a step for good on its first store error after a long Redis
outage (21 executions after 40 s), and a line per execution wrote tens of thousands of
identical "parked: admission unavailable" lines during one. What is forgotten (a worker
restarted, a step pushed out by newer ones) errs on the kind side: one more store error
tolerated, one more line written.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from schemas.waiting import WaitReason

REMEMBERED_STEPS = 10_000
"""Steps remembered at once, the least recently executed forgotten first."""

OUTAGE_WAITS = frozenset({WaitReason.COORDINATION_UNAVAILABLE})
"""Waits whose park line is written once per outage, not once per execution: the step's
wait message says the current state, and the worker's own log says when the outage ends.
Other waits (a deployment stage's figures, a tenant's rate) say something new each time."""


@dataclass
class _Remembered:
    store_errors: int = 0
    outage: WaitReason | None = None


class StepMemory:
    """Per step id, what its earlier executions in this worker left (see the module)."""

    def __init__(self, size: int = REMEMBERED_STEPS) -> None:
        self._size = size
        self._steps: OrderedDict[int, _Remembered] = OrderedDict()

    def _entry(self, step_id: int) -> _Remembered:
        entry = self._steps.get(step_id)
        if entry is None:
            entry = self._steps[step_id] = _Remembered()
            if len(self._steps) > self._size:
                self._steps.popitem(last=False)
        else:
            self._steps.move_to_end(step_id)
        return entry

    def store_error(self, step_id: int) -> int:
        """Count a transient store error of the step; how many it has hit in a row."""
        entry = self._entry(step_id)
        entry.store_errors += 1
        return entry.store_errors

    def parked(self, step_id: int, reason: WaitReason) -> bool:
        """The step parks to wait for `reason`: whether its run's log should say so (not
        when the same outage's line was written by its last execution here)."""
        entry = self._entry(step_id)
        entry.store_errors = 0
        if reason not in OUTAGE_WAITS:
            entry.outage = None
            return True
        repeated = entry.outage is reason
        entry.outage = reason
        return not repeated

    def forget(self, step_id: int) -> None:
        """The step ended or moved on (succeeded, failed, awaits children, was abandoned)."""
        if self._steps:
            self._steps.pop(step_id, None)
