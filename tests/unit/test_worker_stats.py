"""What a worker's stop says it did: counts with their nouns, one or many."""

from __future__ import annotations

from engine.execution.worker import WorkerStats


def test_a_workers_stop_line_says_one_step_not_one_steps() -> None:
    """An integrator's tour read "1 steps claimed … 1 results recorded" in the log."""
    one = WorkerStats(claimed=1, claims=1, recorded=1, flushes=1)
    assert one.summary() == (
        "1 step claimed in 1 claim (0 found none), 1 result recorded in 1 write, 0 late "
        "results dropped, 0 steps stopped without a result (run cancelled or failed, lease "
        "lost), 0 expired leases requeued"
    )
    many = WorkerStats(claimed=12_000, claims=40, empty_claims=3, requeued=1)
    assert many.summary().startswith("12,000 steps claimed in 40 claims (3 found none)")
    assert many.summary().endswith("1 expired lease requeued")
