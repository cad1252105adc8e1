"""The words of a deployment's warnings that need no database: a policy that judges nothing,
and what a retry or start over of an old version repeats (engine.operations.deployment_warnings;
the rest is tests/integration/test_deployment_warnings.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.operations.deployment_views import RollbackSpec, StageSpec
from engine.operations.deployment_warnings import (
    finished_runs_warning,
    no_evidence_warning,
    redeploy_warning,
    rerun_warning,
)
from engine.store.deployments import RerunFacts
from engine.store.records import DeploymentRecord, ServingRecord
from schemas.clock import utc_moment

ENDED = utc_moment(86_400.0)
"""When the rolled-back deployments of these tests ended, as messages say it."""
BARE = [StageSpec(weight=w, min_runs=0, min_duration_seconds=0) for w in (10, 100)]


def test_a_policy_without_any_minimum_promotes_at_the_first_check() -> None:
    said = no_evidence_warning(BARE, RollbackSpec(min_finished_runs=0))
    assert said is not None
    assert "it becomes the serving version at its first check, whatever it does" in said
    assert no_evidence_warning(BARE, RollbackSpec(min_finished_runs=1)) is None
    held = [StageSpec(weight=100, min_runs=5, min_duration_seconds=0)]
    partly = no_evidence_warning(held, RollbackSpec(min_finished_runs=0))
    assert partly is not None and "first check" not in partly


def test_a_first_stage_that_waits_for_more_finished_runs_than_its_runs_says_so() -> None:
    """The tour: `--stages 25,50,100 --min-runs 10` with the default `--min-finished` 20,
    told nothing, passed stage 1 after some 90 submissions. Stage 1 only: the later stages
    begin with the finished runs it passed on."""
    stages = [StageSpec(weight=w, min_runs=10, min_duration_seconds=10) for w in (25, 50, 100)]
    assert finished_runs_warning(2, stages, RollbackSpec()) == (
        "stage 1 waits for 20 finished runs of v2 (--min-finished, minFinishedRuns) before it "
        "can pass, more than its 10 runs (--min-runs, minRuns): at 25 % of new runs, about "
        "80 submissions"
    )
    assert finished_runs_warning(2, stages, RollbackSpec(min_finished_runs=10)) is None
    assert finished_runs_warning(2, stages, RollbackSpec(min_finished_runs=0)) is None
    later = [StageSpec(weight=10, min_runs=30), StageSpec(weight=100, min_runs=5)]
    assert finished_runs_warning(2, later, RollbackSpec()) is None
    bare = finished_runs_warning(3, BARE, RollbackSpec(min_finished_runs=1))
    assert bare is not None and bare.startswith("stage 1 waits for 1 finished run of v3 ")
    assert "more than its 0 runs" in bare and bare.endswith("about 10 submissions")


def serving(version: int, candidate: int | None = None) -> ServingRecord:
    return ServingRecord("orders", version, candidate, 10.0 if candidate else 0.0, None, 0.0, None)


def rolled_back(version: int, outcome: dict[str, Any] | None = None) -> DeploymentRecord:
    return DeploymentRecord(
        id="d-1",
        workflow_name="orders",
        serving_version=1,
        candidate_version=version,
        status="ROLLED_BACK",
        stages=[],
        rollback={},
        check_interval_s=5.0,
        stage_index=0,
        stage_started_at=0.0,
        run_id="r",
        created_at=0.0,
        created_by="test",
        ended_at=86_400.0,
        outcome=outcome,
        timeline=[],
    )


def facts(
    version: int,
    now: ServingRecord | None,
    rolled: DeploymentRecord | None = None,
    *,
    route: str | None = "candidate",
    parent: str | None = None,
) -> RerunFacts:
    return RerunFacts("orders", version, route, parent, now, rolled)


def test_a_rerun_of_a_rolled_back_version_names_the_deployment_and_the_way_out() -> None:
    said = rerun_warning("start over", facts(2, serving(1), rolled_back(2)))
    assert said == (
        f"v2 of orders was rolled back by deployment d-1 at {ENDED}; this start over "
        "runs v2 again, not the serving v1: a start over always repeats the run's own "
        "version; to run this input on v1, submit it anew without a version "
        "(`schemabridge runs submit orders --input JSON`)"
    )
    assert utc_moment(86_400.0) == "1970-01-02 00:00:00Z"
    child = rerun_warning("retry", facts(2, serving(1), rolled_back(2), route=None, parent="p"))
    assert child is not None and child.endswith("(a child run keeps the version its root pinned)")


def test_a_rerun_of_what_routing_gives_anyway_says_nothing() -> None:
    assert rerun_warning("retry", facts(1, serving(1))) is None
    # Being deployed again: the candidate of a running deployment is routed runs.
    assert rerun_warning("retry", facts(2, serving(1, candidate=2), rolled_back(2))) is None
    # A version the request pinned was asked for; one that never served and never rolled
    # back is no news either.
    assert rerun_warning("retry", facts(3, serving(1), route="pinned")) is None
    assert rerun_warning("retry", None) is None
    gone = rerun_warning("retry", facts(1, serving(2), route="serving"))
    assert gone is not None and gone.startswith("v1 of orders no longer serves; this retry")


def test_a_redeploy_names_who_rolled_back_once_and_keeps_their_reason() -> None:
    again = "; this deployment starts it again at stage 1: make sure what failed is fixed"
    # A rollback by hand is said to be manual; with no figures recorded nothing is claimed of
    # what failed.
    by_hand = rolled_back(2, {"actor": "key:ops", "reason": "stopped by key:ops"})
    assert redeploy_warning(2, by_hand) == (
        f"v2 was rolled back manually by key:ops in deployment d-1 at {ENDED}; this "
        "deployment starts it again at stage 1"
    )
    failing = {"candidate": {"runs": 9, "failed": 3, "finished": 8}}
    said = rolled_back(
        2,
        {"actor": "key:ops", "reason": "stopped by key:ops: p99 doubled", "figures": failing},
    )
    assert redeploy_warning(2, said) == (
        f"v2 was rolled back manually by key:ops in deployment d-1 at {ENDED} (p99 doubled), "
        "when 3 of its runs had failed" + again
    )
    verdict = rolled_back(2, {"actor": "engine", "reason": "error rate 40% > 5% at stage 1"})
    assert redeploy_warning(2, verdict) == (
        f"v2 was rolled back by the engine's verdict in deployment d-1 at {ENDED} "
        "(error rate 40% > 5% at stage 1)" + again
    )
    assert redeploy_warning(2, None) is None


def test_a_manual_rollback_with_nothing_failed_asks_to_fix_nothing() -> None:
    """The tour: "v3 was rolled back by key:… make sure what failed is fixed" of a rollback by
    hand with 0 failures."""
    calm = {"candidate": {"runs": 4, "failed": 0, "finished": 4}}
    record = rolled_back(3, {"actor": "key:ops", "reason": "stopped by key:ops", "figures": calm})
    assert redeploy_warning(3, record) == (
        f"v3 was rolled back manually by key:ops in deployment d-1 at {ENDED}, with none of "
        "its runs failed; this deployment starts it again at stage 1"
    )
    said = rerun_warning("retry", facts(3, serving(1), record))
    assert said is not None and said.startswith(
        f"v3 of orders was rolled back manually by key:ops in deployment d-1 at {ENDED}; "
        "this retry runs v3 again"
    ), said


def test_the_way_out_names_a_tenant_other_than_the_default() -> None:
    """An admin key's `runs submit` without `--tenant` runs under `default`: the command in
    the warning names the run's own tenant, quoted for a shell."""
    base = facts(2, serving(1), rolled_back(2))
    for tenant, option in ((None, ""), ("default", ""), ("acme", " --tenant acme")):
        said = rerun_warning("retry", dataclasses.replace(base, tenant_id=tenant))
        assert said is not None and said.endswith(
            f"(`schemabridge runs submit orders{option} --input JSON`)"
        ), said
    odd = rerun_warning("retry", dataclasses.replace(base, tenant_id="a b"))
    assert odd is not None and "--tenant 'a b' --input JSON" in odd
