"""Health: can this process reach the database and Redis now, and is the schema current.

`check` probes both at once, each bounded by a timeout (default `Settings.health_timeout_s`,
2 s), so a health check answers within about that time however dead a dependency is: a
database behind a dropped network would otherwise hold a connect for a minute.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict

from engine.coordination.redis_client import redis_ok
from engine.operations.views import View
from engine.store.probes import SchemaRevision

if TYPE_CHECKING:
    from engine.runtime import Runtime

logger = logging.getLogger(__name__)

Dependency = Literal["database", "redis"]


class HealthReport(View):
    """`status` is `ok` when nothing is failing, else `unavailable`."""

    # `GET /health` leaves `failing` out when it is empty (`{"status": "ok"}`): not required.
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    status: Literal["ok", "unavailable"]
    failing: list[Dependency] = []
    """What did not answer in time (empty when `status` is `ok`)."""


class SchemaStatus(View):
    """The database's schema revision against the newest one this code ships."""

    current: str | None
    """None: the database was never migrated."""
    head: str
    up_to_date: bool
    known: bool
    """Whether `current` is a revision this code ships (False when a newer release migrated
    the database, or when it was never migrated)."""

    @classmethod
    def of(cls, revision: SchemaRevision) -> SchemaStatus:
        return cls(
            current=revision.current,
            head=revision.head,
            up_to_date=revision.up_to_date,
            known=revision.known,
        )

    def explain(self) -> str:
        """One sentence for an operator: what is wrong and the fix (empty when up to date)."""
        if self.up_to_date:
            return ""
        if self.current is not None and not self.known:
            return (
                f"the database schema is at revision {self.current}, which this SchemaBridge "
                f"does not know (it ships up to {self.head}): a newer release migrated it; "
                "run that release"
            )
        at = "empty (never migrated)" if self.current is None else f"at revision {self.current}"
        return (
            f"the database schema is {at} but this SchemaBridge needs {self.head}; run "
            "'schemabridge db upgrade' first"
        )


class HealthOperations:
    """Health and schema checks."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def check(self, *, timeout_s: float | None = None) -> HealthReport:
        """Probe the database (`SELECT 1`) and Redis (`PING`) concurrently, each within
        `timeout_s` (default `Settings.health_timeout_s`). Never raises for a failing
        dependency: it is listed in `failing`."""
        timeout = self._runtime.settings.health_timeout_s if timeout_s is None else timeout_s
        database, coordination = await asyncio.gather(
            self._database_ok(timeout), redis_ok(self._runtime.redis, timeout_s=timeout)
        )
        failing: list[Dependency] = []
        if not database:
            failing.append("database")
        if not coordination:
            failing.append("redis")
        return HealthReport(status="unavailable" if failing else "ok", failing=failing)

    async def schema(self) -> SchemaStatus:
        """Where the database's schema is against this code's migrations. Raises what the
        driver raises when the database cannot be reached."""
        return SchemaStatus.of(await self._runtime.store.schema_revision())

    async def _database_ok(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._runtime.store.ping(), timeout_s)
        except Exception as error:  # any failure to answer is "failing", whatever the driver
            logger.warning("health: the database did not answer: %r", error)
            return False
        # A ping may succeed between statements that fail at random behind a transaction
        # pooler: the database is failing while they do (`engine.store.pooler`).
        mismatch = self._runtime.store.pooler_mismatch()
        if mismatch is not None:
            logger.warning("health: statements fail behind a pooler: %r", mismatch)
            return False
        return True
