"""The destinations chart's scale (ui/static/js/chart.js `chartScale`), run in Node: scaled to
the lines drawn and to a cap near them; a cap far above (the default 100 over AIMD limits of 1
to 14, an on-call tour's incident) is said in words, not drawn, so the lines are not flattened
along the bottom."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.ui_modules import NODE, module_value

pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js")


def scale(points: list[dict[str, float]]) -> Any:
    return module_value("chart.js", f"m.chartScale({json.dumps(points)})")


def sample(limit: float, in_flight: float, cap: float) -> dict[str, float]:
    return {"at": 0, "limit": limit, "inFlight": in_flight, "cap": cap}


def test_a_cap_far_above_the_lines_is_said_not_drawn() -> None:
    points = [sample(limit, limit - 1, 100) for limit in (14, 7, 3, 1, 2)]
    assert scale(points) == {"top": 17, "capAbove": 100}


def test_a_cap_near_the_lines_is_drawn_and_tops_the_scale() -> None:
    assert scale([sample(8, 8, 10), sample(9, 6, 10)]) == {"top": 10, "capAbove": None}
    # Lines above the cap (a cap lowered under the limit) top it themselves.
    assert scale([sample(40, 38, 100), sample(30, 12, 10)]) == {"top": 40, "capAbove": None}


def test_the_cap_now_scales_the_chart_before_a_sample_has_it() -> None:
    """A cap set from 100 to 8 is the destination's at once, while the samples say 100 until
    the next one: the page's cap now is drawn (and tops the scale), not "cap 100 above"."""
    points = [sample(5, 1, 100), sample(5, 2, 100)]
    now = module_value("chart.js", f"m.chartScale({json.dumps(points)}, 8)")
    assert now == {"top": 8, "capAbove": None}
    # Without it, the latest sample's cap, as before.
    assert scale(points) == {"top": 6, "capAbove": 100}
