"""The rules of a gradual deployment: what a DEPLOY_STAGE step decides at each check.

A deployment moves a share of a workflow's new runs (the stage's weight) from the serving
version to a candidate, stage by stage. Each stage holds until the candidate has received at
least `min_runs` runs since the stage began and `min_duration_s` has passed; its judgement
needs `min_finished_runs` finished runs of the candidate since the deployment began. Every
check compares the candidate's failure ratio with the threshold as soon as it has enough
finished runs, so a broken candidate is caught while the stage holds, not only at its end:

* over the threshold → roll back (the candidate's weight drops to 0 at once);
* the stage's runs and time reached and judged under the threshold → pass (the next stage,
  or promotion after the last);
* otherwise → hold until the next check (`check_interval_s`), or until the stage's minimum
  duration ends if that comes first.

The threshold: the candidate is over it when its failure ratio exceeds
`max(max_failure_ratio, serving ratio + margin_over_serving)`. Without a margin (or while the
serving version has no finished run in the window) it is `max_failure_ratio` alone; with one,
an outage that fails both versions alike is not blamed on the candidate, and
`max_failure_ratio = 0` makes the check purely relative to the serving version.

Failure ratio = FAILED / (SUCCEEDED + FAILED) among root runs (each version's latest
`JUDGED_RUNS`), where the candidate's FAILED include the submissions routed to it that its
inputSchema refused (`VersionCounts.refused`: a 422, no run); a run an operator cancelled
says nothing about the version and is left out; a child run counts through its root, whose
MERGE decides whether the children's failures fail it. Pure: the engine reads the counts
(`engine.execution.deploy_stage`) and records the decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.durations import duration

JUDGED_RUNS = 10_000
"""A check judges each version on its latest runs, at most this many (the candidate's at least
as many as its stage's minimum runs, plus the policy's minimum finished runs, so that runs
still running never hide the finished ones it waits for): a bounded read whatever the window
holds, and more than enough for a ratio (its standard error is under half a point)."""


@dataclass(frozen=True)
class Stage:
    weight: float
    """Percent of routed submissions the candidate gets, above 0 and at most 100."""
    min_runs: int
    """Runs the candidate must receive during the stage before it can end."""
    min_duration_s: float
    """How long the stage holds at least."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "minRuns": self.min_runs,
            "minDurationSeconds": self.min_duration_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stage:
        return cls(float(data["weight"]), int(data["minRuns"]), float(data["minDurationSeconds"]))


