"""The exchange batcher: coalescing, ordering, errors and cancellation, with a fake exchange
(no Redis: what goes over the wire is tested in tests/integration)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from admission.backend import AdmitCode, AdmitOp, AdmitReply, Op, Reply, SettleOp, TakeOp, TakeReply
from admission.batching import ExchangeBatcher
from admission.ticket import CallOutcome


def granted() -> AdmitReply:
    return AdmitReply(AdmitCode.GRANTED, 3, 1, 10.0, 0.0, "", False, False, ())


class FakeExchange:
    """Answers every op; records the batches; can be paused or made to fail."""

    def __init__(self) -> None:
        self.batches: list[list[Op]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None
        self.short_by = 0
        """Answer this many replies too few (a broken script)."""

    async def __call__(self, ops: Sequence[Op]) -> list[Reply]:
        self.batches.append(list(ops))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        replies = [
            granted() if isinstance(op, AdmitOp) else TakeReply(True, 1, 5, 0.0) for op in ops
        ]
        return replies[: len(replies) - self.short_by]


def take(i: int) -> TakeOp:
    return TakeOp("t", f"m{i}", 5)


async def test_operations_of_one_iteration_travel_together() -> None:
    exchange = FakeExchange()
    batcher = ExchangeBatcher(exchange)
    replies = await asyncio.gather(*(batcher.submit(take(i)) for i in range(40)))
    assert len(replies) == 40
    assert [len(b) for b in exchange.batches] == [40]
    assert [op.member for op in exchange.batches[0]] == [f"m{i}" for i in range(40)]  # type: ignore[union-attr]


async def test_operations_queued_during_an_exchange_go_in_the_next_one() -> None:
    exchange = FakeExchange()
    exchange.gate.clear()
    batcher = ExchangeBatcher(exchange)
    first = asyncio.ensure_future(batcher.submit(take(0)))
    await asyncio.sleep(0.01)
    later = [asyncio.ensure_future(batcher.submit(take(i))) for i in range(1, 6)]
    await asyncio.sleep(0.01)
    assert [len(b) for b in exchange.batches] == [1]  # one exchange in flight at a time
    exchange.gate.set()
    await asyncio.gather(first, *later)
    assert [len(b) for b in exchange.batches] == [1, 5]


async def test_batches_are_capped_at_max_ops() -> None:
    exchange = FakeExchange()
    batcher = ExchangeBatcher(exchange, max_ops=16)
    await asyncio.gather(*(batcher.submit(take(i)) for i in range(40)))
    assert [len(b) for b in exchange.batches] == [16, 16, 8]


async def test_a_failed_exchange_fails_its_callers_and_the_next_one_works() -> None:
    exchange = FakeExchange()
    exchange.fail = ConnectionError("redis down")
    batcher = ExchangeBatcher(exchange)
    results = await asyncio.gather(
        *(batcher.submit(take(i)) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ConnectionError) for r in results)
    exchange.fail = None
    assert isinstance(await batcher.submit(take(9)), TakeReply)


async def test_a_reply_count_that_does_not_match_fails_the_callers_not_the_batcher() -> None:
    exchange = FakeExchange()
    exchange.short_by = 1
    batcher = ExchangeBatcher(exchange)
    async with asyncio.timeout(5):  # nobody may be left waiting
        results = await asyncio.gather(
            *(batcher.submit(take(i)) for i in range(3)), return_exceptions=True
        )
    assert all(isinstance(r, RuntimeError) and "2 replies to 3" in str(r) for r in results)
    exchange.short_by = 0
    assert isinstance(await batcher.submit(take(9)), TakeReply)


async def test_a_slot_granted_to_a_cancelled_caller_is_given_back() -> None:
    exchange = FakeExchange()
    exchange.gate.clear()
    batcher = ExchangeBatcher(exchange)
    caller = asyncio.ensure_future(batcher.submit(AdmitOp("d", "t", "tok", 30.0)))
    await asyncio.sleep(0.01)
    caller.cancel()
    exchange.gate.set()
    async with asyncio.timeout(5):
        while len(exchange.batches) < 2:
            await asyncio.sleep(0.001)
    (give_back,) = exchange.batches[1]
    assert give_back == SettleOp("d", "t", "tok", CallOutcome.IGNORE, 3)


def test_max_ops_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_ops"):
        ExchangeBatcher(FakeExchange(), max_ops=0)


async def test_settlements_go_first_so_a_freed_slot_serves_an_admit_of_the_same_batch() -> None:
    exchange = FakeExchange()
    batcher = ExchangeBatcher(exchange)
    admit = AdmitOp("d", "t", "new", 30.0)
    settle = SettleOp("d", "t", "old", CallOutcome.SUCCESS, 0)
    await asyncio.gather(batcher.submit(admit), batcher.submit(take(1)), batcher.submit(settle))
    assert exchange.batches == [[settle, admit, take(1)]]


async def test_a_settlement_never_overtakes_the_admit_of_its_own_call() -> None:
    """A handed-over call answered at once (a 429) is settled in the batch that records it:
    its settlement must come after its admit, or the slot would be taken and never given back."""
    exchange = FakeExchange()
    batcher = ExchangeBatcher(exchange)
    other = SettleOp("d", "t", "old", CallOutcome.SUCCESS, 0)
    admit = AdmitOp("d", "t", "quick", 30.0, handover=True)
    own = SettleOp("d", "t", "quick", CallOutcome.THROTTLED, 0)
    await asyncio.gather(batcher.submit(admit), batcher.submit(own), batcher.submit(other))
    assert exchange.batches == [[other, admit, own]]


async def test_a_hand_over_comes_right_after_the_settlements_before_other_admits() -> None:
    """The slot a settlement frees belongs to the hand-over that started on it: an ordinary
    admit queued earlier must not take it in between."""
    exchange = FakeExchange()
    batcher = ExchangeBatcher(exchange)
    waiter = AdmitOp("d", "t", "woken-waiter", 30.0)
    freed = SettleOp("d", "t", "ended", CallOutcome.SUCCESS, 0)
    handed = AdmitOp("d", "t", "handed", 30.0, handover=True)
    await asyncio.gather(batcher.submit(waiter), batcher.submit(freed), batcher.submit(handed))
    assert exchange.batches == [[freed, handed, waiter]]
