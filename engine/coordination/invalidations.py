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
- Within one request (`request_scope`, opened by the REST API for each), the first cache that
  asks reads every topic's token in one MGET, and the others use what it read: it was read
  after the request arrived, which is all the rule above needs. Outside a request every call
  reads Redis.
- When Redis does not answer within `READ_TIMEOUT_S`, `token` returns None and the cache reads
  the store; it does not ask again for `RETRY_AFTER_S`, so an outage costs no request more than
  that one wait. When `announce` cannot replace the token it returns False, and copies
  elsewhere live until their age limit: the caller decides what that means (a revocation waits
  it out before it answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import cast

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.redis_client import COORDINATION_ERRORS

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 0.25
"""How long a request waits for a token before it reads the store instead. 50 ms expired with
Redis answering on a busy 2-core host (the api's own event loop late to read the reply): a
benchmark's api logged an outage every ~15 s, each sending every request of the next second
to the store, which made the host busier still. In a real outage the requests that arrive
during the first read's wait each wait it out too; after that none asks Redis for
`RETRY_AFTER_S`. (They do not share one read: a read begun before a request arrived could
hand it a token from before a change it must see, a revocation.)"""
RETRY_AFTER_S = 1.0
"""After a token could not be read, how long requests read the store without asking Redis."""
ANNOUNCE_TIMEOUT_S = 2.0
"""How long a change waits for Redis to take its new token."""
TOPICS = ("api-keys", "serving")
"""Every topic whose rows processes keep copies of: a request reads their tokens together."""

_read_in_request: ContextVar[dict[str, bytes | None] | None] = ContextVar(
    "read_in_request", default=None
)
"""The tokens read so far by the current request (None outside `request_scope`)."""


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """One request: its caches read the tokens at most once, together (see the docstring)."""
    reset = _read_in_request.set({})
    try:
        yield
    finally:
        _read_in_request.reset(reset)


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
        self._drops: dict[str, list[Callable[[], None]]] = {}

    def watch(self, topic: str, drop: Callable[[], None]) -> None:
        """Call `drop` when this process changes rows of `topic`: its own copies go at once,
        before the new token is even sent (the current request may read them again)."""
        self._drops.setdefault(topic, []).append(drop)

    def _changed_here(self, topic: str) -> None:
        for drop in self._drops.get(topic, ()):
            drop()
        read = _read_in_request.get()
        if read is not None:
            read.pop(topic, None)

    async def token(self, topic: str) -> bytes | None:
        """The current token of `topic`; None when Redis cannot say."""
        read = _read_in_request.get()
        if read is not None and topic in read:
            return read[topic]
        tokens = await self._read(TOPICS if topic in TOPICS else (topic,))
        if read is not None:
            read.update(tokens)
        return tokens[topic]

    async def _read(self, topics: tuple[str, ...]) -> dict[str, bytes | None]:
        loop = asyncio.get_running_loop()
        if loop.time() < self._quiet_until:
            return dict.fromkeys(topics)
        names = [self.prefix + topic for topic in topics]
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                found = cast(list[bytes | None], await self._client.mget(names))
                if None in found:  # never set, or Redis restarted empty: start a new era
                    for name, value in zip(names, found, strict=True):
                        if value is None:
                            await self._client.set(name, secrets.token_hex(8), nx=True)
                    found = cast(list[bytes | None], await self._client.mget(names))
        except COORDINATION_ERRORS as error:  # TimeoutError included: `asyncio.timeout`
            self._quiet_until = loop.time() + RETRY_AFTER_S
            self._report(error)
            return dict.fromkeys(topics)
        self._recovered()
        return dict(zip(topics, found, strict=True))

    async def announce(self, topic: str) -> bool:
        """Rows of `topic` changed and the change is committed: replace its token. True when
        Redis took it; never raises for a coordination failure."""
        self._changed_here(topic)
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
        self._changed_here(topic)
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
            # The error itself as an argument, even one without words: a process's outage
            # filter (`api.cli.log_setup`) reads the outage from it.
            logger.warning(
                "row change tokens: Redis did not answer (%s: %s); copies of rows are not used "
                "until it does",
                type(error).__name__,
                error,
            )
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            logger.info("row change tokens: Redis answers again")
        self._failing = False