@dataclass(frozen=True)
class RollbackPolicy:
    max_failure_ratio: float
    """0 to 1: the candidate rolls back when its failure ratio exceeds it (see the module)."""
    margin_over_serving: float | None
    """Optional, 0 to 1: the threshold is at least the serving version's ratio plus this."""
    min_finished_runs: int
    """Finished runs of the candidate before any judgement."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "maxFailureRatio": self.max_failure_ratio,
            "marginOverServing": self.margin_over_serving,
            "minFinishedRuns": self.min_finished_runs,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RollbackPolicy:
        margin = data.get("marginOverServing")
        return cls(
            float(data["maxFailureRatio"]),
            None if margin is None else float(margin),
            int(data["minFinishedRuns"]),
        )


@dataclass(frozen=True)
class VersionCounts:
    """One version's root runs created in a window, by outcome."""

    runs: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    refused: int = 0
    """Of `runs` and `failed`: submissions the version's inputSchema refused (a 422: no run
    exists). Counted as failed runs: a client whose request the candidate refuses got an
    error where the serving version would have run it."""

    @property
    def finished(self) -> int:
        """Runs that ended SUCCEEDED or FAILED (the judgement's denominator)."""
        return self.succeeded + self.failed

    @property
    def failure_ratio(self) -> float | None:
        """FAILED among finished runs; None before any finished."""
        return self.failed / self.finished if self.finished else None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VersionCounts:
        """The counts `as_dict` wrote (its derived fields ignored)."""
        return cls(
            runs=int(data.get("runs", 0)),
            succeeded=int(data.get("succeeded", 0)),
            failed=int(data.get("failed", 0)),
            cancelled=int(data.get("cancelled", 0)),
            refused=int(data.get("refused", 0)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "refused": self.refused,
            "finished": self.finished,
            "failureRatio": self.failure_ratio,
        }


@dataclass(frozen=True)
class Figures:
    """What a check saw: the candidate and the serving version since the deployment began,
    and the candidate's runs since the stage began."""

    candidate: VersionCounts
    serving: VersionCounts
    stage_runs: int
    stage_elapsed_s: float

    def as_dict(self, policy: RollbackPolicy) -> dict[str, Any]:
        return {
            "candidate": self.candidate.as_dict(),
            "serving": self.serving.as_dict(),
            "stageRuns": self.stage_runs,
            "stageElapsedSeconds": round(self.stage_elapsed_s, 3),
            "threshold": threshold(policy, self.serving),
        }


def refused_words(refused: int) -> str:
    """ " (3 refused by the candidate's inputSchema)": how every view says that some of the
    candidate's failed runs are submissions it refused; "" when none were."""
    if not refused:
        return ""
    return f" ({refused} refused by the candidate's inputSchema)"


def threshold(policy: RollbackPolicy, serving: VersionCounts) -> float:
    """The failure ratio the candidate may not exceed (see the module)."""
    serving_ratio = serving.failure_ratio
    if policy.margin_over_serving is None or serving_ratio is None:
        return policy.max_failure_ratio
    return max(policy.max_failure_ratio, serving_ratio + policy.margin_over_serving)


@dataclass(frozen=True)
class Hold:
    delay_s: float
    reason: str


@dataclass(frozen=True)
class Pass:
    reason: str


@dataclass(frozen=True)
class RollBack:
    reason: str


Decision = Hold | Pass | RollBack


def judged_text(candidate: VersionCounts, limit: float, against: str = ", threshold") -> str:
    """The candidate's failure ratio against the threshold, with the counts behind it:
    "failure ratio 0.250 (1 failed of 4 finished), threshold 0.050" (`against` joins the
    two: " within threshold" once it passed)."""
    if candidate.failure_ratio is None:
        return f"no finished run yet, threshold {limit:.3f}"
    return (
        f"failure ratio {candidate.failure_ratio:.3f} ({candidate.failed} failed of "
        f"{candidate.finished} finished){against} {limit:.3f}"
    )


def counted(number: int, nouns: str) -> str:
    """ "20 finished runs", "1 finished run": a count as a stage's words say it."""
    return f"{number:,} {nouns}" if number != 1 else f"1 {nouns.removesuffix('s')}"


def waits_for(stage: Stage, policy: RollbackPolicy, number: int = 1) -> str:
    """What stage `number` (1-based) waits for before it can pass, in the terms of its check's
    waiting reason ("waiting at stage 1: 3/10 runs, 41 s more, 3/20 finished runs"): "10 runs,
    1 min, 20 finished runs". The finished runs are the candidate's since the deployment began,
    which its judgement needs: a stage's minimum runs alone read as the whole of it, while its
    check waited for the policy's finished runs too. Only the first stage names them: no stage
    passes before they are there, so every later one begins with them, and "20 finished runs"
    on each stage read as 20 more in each. "nothing but its check" when no minimum is set."""
    needs = []
    if stage.min_runs:
        needs.append(counted(stage.min_runs, "runs"))
    if stage.min_duration_s > 0:
        needs.append(duration(stage.min_duration_s))
    if policy.min_finished_runs and number == 1:
        needs.append(counted(policy.min_finished_runs, "finished runs"))
    return ", ".join(needs) or "nothing but its check"


def decide(
    stage: Stage,
    policy: RollbackPolicy,
    figures: Figures,
    check_interval_s: float,
    *,
    number: int = 1,
) -> Decision:
    """What a stage's check decides from `figures` (see the module); `number` is the stage's
    (1-based), which its reasons name."""
    candidate = figures.candidate
    judged = candidate.finished >= policy.min_finished_runs
    ratio = candidate.failure_ratio
    limit = threshold(policy, figures.serving)
    if judged and ratio is not None and ratio > limit:
        return RollBack(
            f"the candidate failed {candidate.failed} of its {candidate.finished} finished runs"
            f"{refused_words(candidate.refused)} (ratio {ratio:.3f} > threshold {limit:.3f})"
        )
    waiting = []
    if figures.stage_runs < stage.min_runs:
        # Grouped as the stages line says them ("100,000,000 runs" beside "0/100000000").
        waiting.append(f"{figures.stage_runs:,}/{stage.min_runs:,} runs")
    remaining_s = stage.min_duration_s - figures.stage_elapsed_s
    if remaining_s > 0:
        waiting.append(f"{duration(remaining_s)} more")
    if not judged:
        waiting.append(f"{candidate.finished:,}/{policy.min_finished_runs:,} finished runs")
    # "passed" and "waiting", never "held"/"holds": an operator read "stage held" (it
    # passed) as "the stage is holding" (it waits).
    if not waiting:
        return Pass(f"stage {number} passed: {judged_text(candidate, limit, ' within threshold')}")
    delay = check_interval_s if remaining_s <= 0 else min(check_interval_s, remaining_s)
    return Hold(
        delay, f"waiting at stage {number}: {', '.join(waiting)}; {judged_text(candidate, limit)}"
    )
