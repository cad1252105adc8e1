"""Fixtures of the end-to-end tests: one `schemabridge serve` for the whole session, shared by
the CLI modules that talk to an API (tests/e2e/cli_harness.py); and, for the monitor's browser
modules, a Chromium per module and a downstream set back to answering at once around each test
(both use the module's own `server`, a `DemoServer`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import DemoServer, chromium
from tests.e2e.cli_harness import Stack, serve_stack


@pytest.fixture(scope="session")
def serve_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`schemabridge serve` (embedded store, authentication on), an admin key and the demo
    downstream; tests keep to their own runs, tenants and destinations."""
    with serve_stack(tmp_path_factory.mktemp("serve")) as stack:
        yield stack


@pytest.fixture(scope="module")
def browser(server: DemoServer) -> Iterator[Any]:
    """Chromium for the module's tests (after its `server`, so it closes first)."""
    with chromium() as found:
        yield found


@pytest.fixture
def quick_downstream(server: DemoServer) -> Iterator[None]:
    """The module's demo downstream answers at once before and after the test (a test that
    slows it down cannot slow the next one)."""
    server.latency(0)
    yield
    server.latency(0)
