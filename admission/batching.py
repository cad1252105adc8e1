"""One Redis round trip for many admission operations: the per-process exchange batcher.

Every GATEWAY attempt makes two admission operations (admit before the call, settle after
it), and a busy worker runs hundreds of attempts a second. Sent one by one, each is a round
trip whose client-side cost (packing, a socket write, a wake-up, parsing) is larger than the
script's own work. So operations are coalesced, the way the worker's flusher coalesces
results:

* an operation is queued and its caller awaits a future;
* if no exchange is in flight, one is started for everything queued (the operations asked
  for in the same event-loop iteration travel together);
* operations queued while an exchange is in flight wait for it to return, then all go in
  the next one (up to `max_ops` per call, plus the hand-over records that follow the last
  settlement: a record never travels apart from the settlement that freed its slot).

At low load every operation goes out at once, alone (no timer adds latency); under load the
batches grow by themselves. Each batch is one `lua/exchange.lua` call, so it is applied
atomically, settlements first and otherwise in queue order — the same as if the operations
had been sent one after another in that order (they were all concurrent, so any order is one
they could have had). Settlements go first so that a slot given back can be taken by an
admit of the same batch: a local waiter is woken as soon as a call of its destination is
settled, and its admit travels with that settlement.

A caller cancelled while its admit is in the air cannot settle the slot it may be granted:
the batcher gives such a slot back itself (settled as `ignore`) in the next exchange, so
cancellation never leaks capacity until the lease expires.

An exchange is never sent twice: the script is not idempotent (a settlement counts its
outcome in the breakers, the budget and AIMD; an admit takes a slot), and a reply lost after
Redis ran it is indistinguishable from a call that never arrived. So the client must not
resend commands (`engine.coordination.open_redis(..., retries=False)`); a failed exchange
fails its callers, and the slots its ordinary admits may have been granted are given back in
the next exchange, best effort.

The drain task is owned here: it is named, started only when there is work, ends when the
queue is empty, and logs if it dies (docs/architecture.md, 'Supervised tasks').
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from admission.backend import AdmitCode, AdmitOp, AdmitReply, Op, Reply, SettleOp
from admission.ticket import CallOutcome

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPS = 256
"""Operations per exchange. Default 256: a few hundred microseconds of script time."""

Exchange = Callable[[Sequence[Op]], Awaitable[list[Reply]]]


@dataclass
class _Pending:
    op: Op
    future: asyncio.Future[Reply]


class ExchangeBatcher:
    """Coalesces admission operations into `exchange` calls, one in flight at a time."""

    def __init__(self, exchange: Exchange, *, max_ops: int = DEFAULT_MAX_OPS) -> None:
        if max_ops < 1:
            raise ValueError("max_ops must be at least 1")
        self._exchange = exchange
        self._max_ops = max_ops
        self._queue: list[_Pending] = []
        self._drain_task: asyncio.Task[None] | None = None
        self.exchanges = 0
        """Exchanges made so far (for tests and benchmarks)."""

    async def submit(self, op: Op) -> Reply:
        """Queue `op` and wait for its reply. Raises what the exchange raised."""
        future = self.enqueue(op)
        try:
            return await future
        except asyncio.CancelledError:
            # The reply can arrive after the cancellation was requested but before this task
            # ran: the future is done, its result never seen. A slot it granted goes back.
            if future.done() and not future.cancelled() and future.exception() is None:
                self._give_back(op, future.result())
            raise

    def enqueue(self, op: Op) -> asyncio.Future[Reply]:
        """Queue `op`; the future resolves with its reply (what `submit` awaits)."""
        pending = _Pending(op, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._ensure_draining()
        return pending.future

    def _ensure_draining(self) -> None:
        if self._drain_task is None:
            loop = asyncio.get_running_loop()
            self._drain_task = loop.create_task(self._drain(), name="admission-exchange")
            self._drain_task.add_done_callback(self._drain_ended)

    async def _drain(self) -> None:
        # Bounded by the work: each pass takes at least one operation off the queue.
        while self._queue:
            # One turn of the loop first: callers woken by the last replies (or by a
            # settlement just queued) add their operations to this batch, not the next.
            await asyncio.sleep(0)
            batch = self._next_batch()
            try:
                replies = await self._exchange([p.op for p in batch])
            except asyncio.CancelledError:
                # The loop is shutting down: nobody will answer these callers any more.
                for pending in (*batch, *self._queue):
                    pending.future.cancel()
                self._queue.clear()
                raise
            except Exception as exc:
                _fail(batch, exc)
                self._give_back_unanswered(batch)
                continue
            self.exchanges += 1
            if len(replies) != len(batch):
                # Never leave a caller waiting forever (nor its settlement's bookkeeping).
                _fail(batch, RuntimeError(f"{len(replies)} replies to {len(batch)} operations"))
                continue
            for pending, reply in zip(batch, replies, strict=True):
                if not pending.future.done():
                    pending.future.set_result(reply)
                else:
                    self._give_back(pending.op, reply)

    def _next_batch(self) -> list[_Pending]:
        """Up to `max_ops` queued operations, settlements first (`_settlements_first`)."""
        cut = self._max_ops
        # A hand-over record travels with the settlement queued just before it: split from
        # it, the slot freed here could go to an ordinary admit of this batch, and the record
        # (which skips the checks) would then exceed the limit in the next one.
        while cut < len(self._queue) and _is_handover(self._queue[cut].op):
            cut += 1
        batch, self._queue = self._queue[:cut], self._queue[cut:]
        _settlements_first(batch)
        return batch

    def _give_back(self, op: Op, reply: Reply) -> None:
        """A granted slot whose caller is gone (cancelled) goes back in the next exchange."""
        if (
            isinstance(op, AdmitOp)
            and isinstance(reply, AdmitReply)
            and reply.code is AdmitCode.GRANTED
        ):
            self._give_back_slot(op, reply.epoch)

    def _give_back_unanswered(self, batch: list[_Pending]) -> None:
        """The exchange failed: Redis may still have run it (the reply was lost) and granted
        slots nobody will settle. Give back every ordinary admit's slot in the next exchange,
        best effort (a token Redis never granted releases nothing). Never resent, so nothing
        is applied twice; a hand-over record's call runs anyway and settles its own slot, and
        a failed settlement's slot comes back when its lease ends."""
        for pending in batch:
            op = pending.op
            if isinstance(op, AdmitOp) and not op.handover:
                self._give_back_slot(op, 0)

    def _give_back_slot(self, op: AdmitOp, epoch: int) -> None:
        """Settle `op`'s slot as `ignore` in the next exchange (nothing said about the
        destination; a token Redis never granted releases nothing)."""
        settle = SettleOp(
            op.destination,
            op.tenant_id,
            op.token,
            CallOutcome.IGNORE,
            epoch,
            breaker_scope=op.breaker_scope,
        )
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        # Nobody awaits it: retrieve its outcome so a failure is not reported as unhandled
        # (the lease then expires on its own).
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.append(_Pending(settle, future))
        self._ensure_draining()

    def _drain_ended(self, task: asyncio.Task[None]) -> None:
        self._drain_task = None
        if not task.cancelled() and task.exception() is not None:
            logger.error("admission exchange task died", exc_info=task.exception())
        # Operations queued after the last pass (or left by a dying task) get a new drain.
        if self._queue and not task.get_loop().is_closed():
            self._ensure_draining()


def _fail(batch: list[_Pending], exc: Exception) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(exc)


def _is_handover(op: Op) -> bool:
    return isinstance(op, AdmitOp) and op.handover


def _settlements_first(batch: list[_Pending]) -> None:
    """Reorder in place: settlements first, so a slot given back in this batch can go to an
    admit in it; then hand-overs (each records a call that already started on a slot one of
    those settlements frees, so no ordinary admit may take that slot in between); then the
    rest in queue order. The settlement of a call admitted in this very batch (a handed-over
    call answered at once, e.g. by a 429) stays after its admit, or it would release nothing
    and the admit would then take a slot nobody gives back."""
    admitted = {p.op.token for p in batch if isinstance(p.op, AdmitOp)}

    def rank(pending: _Pending) -> int:
        op = pending.op
        if isinstance(op, SettleOp) and op.token not in admitted:
            return 0
        if isinstance(op, AdmitOp) and op.handover:
            return 1
        return 2

    batch.sort(key=rank)
