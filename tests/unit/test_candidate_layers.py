"""A deployment candidate's breaker layer is kept under `tenant/workflow@vN`
(`admission.breaker.scoped_tenant`); `candidate_layer_of` reads the tenant back, so that a
reset of such a layer is not taken for a misspelt tenant."""

from __future__ import annotations

import pytest

from admission.breaker import candidate_layer_of, scoped_tenant


@pytest.mark.parametrize("tenant", ["default", "acme/eu", "a@v1"])
def test_the_tenant_of_a_candidate_layer_is_read_back(tenant: str) -> None:
    assert candidate_layer_of(scoped_tenant(tenant, "orders@v2")) == tenant


@pytest.mark.parametrize(
    "layer", ["default", "acme/eu", "acme/orders@v", "acme/orders@vx", "/o@v2"]
)
def test_other_layers_are_no_candidates(layer: str) -> None:
    assert candidate_layer_of(layer) is None
