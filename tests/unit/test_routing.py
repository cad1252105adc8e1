"""Routing a submission between the serving version and a deployment's candidate: sticky per
key, monotone as the weight rises, and spread as the weight says."""

from __future__ import annotations

import pytest

from engine.operations import routing
from engine.store.models import RunRoute
from engine.store.records import ServingRecord

DEPLOYMENT = "0b9c6f0e-5d1e-4c55-9c1b-4f4a2d0c8e21"
KEYS = [f"submit:acme:order-{i}" for i in range(1_000)]
TOLERANCE_POINTS = 5.0
"""1,000 keys: the binomial standard deviation is at most 1.6 points, so 5 is over 3 of them."""


def row(weight: float, deployment: str | None = DEPLOYMENT) -> ServingRecord:
    return ServingRecord("orders", 1, 2, weight, deployment, 0.0, None)


@pytest.mark.parametrize("weight", [10.0, 25.0, 50.0, 90.0])
def test_a_thousand_keys_follow_the_weight(weight: float) -> None:
    chosen = [routing.choose(row(weight), key) for key in KEYS]
    share = sum(version == 2 for version, _ in chosen) / len(KEYS) * 100
    assert abs(share - weight) < TOLERANCE_POINTS, share
    assert {route for _, route in chosen} == {RunRoute.CANDIDATE, RunRoute.SERVING}


def test_the_same_key_lands_on_the_same_side_and_raising_the_weight_only_adds_keys() -> None:
    for key in KEYS[:200]:
        first = routing.choose(row(25), key)
        assert routing.choose(row(25), key) == first
        if first[1] is RunRoute.CANDIDATE:
            assert routing.choose(row(50), key)[1] is RunRoute.CANDIDATE
            assert routing.choose(row(100), key)[1] is RunRoute.CANDIDATE


def test_each_deployment_draws_its_own_keys() -> None:
    other = "7f1d2c3b-0000-4000-8000-000000000000"
    mine = {k for k in KEYS if routing.choose(row(25), k)[1] is RunRoute.CANDIDATE}
    theirs = {k for k in KEYS if routing.choose(row(25, other), k)[1] is RunRoute.CANDIDATE}
    assert mine != theirs
    assert len(mine & theirs) < len(mine) / 2  # independent draws overlap about a quarter


def test_without_a_deployment_everything_goes_to_the_serving_version() -> None:
    idle = ServingRecord("orders", 3, None, 0.0, None, 0.0, None)
    assert {routing.choose(idle, key) for key in KEYS} == {(3, RunRoute.SERVING)}
    assert {routing.choose(row(0), key)[1] for key in KEYS} == {RunRoute.SERVING}
    assert {routing.choose(row(100), key)[1] for key in KEYS} == {RunRoute.CANDIDATE}


def test_places_are_in_range() -> None:
    places = [routing.place(DEPLOYMENT, key) for key in KEYS]
    assert all(0 <= p < 100 for p in places)
