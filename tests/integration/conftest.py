"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from tests.integration.scripts.helpers import BACKENDS


@pytest.fixture(params=BACKENDS)
def coord_url(request: pytest.FixtureRequest) -> str | None:
    """The coordination backend of a test: None = the embedded server; else the URL of the
    flushed test Redis."""
    if request.param == "embedded":
        return None
    url: str = request.getfixturevalue("redis_url")
    return url
