"""How a join says why its children broke its tolerance: counts read as every other count the
front doors print ("2,001 of 3,000"), not "2001 of 3000" beside the fan-out's "3,000"."""

from __future__ import annotations

import pytest

from schemas.definitions import MergeConfig
from vertices.merge import ChildCounts, tolerance_exceeded


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({}, "2,001 of 3,000 children ended with a status not tolerated"),
        (
            {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailureRatio": 0.05}},
            "2,001 of 3,000 children failed (66.7%), more than maxFailureRatio 5.0%",
        ),
        (
            {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 1500}},
            "2,001 children failed, more than maxFailures 1,500",
        ),
    ],
)
def test_a_join_says_its_counts_with_separators(config: dict[str, object], said: str) -> None:
    """A tour's join: `runs show` said "fan-out 3,000 of 3,000 children ended: 2,001 failed"
    and, below it, "2001 of 3000 children failed"."""
    counts = ChildCounts(total=3000, succeeded=999, failed=2001)
    assert tolerance_exceeded(MergeConfig.model_validate(config), counts) == said
