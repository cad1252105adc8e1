"""Cheap questions about the database itself: does it answer, and is its schema current."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from sqlalchemy import func, literal, select

from engine.store import db
from engine.store.core import StoreCore
from engine.store.models import StoreIdentity

store_identity = StoreIdentity.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SchemaRevision:
    """Where the database's schema is against the migrations this code ships."""

    current: str | None
    """The database's revision; None: never migrated."""
    head: str
    """The newest revision this code ships."""
    known: bool
    """Whether `current` is one of this code's revisions (False: a newer release migrated the
    database, or it was never migrated)."""

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


async def schema_revision_of(engines: db.Engines) -> SchemaRevision:
    """Where the schema of the database behind `engines` is (a read of its revision)."""
    current = await db.current_revision(engines)
    return SchemaRevision(
        current=current,
        head=db.head_revision(),
        known=current is not None and current in db.known_revisions(),
    )


class ProbeStore(StoreCore):
    """Liveness, schema and identity checks; no table of the engine's runs is read."""

    async def ping(self) -> None:
        """One round trip (`SELECT 1`) on a read connection; raises what the driver raises
        when the database cannot be reached. Callers bound the wait."""
        async with self._engines.read.connect() as conn:
            await conn.execute(select(literal(1)))

    async def clock_offset_s(self) -> tuple[float, float] | None:
        """How far this process's clock is from the PostgreSQL server's, in seconds (positive:
        ahead), and the round trip it was measured over (the bound of its error); None on
        SQLite, whose database is this machine's. Leases, timers and heartbeats are written
        by one process's clock and judged by another's."""
        if not self.dialect.is_postgresql:
            return None
        async with self._engines.read.connect() as conn:
            sent, started = self._clock.now(), time.monotonic()
            server = await conn.scalar(select(func.extract("epoch", func.clock_timestamp())))
            trip = time.monotonic() - started
        if server is None:
            return None
        return sent + trip / 2 - float(server), trip

    def pooler_mismatch(self) -> BaseException | None:
        """The last statement error of the past minute that says a transaction pooler stands
        before the database while `SCHEMABRIDGE_DATABASE_POOLER` says none
        (`engine.store.pooler`); None when there was none."""
        watch = self._engines.pooler_watch
        return None if watch is None else watch.recent()

    async def schema_revision(self) -> SchemaRevision:
        return await schema_revision_of(self._engines)

    async def store_id(self) -> str:
        """The database's id (`StoreIdentity`), which its Redis is bound to. Its migration
        makes it; a database whose tables were emptied (TRUNCATE) gets a new one here, the
        first process to ask making it (the one-row key lets no second in)."""
        async with self._engines.read.connect() as conn:
            found = await conn.scalar(select(store_identity.c.id).where(store_identity.c.one == 1))
        if found is not None:
            return str(found)
        async with self._engines.write.begin() as conn:
            made = self.dialect.insert(store_identity).values(one=1, id=uuid.uuid4().hex)
            await conn.execute(made.on_conflict_do_nothing(index_elements=["one"]))
            return str(
                await conn.scalar(select(store_identity.c.id).where(store_identity.c.one == 1))
            )
