"""Fixtures of the end-to-end tests: one `schemabridge serve` for the whole session, shared by
the CLI modules that talk to an API (tests/e2e/cli_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cli_harness import Stack, serve_stack


@pytest.fixture(scope="session")
def serve_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`schemabridge serve` (embedded store, authentication on), an admin key and the demo
    downstream; tests keep to their own runs, tenants and destinations."""
    with serve_stack(tmp_path_factory.mktemp("serve")) as stack:
        yield stack
