"""The log line of a copy of the operator settings into Redis (`admission.seeding`): the
missing marker says only that Redis was not given them since it started, so the line never
claims Redis held none while counting some it held."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import pytest

from admission.backend import CoordinationBackend
from admission.caps import DestinationCaps
from admission.seeding import Reseeder


class Settings:
    """The database's copies: one tenant rate limit, two destination caps."""

    async def all_tenant_limits(self) -> Mapping[str, int]:
        return {"acme": 500}

    async def all_caps(self) -> Mapping[str, DestinationCaps]:
        return {
            "https://a.example:443": DestinationCaps(2, None),
            "https://b.example:443": DestinationCaps(3, 1.0),
        }


class Redis:
    """A Redis that held the tenant limit and one of the caps: `seed` wrote the other cap."""

    async def seed(
        self, tenant_limits: Mapping[str, int], caps: Mapping[str, Any]
    ) -> tuple[int, int]:
        return 0, 1


async def test_a_copy_says_how_many_redis_lacked_of_those_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reseeder = Reseeder(cast(CoordinationBackend, Redis()), Settings())
    with caplog.at_level(logging.INFO, logger="admission.seeding"):
        await reseeder.reseed()
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "Redis has not been given the operator settings since it started (new, or restarted "
        "without its data); before admitting, copied from the database the ones it lacked: "
        "0 of 1 tenant rate limit and 1 of 2 destination caps"
    )
