"""Binding a Redis to one database: its processes' shared state is only right for that one.

Admission slots, breakers, rate limits, heartbeats and the copy of operator settings live in
Redis; runs live in the database. A worker given another Redis than its cluster's would run
unseen beside it, with admission limits of its own, and a database made anew would read the
state the one before it left. So a process writes its database's id (`keys.STORE_ID`) when
Redis has none (a new or emptied Redis, or one restarted without its data) and compares it
otherwise; the caller refuses to start on another database's Redis.
"""

from __future__ import annotations

import redis.asyncio as redis

from engine.coordination import keys


async def bind(client: redis.Redis, store_id: str) -> str | None:
    """Bind the Redis `client` speaks to to the database `store_id` unless it is bound
    already. Answers the id of the other database it is bound to (None: bound to this one)."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.set(keys.STORE_ID, store_id, nx=True)
        pipe.get(keys.STORE_ID)
        _, bound = await pipe.execute()
    if isinstance(bound, bytes):
        bound = bound.decode()
    return None if bound == store_id else str(bound)
