"""What `schemabridge runs purge` says it deleted (`PurgeOutcome.sentence`)."""

from __future__ import annotations

from engine.operations.retention import PurgeOutcome

CUTOFF = 1_793_491_200.0  # 2026-11-01T00:00:00Z


def test_children_deleted_while_a_worker_took_their_root_are_said() -> None:
    """A purge beside the workers' passes can delete a tree's children while a pass deletes
    its root: what it deleted is said, not "nothing to delete"."""
    outcome = PurgeOutcome(CUTOFF, False, 0, 1200, 2400, 1200, 0)
    assert outcome.sentence() == (
        "deleted 1,200 runs (0 roots, 1,200 children), 2,400 steps, 1,200 log lines, "
        "0 payload chunks of runs ended before 2026-11-01T00:00:00Z"
    )


def test_nothing_deleted_is_said_so() -> None:
    outcome = PurgeOutcome(CUTOFF, True, 0, 0, 0, 0, 0)
    assert outcome.sentence() == (
        "nothing to delete: no run tree ended before 2026-11-01T00:00:00Z"
    )
