"""A worker process of the durable floor (bench/durable_floor.py starts N of them).

    python -m bench.durable_floor_worker '<WorkerConfig as JSON>'

One event loop (uvloop), three PostgreSQL connections (asyncpg), one aiohttp session, and:

* `in_flight` caller tasks, each taking a claimed child from a local queue and POSTing its item
  to the mock with its Idempotency-Key (up to `TRIES` tries in process; then the child FAILED);
* one exchange loop: at most every `batch_ms`, one statement that records every result
  finished since the last one (under their claims' tokens, join counters included) and claims
  enough READY children to keep `in_flight + prefetch` claimed and unfinished; with Redis, one
  EVAL after it that gives back the recorded children's slots and takes slots for the claimed
  ones. A result counts as done only once that statement has committed. When a statement
  closes a join, this worker writes the merge (once: the statement is guarded);
* housekeeping every `lease_s / 3`: renew the leases of its claims, requeue children whose
  leases ran out (any worker's). When idle it takes over a parent's spawn not taken (or whose
  spawner's lease ran out) and writes any merge whose join closed without one.

Prints one JSON line when ready (`{"ready": …, "backend_pids": […]}`) and one with its counts
when it stops (SIGTERM, SIGINT, or `deadline_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import asyncpg
import orjson
import redis.asyncio

from bench.common import run_like_the_services
from bench.durable_floor_sql import Statements

SMALL_ANSWER = {"X-Demo-Raw": '{"ok":true}', "X-Demo-Content-Type": "application/json"}
"""bench.fanout's headers (the mock answers `{"ok":true}`), copied: importing bench.fanout
would load the whole engine into every floor worker. A test checks they are the same."""

TRIES = 3
"""HTTP tries of a child in process before it is recorded FAILED (no redispatch)."""
RETRY_BASE_S = 0.05
SPAWN_BATCH = 500
"""Children per spawn statement (SchemaBridge's `spawn_batch`)."""
IDLE_POLL_S = 0.01
"""How long an idle exchange loop waits for a result before it claims again."""
UNRECORDED_MAX_FACTOR = 4
"""Stop claiming while more than this many x `in_flight` results wait to be recorded (the
database is stalled): memory and the work lost to a crash stay bounded."""
CALL_TIMEOUT_S = 30.0
SLOT_CAP = 1_000_000
"""The admission counter's cap: high enough never to refuse here; the EVAL stands for the
cost of an admission exchange, not for a limit."""

ADMIT_LUA = """
-- KEYS[1]: a destination's slots (a sorted set: member = child id, score = lease end).
-- ARGV: now, slot lease s, cap, n settled, the settled ids, then the ids asking for a slot.
-- Expired slots go first (their worker died), then the settled ones; slots are granted in
-- order while fewer than cap are held. Returns how many were granted.
local now = tonumber(ARGV[1])
local expiry = now + tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local settled = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if settled > 0 then redis.call('ZREM', KEYS[1], unpack(ARGV, 5, 4 + settled)) end
local used = redis.call('ZCARD', KEYS[1])
local add = {}
local granted = 0
for i = 5 + settled, #ARGV do
  if used + granted >= cap then break end
  granted = granted + 1
  add[#add + 1] = expiry
  add[#add + 1] = ARGV[i]
end
if granted > 0 then redis.call('ZADD', KEYS[1], unpack(add)) end
return granted
"""


@dataclass(frozen=True)
class WorkerConfig:
    dsn: str
    schema: str
    url: str
    """Where children POST (the mock's `/process`)."""
    in_flight: int = 128
    prefetch: int = 128
    batch_ms: float = 5.0
    lease_s: float = 30.0
    redis_url: str | None = None
    slots_key: str = ""
    deadline_s: float = 600.0
    name: str = "floor-w0"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Call:
    id: int
    token: int
    key: str
    body: bytes


@dataclass
class Results:
    """Results finished and not yet recorded, as the exchange statement's arrays."""

    ids: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def add(self, call: Call, status: str, output: str) -> None:
        self.ids.append(call.id)
        self.tokens.append(call.token)
        self.statuses.append(status)
        self.outputs.append(output)

    def put_back(self, earlier: Results) -> None:
        """A failed exchange's results go before those finished meanwhile."""
        self.ids[:0] = earlier.ids
        self.tokens[:0] = earlier.tokens
        self.statuses[:0] = earlier.statuses
        self.outputs[:0] = earlier.outputs


def new_token() -> int:
    """A claim token: unique per claim batch (a bigint, cheaper to compare than text)."""
    return secrets.randbits(62) + 1


class FloorWorker:
    """The loops of one worker process (see the module docstring). `conn` runs the exchange
    loop's statements, `side` housekeeping, `spawner` a spawn."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        conn: asyncpg.Connection,
        side: asyncpg.Connection,
        spawner: asyncpg.Connection,
        session: aiohttp.ClientSession,
        admission: redis.asyncio.Redis | None,
    ) -> None:
        self.config = config
        self.sql = Statements(config.schema)
        self.conn, self.side, self.spawner = conn, side, spawner
        self.session = session
        self.admission = admission
        self.admit_script = admission.register_script(ADMIT_LUA) if admission else None
        self.headers = {**SMALL_ANSWER, "Content-Type": "application/json"}
        self.queue: asyncio.Queue[Call] = asyncio.Queue()
        self.results = Results()
        self.held: dict[int, int] = {}
        """Claimed and not recorded: child id → claim token (what renewal extends)."""
        self.waiting: list[Call] = []
        """Claimed, refused a slot: offered again in the next EVAL."""
        self.in_flight = 0
        self.wake = asyncio.Event()
        self.spawning: tuple[int, int] | None = None
        """(parent, spawn token) while this worker spawns a parent's children."""
        self.spawn_task: asyncio.Task[None] | None = None
        self.stats: Counter[str] = Counter()
        self.parent_pid = os.getppid()

    # ── calls ───────────────────────────────────────────────────────────────────────────────

    async def caller(self) -> None:
        while True:  # ends when cancelled at shutdown
            call = await self.queue.get()
            self.in_flight += 1
            status, output = await self.post(call)
            self.in_flight -= 1
            self.results.add(call, status, output)
            self.wake.set()

    async def post(self, call: Call) -> tuple[str, str]:
        headers = {**self.headers, "Idempotency-Key": call.key}
        error = ""
        for attempt in range(TRIES):
            if attempt:
                self.stats["retries"] += 1
                await asyncio.sleep(RETRY_BASE_S * 2 ** (attempt - 1))
            self.stats["calls"] += 1
            try:
                async with self.session.post(
                    self.config.url, data=call.body, headers=headers
                ) as response:
                    raw = await response.read()
                    if response.status == 200:
                        orjson.loads(raw)  # an answer must be JSON, as the plain loop reads it
                        return "SUCCEEDED", raw.decode()
                    error = f"HTTP {response.status}"
            except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError) as exc:
                error = type(exc).__name__
        self.stats["failed"] += 1
        return "FAILED", orjson.dumps({"error": error}).decode()

    # ── the exchange loop ───────────────────────────────────────────────────────────────────

    def claim_size(self) -> int:
        if len(self.results.ids) > UNRECORDED_MAX_FACTOR * self.config.in_flight:
            return 0
        held = self.queue.qsize() + self.in_flight + len(self.waiting)
        return max(0, self.config.in_flight + self.config.prefetch - held)

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.config.batch_ms / 1000
        claim_min = max(1, self.config.prefetch // 4)
        deadline = time.monotonic() + self.config.deadline_s
        short = False  # the last claim found fewer children than it asked for
        last = 0.0
        while not stop.is_set() and time.monotonic() < deadline:
            want = self.claim_size()
            if not self.results.ids and not self.waiting and (short or want < claim_min):
                self.wake.clear()
                try:
                    async with asyncio.timeout(IDLE_POLL_S):
                        await self.wake.wait()
                except TimeoutError:
                    if os.getppid() != self.parent_pid:
                        break  # the driver is gone (killed): nobody will stop this worker
                    if not self.held:
                        await self.idle()
                short = False
                continue
            pause = last + interval - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            last = time.monotonic()
            short = await self.cycle(self.claim_size())

    async def cycle(self, want: int) -> bool:
        """Record, claim, admit: returns whether the claim came back short."""
        records, self.results = self.results, Results()
        claimed: list[Call] = []
        if records.ids or want:
            token = new_token()
            try:
                row = await self.conn.fetchrow(
                    self.sql.exchange,
                    records.ids,
                    records.tokens,
                    records.statuses,
                    records.outputs,
                    token,
                    self.config.lease_s,
                    want,
                )
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # A deadlock with a reaper, a lost connection: the results stay to be
                # recorded (their claims hold for a lease), the claim did not happen.
                self.results.put_back(records)
                self.stats["exchange_errors"] += 1
                print(f"{self.config.name}: exchange failed: {exc!r}", file=sys.stderr)
                await asyncio.sleep(0.1)
                return True
            assert row is not None  # an aggregate returns one row
            self.stats["exchanges"] += 1
            self.stats["recorded"] += row["recorded"]
            self.stats["dropped_late"] += len(records.ids) - row["recorded"]
            for child in records.ids:
                self.held.pop(child, None)
            for parent in row["closed"] or ():
                await self.merge(self.conn, parent)
            for child, key, item in zip(
                row["ids"] or (), row["keys"] or (), row["items"] or (), strict=True
            ):
                self.held[child] = token
                claimed.append(Call(child, token, key, item.encode()))
            self.stats["claimed"] += len(claimed)
        admitted = await self.admit(records.ids, self.waiting + claimed)
        for call in admitted:
            self.queue.put_nowait(call)
        return len(claimed) < want

    async def admit(self, settled: list[int], offered: list[Call]) -> list[Call]:
        """One EVAL: give back the recorded children's slots, take slots for `offered`
        (without Redis: everything is admitted)."""
        if self.admit_script is None:
            return offered
        if not settled and not offered:
            return []
        args: list[Any] = [time.time(), self.config.lease_s + CALL_TIMEOUT_S, SLOT_CAP]
        args += [len(settled), *settled, *(call.id for call in offered)]
        try:
            granted = int(await self.admit_script(keys=[self.config.slots_key], args=args))
        except (redis.RedisError, OSError) as exc:
            # The settled slots stay taken until their lease ends; ask again next cycle.
            print(f"{self.config.name}: admission failed: {exc!r}", file=sys.stderr)
            self.stats["admission_errors"] += 1
            granted = 0
        self.stats["evals"] += 1
        self.waiting = offered[granted:]
        return offered[:granted]

    async def merge(self, conn: asyncpg.Connection, parent: int) -> None:
        if await conn.fetchval(self.sql.merge, parent) is not None:
            self.stats["merges"] += 1

    # ── idle work, spawn, housekeeping ──────────────────────────────────────────────────────

    async def idle(self) -> None:
        """Nothing held: take over a spawn, write a merge a dead worker left."""
        for parent in await self.conn.fetch(self.sql.unmerged):
            await self.merge(self.conn, parent["id"])
        if self.spawning is not None:
            return
        token = new_token()
        row = await self.conn.fetchrow(self.sql.claim_spawn, token, self.config.lease_s)
        if row is not None:
            self.spawning = (row["id"], token)
            self.spawn_task = asyncio.create_task(self.spawn(row["id"], row["input"], token))
            self.spawn_task.add_done_callback(self._spawned)

    async def spawn(self, parent: int, input_text: str, token: int) -> None:
        items = orjson.loads(input_text)["items"]
        for start in range(0, len(items), SPAWN_BATCH):
            chunk = items[start : start + SPAWN_BATCH]
            indexes = list(range(start, start + len(chunk)))
            bodies = [orjson.dumps(item).decode() for item in chunk]
            await self.spawner.execute(self.sql.spawn_batch, parent, indexes, bodies, token)
            self.stats["spawn_batches"] += 1
            self.wake.set()  # claim what is there
        await self.spawner.execute(self.sql.spawn_done, parent, token)

    def _spawned(self, task: asyncio.Task[None]) -> None:
        self.spawning = None
        if not task.cancelled() and task.exception() is not None:
            # Its lease runs out and an idle worker (maybe this one) takes the spawn over.
            print(f"{self.config.name}: spawn failed: {task.exception()!r}", file=sys.stderr)
            self.stats["spawn_errors"] += 1

    async def housekeeping(self) -> None:
        """Requeue expired leases at once (a worker that died before this one started), then
        every third of a lease: renew this worker's claims and spawn, requeue again."""
        while True:  # ends when cancelled at shutdown
            try:
                status = await self.side.execute(self.sql.requeue_expired)
                self.stats["requeued"] += int(status.rsplit(" ", 1)[-1])
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                print(f"{self.config.name}: requeue failed: {exc!r}", file=sys.stderr)
            await asyncio.sleep(self.config.lease_s / 3)
            try:
                await self.renew()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # The leases run on; a result whose lease ran out is dropped, its child run
                # again (at-least-once).
                print(f"{self.config.name}: renewal failed: {exc!r}", file=sys.stderr)

    async def renew(self) -> None:
        if self.held:
            held = list(self.held.items())
            await self.side.execute(
                self.sql.renew,
                [child for child, _ in held],
                [token for _, token in held],
                self.config.lease_s,
            )
        if self.spawning is not None:
            parent, token = self.spawning
            await self.side.execute(self.sql.renew_spawn, parent, token, self.config.lease_s)


async def serve(config: WorkerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    conn, side, spawner = [await asyncpg.connect(config.dsn) for _ in range(3)]
    connector = aiohttp.TCPConnector(limit=config.in_flight)
    session = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
    )
    admission = redis.asyncio.Redis.from_url(config.redis_url) if config.redis_url else None
    worker = FloorWorker(
        config, conn=conn, side=side, spawner=spawner, session=session, admission=admission
    )
    tasks: list[asyncio.Task[None]] = []
    try:
        if admission is not None:
            await admission.script_load(ADMIT_LUA)  # the first EVALSHA finds it
        tasks = [asyncio.create_task(worker.caller()) for _ in range(config.in_flight)]
        tasks.append(asyncio.create_task(worker.housekeeping()))
        pids = [c.get_server_pid() for c in (conn, side, spawner)]
        print(json.dumps({"ready": config.name, "backend_pids": pids}), flush=True)
        await worker.run(stop)
    finally:
        if worker.spawn_task is not None:
            tasks.append(worker.spawn_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
        for c in (conn, side, spawner):
            with contextlib.suppress(Exception):
                await c.close(timeout=5)
        if admission is not None:
            await admission.aclose()
    print(json.dumps({"stopped": config.name, **worker.stats}), flush=True)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m bench.durable_floor_worker '<WorkerConfig JSON>'")
    run_like_the_services(serve(WorkerConfig.from_json(sys.argv[1])))


if __name__ == "__main__":
    main()
