"""A prefix of a run's or a deployment's id as a range of ids (engine/operations/id_prefixes.py)
and what the CLI sends to be resolved (api/cli/id_prefixes.py): pure, no store."""

from __future__ import annotations

import re

import pytest

from api.cli.id_prefixes import is_prefix, is_short_prefix
from engine.operations.id_prefixes import (
    PREFIX_PATTERN,
    PrefixRange,
    prefix_range,
    reads_as_prefix,
)
from schemas.errors import InvalidRequest


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("3f2a9c1e", PrefixRange("3f2a9c1e", "3f2a9c1e", "3f2a9c1f")),
        ("3F2A9C1E", PrefixRange("3f2a9c1e", "3f2a9c1e", "3f2a9c1f")),
        # the bound is the prefix's hex number plus one, carried across the id's hyphens
        ("3f2a9c1f", PrefixRange("3f2a9c1f", "3f2a9c1f", "3f2a9c20")),
        ("00000009", PrefixRange("00000009", "00000009", "0000000a")),
        ("3f2a9c1eff", PrefixRange("3f2a9c1e-ff", "3f2a9c1e-ff", "3f2a9c1f-00")),
        ("3f2a9c1e-ff", PrefixRange("3f2a9c1e-ff", "3f2a9c1e-ff", "3f2a9c1f-00")),
        ("3f2a-9c1e-f", PrefixRange("3f2a9c1e-f", "3f2a9c1e-f", "3f2a9c1f-0")),
        ("ffffffff", PrefixRange("ffffffff", "ffffffff", None)),
        (
            "3f2a9c1e-0000-4000-8000-000000000001",
            PrefixRange(
                "3f2a9c1e-0000-4000-8000-000000000001",
                "3f2a9c1e-0000-4000-8000-000000000001",
                "3f2a9c1e-0000-4000-8000-000000000002",
            ),
        ),
    ],
)
def test_a_prefix_is_the_range_of_ids_starting_with_it(given: str, expected: PrefixRange) -> None:
    assert prefix_range(given) == expected
    assert re.fullmatch(PREFIX_PATTERN, given)


@pytest.mark.parametrize("given", ["3f2a9c1", "3f2a9c1g", "", "--------", "3f2a9c1e" * 5])
def test_anything_else_is_refused_as_the_schema_says(given: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        prefix_range(given)
    assert refused.value.code == "invalid_run_id_prefix"
    assert not re.fullmatch(PREFIX_PATTERN, given)


def test_a_deployment_id_prefix_is_read_the_same_way() -> None:
    assert prefix_range("5B0C7E2DFF", of="deployment") == PrefixRange(
        "5b0c7e2d-ff", "5b0c7e2d-ff", "5b0c7e2e-00"
    )
    with pytest.raises(InvalidRequest) as refused:
        prefix_range("5b0c7e2", of="deployment")
    assert refused.value.code == "invalid_deployment_id_prefix"
    assert "a deployment id prefix" in refused.value.message


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("3f2a9c1e", True),
        ("3f2a9c1e-00", True),
        ("3F2A9C1E", True),
        ("3f2a9c1", False),  # too short: sent as it is, and "no run"
        ("3f2a9c1e-0000-4000-8000-000000000001", False),  # a whole id: no extra request
        ("no-such-run", False),
        ("run-0001", False),
    ],
)
def test_the_cli_resolves_what_reads_as_a_prefix(given: str, resolved: bool) -> None:
    assert is_prefix(given) is resolved


@pytest.mark.parametrize(
    ("given", "short"),
    [
        ("3f2a9c1", True),
        ("3F2A-9c", True),
        ("3f2a9c1e", False),  # resolved as a prefix
        ("3f2a9c1e-0000-4000-8000-000000000001", False),
        ("no-such-run", False),
        ("", False),
        ("-", False),
    ],
)
def test_a_prefix_too_short_is_told_apart(given: str, short: bool) -> None:
    assert is_short_prefix(given) is short


@pytest.mark.parametrize(
    ("given", "prefix"),
    [
        ("3f2a9c1e", True),
        ("3f2a9c1e-9a0b", True),
        ("3F2A9C1E-9A0B-4C1D-8E2F-0123456789AB", True),  # an id, but not as ids are written
        ("3f2a9c1e9a0b4c1d8e2f0123456789ab", True),
        ("3f2a9c1e-9a0b-4c1d-8e2f-0123456789ab", False),  # a whole id
        ("3f2a9c1", False),  # too short to be resolved
        ("a-run", False),
        (None, False),
    ],
)
def test_a_filter_tells_a_prefix_from_a_whole_id(given: str | None, prefix: bool) -> None:
    """What a `parent` filter refuses as a prefix (and what a run route's 404 points to the
    lookup for): only what the lookup would resolve, not any id it cannot be."""
    assert reads_as_prefix(given) is prefix
