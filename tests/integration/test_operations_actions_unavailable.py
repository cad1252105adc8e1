"""Operator actions against a database that cannot be reached, or that has no connection left
for us: every action answers `Unavailable(code="store_unavailable")` (the operations
boundary), never a driver error."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.errors import InvalidRequest, Refusal, Unavailable
from tests.conftest import PG_ADMIN_DSN
from tests.integration.scripts.helpers import unique

RUN_ID = "00000000-0000-0000-0000-000000000000"


def _actions(ops: Operations) -> list[Awaitable[Any]]:
    actions = ops.actions
    return [
        actions.retry(RUN_ID, actor="test"),
        actions.resolve(RUN_ID, "call", {"ok": True}, actor="test"),
        actions.start_over(RUN_ID, actor="test"),
        actions.batch_retry(ids=[RUN_ID], actor="test"),
        actions.batch_retry(filter=RunFilter(), actor="test"),
        actions.reprocess(RUN_ID, actor="test"),
        actions.cancel(RUN_ID, actor="test"),
    ]


@pytest.mark.parametrize(
    "database_url",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere",
        "sqlite+aiosqlite:///{tmp}/missing/dir/sb.db",
    ],
)
async def test_every_action_on_an_unreachable_database_is_unavailable(
    database_url: str, tmp_path: Path
) -> None:
    runtime = await Runtime.open(
        Settings(database_url=database_url.format(tmp=tmp_path)), migrate=False
    )
    try:
        for call in _actions(Operations(runtime)):
            with pytest.raises(Unavailable) as down:
                await call
            assert down.value.code == "store_unavailable"
            assert down.value.refusal is Refusal.UNAVAILABLE
    finally:
        await runtime.close()


async def test_refusals_that_need_no_database_come_first(tmp_path: Path) -> None:
    """Checks of the request itself answer as they do with a database (nothing is read)."""
    url = f"sqlite+aiosqlite:///{tmp_path}/missing/dir/sb.db"
    runtime = await Runtime.open(Settings(database_url=url), migrate=False)
    try:
        actions = Operations(runtime).actions
        with pytest.raises(InvalidRequest) as refused:
            await actions.batch_retry(ids=[RUN_ID], limit=0, actor="test")
        assert refused.value.code == "invalid_limit"
        with pytest.raises(InvalidRequest) as refused:
            await actions.resolve(RUN_ID, "call", float("nan"), actor="test")
        assert refused.value.code == "invalid_output"
    finally:
        await runtime.close()


async def test_every_settings_operation_on_an_unreachable_database_is_unavailable(
    tmp_path: Path,
) -> None:
    """The settings group answers the same refusal (its Redis copy is reachable here: the
    embedded server), so an operator's `tenants`/`destinations` command never shows a driver
    error."""
    url = f"sqlite+aiosqlite:///{tmp_path}/missing/dir/sb.db"
    runtime = await Runtime.open(Settings(database_url=url), migrate=False)
    try:
        settings = Operations(runtime).settings
        calls: list[Awaitable[Any]] = [
            settings.set_caps("http://127.0.0.1:9", 5),
            settings.remove_caps("http://127.0.0.1:9"),
            settings.set_tenant_rate("acme", 10),
            settings.reset_tenant_rate("acme"),
            settings.set_quota("acme", 10),
            settings.reset_quota("acme"),
            settings.tenants(),
            settings.tenant("acme"),
            settings.destinations(),
        ]
        for call in calls:
            with pytest.raises(Unavailable) as down:
                await call
            assert down.value.code == "store_unavailable"
    finally:
        await runtime.close()


async def test_a_database_out_of_connections_is_unavailable(pg_database_url: str) -> None:
    """PostgreSQL refusing a connection for lack of slots ("too many connections", SQLSTATE
    53300, which SQLAlchemy's asyncpg dialect raises as a bare DBAPIError) is the same
    refusal as a database that is down, not an unexpected error. A role allowed no
    connection at all refuses the same way as a server at `max_connections`."""
    role = unique("sb_no_slots").replace("-", "_")
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0')
        limited = make_url(pg_database_url).set(username=role)
        url = limited.render_as_string(hide_password=False)
        runtime = await Runtime.open(Settings(database_url=url), migrate=False)
        try:
            ops = Operations(runtime)
            for call in [
                *_actions(ops),
                ops.runs.list(RunFilter()),
                ops.keys.authenticate("sbk_x"),
            ]:
                with pytest.raises(Unavailable) as down:
                    await call
                assert down.value.code == "store_unavailable"
        finally:
            await runtime.close()
    finally:
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()
