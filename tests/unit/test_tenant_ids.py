"""The tenant id rule and the pattern the API's schema states for it agree: a client that
generates ids from the schema (schemathesis does) makes only ids the routes take."""

from __future__ import annotations

import re

import pytest

from schemas.errors import InvalidRequest
from schemas.tenant_ids import MAX_TENANT_CHARS, TENANT_ID_PATTERN, check_tenant_id, is_tenant_id

SAMPLES = [
    "a",
    "acme-eu",
    "a b",
    "a\nb",
    "¼»¥ï",
    "x" * MAX_TENANT_CHARS,
    " a",
    "a ",
    "\u3000x",
    "x\u00a0",
    " ¼»¥ï",
    "\x1c",
    "a\x1f",
    "\u2028a",
    "\t",
    "",
    "team/a",
    "/a",
    "a/",
    "/",
]


@pytest.mark.parametrize("value", SAMPLES)
def test_the_schema_pattern_takes_what_the_rule_takes(value: str) -> None:
    by_pattern = re.search(TENANT_ID_PATTERN, value) is not None and len(value) <= MAX_TENANT_CHARS
    assert by_pattern == is_tenant_id(value)


def test_every_character_strip_removes_is_a_space_to_the_pattern() -> None:
    spaces = [chr(code) for code in range(0x110000) if chr(code).isspace()]
    assert all(re.search(TENANT_ID_PATTERN, f"{c}a") is None for c in spaces)
    assert all(re.search(TENANT_ID_PATTERN, f"a{c}a") is not None for c in spaces)


def test_an_id_with_a_space_at_an_end_is_refused_with_the_rule() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_tenant_id(" ¼»¥ï")
    assert caught.value.code == "invalid_tenant"
    assert "without spaces at either end" in str(caught.value)


def test_an_id_with_a_slash_is_refused_with_the_rule() -> None:
    # A new user's tour: tenant 'team/a' ran, and no command could then reach its settings
    # (`/tenants/team/a/limits` is no route, whatever the encoding of its '/').
    with pytest.raises(InvalidRequest) as caught:
        check_tenant_id("team/a")
    assert caught.value.code == "invalid_tenant"
    assert "or any '/'" in str(caught.value)
