"""`bench.admission_common.call_span`: when a capacity run's calls began and ended, from the
downstream's request records (issue 17's start-up figure)."""

from __future__ import annotations

from bench.admission_common import call_span


def test_the_span_runs_from_the_first_answered_arrival_to_the_last_answer() -> None:
    records = [
        {"t": 100.30, "outcome": "429", "durationMs": 0.2},  # refused at once: holds no slot
        {"t": 100.25, "outcome": "200", "durationMs": 50.0},
        {"t": 113.70, "outcome": "200", "durationMs": 50.0},
        {"t": 113.72, "outcome": "200", "durationMs": 40.0},
    ]
    assert call_span(records, submitted_at=100.0) == {
        "first_call_s": 0.25,
        "last_answer_s": 13.76,
    }


def test_no_answered_call_has_no_span() -> None:
    assert call_span([{"t": 1.0, "outcome": "429", "durationMs": 0.1}], submitted_at=0.0) == {}
