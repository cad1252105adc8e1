"""What a deployment stage decides from its figures (`vertices.deploy`): pure, no I/O."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from schemas.durations import duration
from vertices.deploy import (
    Figures,
    Hold,
    Pass,
    RollBack,
    RollbackPolicy,
    Stage,
    VersionCounts,
    decide,
    threshold,
    waits_for,
)

STAGE = Stage(weight=10, min_runs=20, min_duration_s=60)
POLICY = RollbackPolicy(max_failure_ratio=0.05, margin_over_serving=None, min_finished_runs=10)
HEALTHY = VersionCounts(runs=100, succeeded=100)


def figures(
    candidate: VersionCounts, *, serving: VersionCounts = HEALTHY, runs: int = 0, elapsed: float = 0
) -> Figures:
    return Figures(candidate, serving, stage_runs=runs, stage_elapsed_s=elapsed)


def counts(succeeded: int, failed: int, running: int = 0, cancelled: int = 0) -> VersionCounts:
    return VersionCounts(succeeded + failed + running + cancelled, succeeded, failed, cancelled)


def test_a_failing_candidate_rolls_back_as_soon_as_enough_runs_have_finished() -> None:
    # Early in the stage (3 of 20 runs, 5 s of 60): too few finished to judge yet.
    early = decide(STAGE, POLICY, figures(counts(0, 3), runs=3, elapsed=5), 2.0)
    assert isinstance(early, Hold) and early.delay_s == 2.0
    assert "3/10 finished runs" in early.reason and "55 s more" in early.reason
    # Ten finished, all failed: rolled back mid-stage, without waiting for its end.
    verdict = decide(STAGE, POLICY, figures(counts(0, 10, running=2), runs=12, elapsed=8), 2.0)
    assert isinstance(verdict, RollBack)
    assert "failed 10 of its 10 finished runs" in verdict.reason
    assert "1.000 > threshold 0.050" in verdict.reason


def test_a_stage_passes_when_runs_time_and_judgement_are_all_there() -> None:
    good = counts(30, 1)
    held = decide(STAGE, POLICY, figures(good, runs=31, elapsed=59.5), 5.0)
    assert isinstance(held, Hold) and held.delay_s == pytest.approx(0.5)  # until the end
    assert isinstance(decide(STAGE, POLICY, figures(good, runs=31, elapsed=60), 5.0), Pass)
    few = decide(STAGE, POLICY, figures(good, runs=19, elapsed=600), 5.0)
    assert isinstance(few, Hold) and "19/20 runs" in few.reason and few.delay_s == 5.0
    unfinished = decide(STAGE, POLICY, figures(counts(5, 0, running=20), runs=25, elapsed=90), 5)
    assert isinstance(unfinished, Hold) and "5/10 finished runs" in unfinished.reason


def test_the_ratio_must_exceed_the_threshold_and_cancelled_runs_do_not_count() -> None:
    at_limit = counts(19, 1, cancelled=30)  # 1/20 = 0.05, not above it
    assert isinstance(decide(STAGE, POLICY, figures(at_limit, runs=50, elapsed=60), 1), Pass)
    above = counts(18, 2)
    assert isinstance(decide(STAGE, POLICY, figures(above, runs=50, elapsed=60), 1), RollBack)


def test_the_margin_keeps_an_outage_of_both_versions_off_the_candidate() -> None:
    policy = RollbackPolicy(max_failure_ratio=0.05, margin_over_serving=0.05, min_finished_runs=10)
    outage = counts(60, 40)  # the serving version fails 40 % too
    assert threshold(policy, outage) == pytest.approx(0.45)
    candidate = counts(6, 4)
    both_down = figures(candidate, serving=outage, runs=30, elapsed=60)
    assert isinstance(decide(STAGE, policy, both_down, 1), Pass)
    assert isinstance(decide(STAGE, POLICY, both_down, 1), RollBack)  # without the margin
    # Purely relative: max 0, margin 0.02 over a serving version that never fails.
    relative = RollbackPolicy(max_failure_ratio=0, margin_over_serving=0.02, min_finished_runs=10)
    assert threshold(relative, HEALTHY) == pytest.approx(0.02)
    # No finished serving run in the window: the absolute threshold alone.
    assert threshold(policy, VersionCounts(runs=3)) == 0.05


def test_figures_and_policies_round_trip_as_stored() -> None:
    assert Stage.from_dict(STAGE.as_dict()) == STAGE
    assert RollbackPolicy.from_dict(POLICY.as_dict()) == POLICY
    shown = figures(counts(3, 1, running=2), runs=6, elapsed=1.23456).as_dict(POLICY)
    assert shown["candidate"] == {
        "runs": 6,
        "succeeded": 3,
        "failed": 1,
        "cancelled": 0,
        "refused": 0,
        "finished": 4,
        "failureRatio": 0.25,
    }
    assert shown["stageElapsedSeconds"] == 1.235 and shown["threshold"] == 0.05
    assert VersionCounts().failure_ratio is None


def test_refusals_are_failed_runs_and_the_verdict_says_how_many() -> None:
    """Submissions the candidate's inputSchema refused count in `failed` (and `runs`): a
    candidate refusing what clients send rolls back, its reason saying so."""
    refusing = VersionCounts(runs=10, failed=10, refused=10)
    assert (refusing.finished, refusing.failure_ratio) == (10, 1.0)
    decision = decide(STAGE, POLICY, figures(refusing, runs=10, elapsed=0), 5)
    assert isinstance(decision, RollBack)
    assert decision.reason == (
        "the candidate failed 10 of its 10 finished runs (10 refused by the candidate's "
        "inputSchema) (ratio 1.000 > threshold 0.050)"
    )


def test_the_reasons_say_passed_or_waiting_with_the_ratio_so_far() -> None:
    """ "stage held" read as "the stage is holding" when it meant passed: a hold says what the
    stage waits for and how the candidate fares so far, a pass that the stage passed."""
    waiting = decide(STAGE, POLICY, figures(counts(3, 1), runs=4, elapsed=20), 5.0, number=2)
    assert isinstance(waiting, Hold)
    assert waiting.reason == (
        "waiting at stage 2: 4/20 runs, 40 s more, 4/10 finished runs; "
        "failure ratio 0.250 (1 failed of 4 finished), threshold 0.050"
    )
    nothing = decide(STAGE, POLICY, figures(VersionCounts(runs=2)), 5.0)
    assert isinstance(nothing, Hold) and nothing.reason.startswith("waiting at stage 1: ")
    assert nothing.reason.endswith("; no finished run yet, threshold 0.050")
    passed = decide(STAGE, POLICY, figures(counts(30, 1), runs=31, elapsed=60), 5.0, number=3)
    assert isinstance(passed, Pass)
    assert passed.reason == (
        "stage 3 passed: failure ratio 0.032 (1 failed of 31 finished) within threshold 0.050"
    )


@pytest.mark.parametrize(
    ("min_duration_s", "elapsed_s", "said"),
    [(600.0, 300.0, "5 min more"), (600.0, 348.0, "4 min 12 s more"), (60.0, 51.5, "8.5 s more")],
)
def test_a_stage_s_wait_is_said_as_a_duration(
    min_duration_s: float, elapsed_s: float, said: str
) -> None:
    # "300.0 s more" made operators do the arithmetic: the wait reads as `show` prints spans.
    stage = dataclasses.replace(STAGE, min_duration_s=min_duration_s)
    waiting = decide(stage, POLICY, figures(counts(3, 0), runs=3, elapsed=elapsed_s), 5.0)
    assert isinstance(waiting, Hold)
    assert f", {said}, " in waiting.reason, waiting.reason


def test_the_docs_quote_a_stage_s_wait_as_decide_says_it() -> None:
    # Operators match what they read against the docs' examples of `holding`: each is led by
    # "waiting at stage N" and says its span as `duration` does ("41 s", never "41.0 s").
    root = Path(__file__).parents[2]
    quoted = [
        wait
        for doc in (root / "README.md", *(root / "docs").glob("*.md"))
        for wait in re.findall(r'"((?:waiting at )?stage [^"]*?\d s more[^"]*)"', doc.read_text())
    ]
    assert quoted, "the docs give an example of a stage's wait"
    for wait in quoted:
        assert re.match(r"waiting at stage \d+: ", wait), wait
        span = re.search(r"([\d.]+) s more", wait)
        assert span is not None and f"{span.group(1)} s" == duration(float(span.group(1))), wait


def test_what_a_stage_waits_for_is_said_in_its_checks_terms() -> None:
    """The tour: a stage shown as "25 % (10 runs, 10 s)" whose check said "19/20 finished
    runs". A stage's words name the finished runs its verdict needs, as its check does."""
    stage = Stage(weight=25, min_runs=10, min_duration_s=10)
    policy = dataclasses.replace(POLICY, min_finished_runs=20)
    assert waits_for(stage, policy) == "10 runs, 10 s, 20 finished runs"
    # A later stage begins with them (no stage passes before): "20 finished runs" on every
    # stage read as 20 more in each.
    assert waits_for(stage, policy, 2) == "10 runs, 10 s"
    assert waits_for(Stage(weight=100, min_runs=0, min_duration_s=0), policy, 3) == (
        "nothing but its check"
    )
    held = decide(stage, policy, figures(counts(19, 0, running=3), runs=22, elapsed=30), 5.0)
    assert isinstance(held, Hold) and "19/20 finished runs" in held.reason
    one = dataclasses.replace(policy, min_finished_runs=1)
    assert waits_for(Stage(weight=100, min_runs=1, min_duration_s=0), one) == (
        "1 run, 1 finished run"
    )
    none = dataclasses.replace(policy, min_finished_runs=0)
    assert waits_for(Stage(weight=100, min_runs=0, min_duration_s=0), none) == (
        "nothing but its check"
    )


def test_a_wait_groups_its_figures_as_the_stages_line_does() -> None:
    """From a release manager's tour: "0/100000000 runs" beside "100,000,000 runs"."""
    big = Stage(weight=10, min_runs=100_000_000, min_duration_s=0)
    policy = dataclasses.replace(POLICY, min_finished_runs=25_000)
    held = decide(big, policy, figures(counts(1_234, 0), runs=1_234), 2.0)
    assert isinstance(held, Hold)
    assert held.reason.startswith(
        "waiting at stage 1: 1,234/100,000,000 runs, 1,234/25,000 finished runs; "
    ), held.reason
