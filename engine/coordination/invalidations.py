"""Invalidations: whether rows a process keeps copies of changed, told through Redis.

Some rows are read on every request and change rarely: an API key is looked up by its hash on
each call, a workflow's routing row on each submission. A process may answer from copies of
them (`engine.operations.row_cache.RowCache`) only if a change made anywhere is seen by the
next request everywhere: a revoked key must be refused by every API process as soon as the
revocation has answered, not a few milliseconds later. So each kind of row (a topic) has a
change token in Redis, `sb:rows-epoch:<topic>`, a random value:

- Whoever changes such rows commits, then replaces the token (`announce`), before it answers
  its caller. The store reports its committed changes of routing rows itself
  (`engine.store.committed_changes`); those announcements run on tasks (`announce_soon`), and
  every operation waits for the ones it caused before it returns (`settled`, called by
  `engine.operations.boundary.store_boundary`).
- A cache reads the token (`token`) before it answers: the token its copies were kept under
  means they are current; another means they are dropped. A request that reaches any process
  after the change's answer therefore reads the new token. One GET, ~0.1 ms of CPU, instead of
  the store's read.
- A token is random, never a counter: a Redis that restarted empty, then saw a change, cannot
  hand back a token a cache kept copies under. A missing token is set at once (SET NX).
- When Redis does not answer within `READ_TIMEOUT_S`, `token` returns None and the cache reads
  the store; it does not ask again for `RETRY_AFTER_S`, so an outage costs no request more than
  that one wait. When `announce` cannot replace the token it returns False, and copies
  elsewhere live until their age limit: the caller decides what that means (a revocation waits
  it out before it answers).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import cast

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.redis_client import COORDINATION_ERRORS

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 0.05
"""How long a request waits for a token before it reads the store instead."""
RETRY_AFTER_S = 1.0
"""After a token could not be read, how long requests read the store without asking Redis."""
ANNOUNCE_TIMEOUT_S = 2.0
"""How long a change waits for Redis to take its new token."""


class Invalidations:
    """One process's view of the change tokens; see the module docstring. The client is
    borrowed: the caller closes it after `stop()`."""

    def __init__(self, client: redis.Redis, *, prefix: str = keys.ROWS_EPOCH_PREFIX) -> None:
        self.prefix = prefix
        """Where the tokens live (tests give each test a prefix of its own)."""
        self._client = client
        self._quiet_until = float("-inf")
        self._failing = False
        self._sending: set[asyncio.Task[bool]] = set()

    async def token(self, topic: str) -> bytes | None:
        """The current token of `topic`; None when Redis cannot say right now."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._quiet_until:
            return None
        key = self.prefix + topic
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                found = cast(bytes | None, await self._client.get(key))
                if found is None:  # never set, or Redis restarted empty: start a new era
                    await self._client.set(key, secrets.token_hex(8), nx=True)
                    found = cast(bytes | None, await self._client.get(key))
        except COORDINATION_ERRORS as error:  # TimeoutError included: `asyncio.timeout`
            self._quiet_until = loop.time() + RETRY_AFTER_S
            self._report(error)
            return None
        self._recovered()
        return found

    async def announce(self, topic: str) -> bool:
        """Rows of `topic` changed and the change is committed: replace its token. True when
        Redis took it; never raises for a coordination failure."""
        try:
            async with asyncio.timeout(ANNOUNCE_TIMEOUT_S):
                await self._client.set(self.prefix + topic, secrets.token_hex(8))
        except COORDINATION_ERRORS as error:
            self._report(error)
            return False
        self._recovered()
        return True

    def announce_soon(self, topic: str) -> None:
        """`announce` from synchronous code (the store's report of a committed change), on a
        task of its own; `settled()` waits for it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a connection returned by the garbage collector: nobody waits
            return
        task = loop.create_task(self.announce(topic))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def settled(self) -> None:
        """Wait until every announcement started so far has been sent (or has failed)."""
        if self._sending:
            await asyncio.wait(set(self._sending))

    async def stop(self) -> None:
        """Send what is pending (changes committed just before), then stop."""
        await self.settled()

    def _report(self, error: BaseException) -> None:
        if not self._failing:
            logger.warning(
                "row change tokens: Redis did not answer (%s); copies of rows are not used "
                "until it does",
                type(error).__name__ if not str(error) else error,
            )
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            logger.info("row change tokens: Redis answers again")
        self._failing = False
