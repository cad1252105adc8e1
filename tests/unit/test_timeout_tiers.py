"""The timeout tiers' settings (`TIMEOUT_COLLECT_MS`, `TIMEOUT_PROCESS_MS`,
`TIMEOUT_GATEWAY_MS`) hold the bounds a vertex's own `timeoutMs` is published with: 0 or a
negative number would time every call out before it is sent, and was accepted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.settings import Settings

TIERS = {
    "TIMEOUT_COLLECT_MS": "timeout_collect_ms",
    "TIMEOUT_PROCESS_MS": "timeout_process_ms",
    "TIMEOUT_GATEWAY_MS": "timeout_gateway_ms",
}


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in TIERS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"SCHEMABRIDGE_{name}", raising=False)
    return monkeypatch


@pytest.mark.parametrize("name", TIERS)
@pytest.mark.parametrize("value", ["0", "-5", "99", "600001"])
def test_a_tier_out_of_bounds_is_refused_naming_it(
    unset: pytest.MonkeyPatch, name: str, value: str
) -> None:
    unset.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    (problem,) = refused.value.errors()
    assert problem["loc"] == (f"SCHEMABRIDGE_{name}",)
    assert problem["type"] in {"greater_than_equal", "less_than_equal"}, problem


@pytest.mark.parametrize("name", TIERS)
@pytest.mark.parametrize("value", [100, 600_000])
def test_a_tier_within_bounds_is_taken(unset: pytest.MonkeyPatch, name: str, value: int) -> None:
    unset.setenv(f"SCHEMABRIDGE_{name}", str(value))
    assert getattr(Settings(), TIERS[name]) == value
