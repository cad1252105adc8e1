"""What a deployment at 100 % says of the serving version: there is no rest to give it (the
tour: "v2 gets 100 % of new runs (v3 the rest)")."""

from __future__ import annotations

from engine.operations.deployment_views import rest_words
from engine.operations.workflows import serving_hint
from engine.store.records import ServingRecord


def deploying(weight: float) -> ServingRecord:
    return ServingRecord("orders", 1, 2, weight, "d-1", 0.0, "publish")


def test_a_candidate_at_100_percent_leaves_no_rest() -> None:
    assert rest_words(10, 1) == " (v1 the rest)"
    assert rest_words(100, 1) == " (all of them: v1 gets none while it runs)"
    assert serving_hint("orders", 2, deploying(100)) == (
        "orders v2 is not serving yet: deployment d-1 gives it 100 % of new runs (all of "
        "them: v1 gets none while it runs), and it serves them all once the deployment "
        "promotes it"
    )
    said = serving_hint("orders", 2, deploying(25))
    assert said is not None and "25 % of new runs (v1 gets the rest)" in said
