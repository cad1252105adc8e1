"""The web monitor's "Retry all matching" (ui/static/js/retry_all.js), run in Node: the batch
takes the runs list's whole filter, a deployment's exposure (route and window) included."""

from __future__ import annotations

import json

import pytest

from tests.unit.ui_modules import NODE, module_value

pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js")


def test_the_batch_filter_is_the_lists_route_and_window_included() -> None:
    exposure = {
        "status": None,
        "workflow": "support-ticket",
        "version": "6",
        "route": "candidate",
        "tenantId": None,
        "roots": "true",
        "createdAfter": 1_765_000_000,
        "createdBefore": 1_765_003_600,
    }
    assert module_value("retry_all.js", f"m.batchFilter({json.dumps(exposure)})") == {
        "status": "FAILED",
        "workflow": "support-ticket",
        "version": 6,
        "route": "candidate",
        "roots": True,
        "createdAfter": 1_765_000_000,
        "createdBefore": 1_765_003_600,
    }
