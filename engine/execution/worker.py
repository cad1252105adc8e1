"""The worker: claims ready steps, runs them concurrently, records results in batches.

Four cooperating loops under one `asyncio.TaskGroup` (docs/architecture.md, 'Supervised tasks'):

* claim loop — claims up to `claim_batch` steps whenever fewer than `worker_concurrency` are in
  flight (while the queue is deep, once at least half a batch of slots is free or 50 ms have
  passed, so that claims stay batched); when the queue looks empty it waits for a wake-up
  (Redis pub/sub, or a local notify when this process made steps ready), for the next step it
  parked or redispatched to become due, or for a slow poll as the fallback, so an idle worker
  costs one query per `idle_poll_s`.
* flusher — records finished steps. It takes everything that finished since its last write and
  writes it in one transaction, so under load results are batched and at low load each result
  is written immediately (no timer adds latency).
* lease renewer — renews the leases of every step still in flight every `lease_s / 3`; when it
  renews fewer than it holds, it asks which claims are gone and stops those steps.
* reaper — returns steps whose lease expired (their worker died) to READY.
* payload retention — deletes the payloads of runs that ended more than
  `payload_retention_s` ago, at most `PAYLOAD_EXPIRY_BATCH` chunks and
  `PAYLOAD_EXPIRY_BATCH_BYTES` per transaction
  (docs/architecture.md, 'Payload retention').
* run retention — when `run_retention_s` is set, deletes the root runs that ended more than
  that ago with their whole tree, in bounded batches, batch after batch while they come back
  full for most of each minute (`engine.execution.run_retention`; docs/architecture.md, 'Run
  retention').

A step counts as in flight until its result is written, so its lease is renewed until then;
it stops counting against `worker_concurrency` as soon as it has executed, so claiming the next
batch overlaps with recording the last one (a backlog of 2 x concurrency bounds the overlap).
A step whose run is cancelled is stopped before its next HTTP attempt: the cancel's
announcement (or, failing that, the lease renewal) sets its stop signal (`stops`), and it
ends without a result, its log lines saying why (docs/architecture.md, 'Cancelling a run').
Shutdown: stop claiming, let in-flight steps finish within `shutdown_grace_s`, flush, return.
Steps abandoned at the deadline keep their claims; their leases expire and another worker (or
the next start) runs them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine import payload_defaults
from engine.coordination.redis_client import COORDINATION_ERRORS
from engine.execution import executor, run_retention, worker_metrics
from engine.execution.stops import CLAIM_KEPT, CancelledRuns, Stops
from engine.store import Store
from engine.store.queue import HELD_BACK, LOST_RUN_FAILED
from engine.store.records import (
    ClaimedStep,
    CompletionReport,
    LogLine,
    StepAbandoned,
    StepFailed,
    StepParked,
    StepResult,
)
from engine.store.unreachable import store_unreachable
from schemas.counts import plural
from schemas.definitions import Workflow
from schemas.durations import duration
from schemas.message_excerpt import message_excerpt

logger = logging.getLogger(__name__)

FLUSH_BATCH_MAX = 500
ANALYZE_EVERY_S = 60.0
"""How often a worker refreshes the planner statistics of the queue tables (PostgreSQL)."""
FLUSH_RETRY_LIMIT = 5
"""Tries of a write that holds no claim (only the lines of abandoned steps), or that the
database refuses for what it holds rather than for an outage: the next try meets the same
refusal, and the renewer would keep its leases, and so the flusher, held forever."""
FLUSH_RETRY_MAX_PAUSE_S = 2.0
"""Longest pause between two tries of recording a batch (the pause doubles from 0.1 s)."""
RECORD_MARGIN_FRACTION = 1 / 6
"""Results are retried until this fraction of the lease before their claims end (5 s of the
default 30 s): room for the last try to commit before another worker may requeue the step."""
CLAIM_GATHER_S = 0.05
"""Longest wait for half a batch of free slots before claiming fewer (deep queue only)."""
ADMISSION_WAIT_SHOWN_S = 1.0
"""An admission wait this long is recorded on its step (shorter ones are ordinary)."""
PAYLOAD_EXPIRY_BATCH = 2000
"""Payload chunks deleted per transaction, at most."""
PAYLOAD_EXPIRY_BATCH_BYTES = 8 * 1024 * 1024
"""Bytes deleted per transaction, at most (past its first chunk). A DELETE's time grows with
the bytes it frees (SQLite: ~1.5 s for 300 MB, holding the write lock every claim and flush
waits for): 8 MiB keeps a transaction near 40 ms at that rate (extrapolated, not measured),
unless its first chunk alone is larger (a chunk holds up to 5,000 children's outputs,
`fanout.MERGE_PAGE`)."""
PAYLOAD_EXPIRY_BATCHES = 10
"""Most batches one pass deletes while each reaches a bound: a backlog drains at up to 80 MiB
(or 20,000 chunks) a pass, in short transactions, without one long pass."""


class RunChanges(Protocol):
    """Tells watchers of runs that they changed, and which of them ended (see
    `engine.coordination.run_events`)."""

    async def changed(self, run_ids: Iterable[str], ended: Iterable[str] = ()) -> None: ...


class Wakeups(Protocol):
    """Tells idle workers that steps became ready (see `engine.coordination.wakeup`)."""

    async def notify(self) -> None: ...

    async def wait(self, timeout_s: float) -> bool: ...


class Cancellations(CancelledRuns, Protocol):
    """Tells a worker which runs were cancelled (see `engine.coordination.cancellations`)."""

    def listening(
        self, listener: Callable[[frozenset[str]], None]
    ) -> contextlib.AbstractContextManager[None]: ...

    def listening_failed(
        self, listener: Callable[[frozenset[str]], None]
    ) -> contextlib.AbstractContextManager[None]: ...

    async def announce_failed(self, run_ids: Iterable[str]) -> bool: ...


Finished = tuple[StepResult | StepAbandoned, list[LogLine], str]
"""A step's end as the flusher takes it: its result (or that it was abandoned), its lines and
its vertex's type (for the worker's metrics)."""


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 64
    claim_batch: int = 32
    lease_s: float = 30.0
    idle_poll_s: float = 1.0
    shutdown_grace_s: float = 20.0
    payload_retention_s: float = payload_defaults.PAYLOAD_RETENTION_S
    """Payloads of runs that ended longer ago than this are deleted. Default 7 days."""
    service: str | None = None
    """The service id this worker's heartbeat beats under (`engine.runtime.run_service`),
    recorded on the steps it claims (`claimed_by`) so that an operator can tell whether their
    holder is alive; None for a worker that runs as no service (`schemabridge run`)."""
    run_retention_s: float = 0.0
    """Root runs that ended longer ago than this are deleted with their trees; 0 (the
    default) keeps them for ever."""
    run_purge_every_s: float = run_retention.RUN_PURGE_EVERY_S
    """How often the worker deletes runs past `run_retention_s`."""
    payload_expiry_every_s: float = 60.0
    """How often the worker deletes expired payloads. Default a minute: retention counts in
    days, and a pass that finds nothing is one indexed read."""


@dataclass
class WorkerStats:
    claimed: int = 0
    claims: int = 0
    empty_claims: int = 0
    recorded: int = 0
    dropped: int = 0
    """Late results: their claim had expired when they were recorded."""
    abandoned: int = 0
    """Steps stopped without a result: their run cancelled or failed by another step, or
    their lease lost (not late results, which they were counted as)."""
    requeued: int = 0
    flushes: int = 0
    finished_runs: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """What the worker did, as its stop's log line says it ("1 step claimed in 1 claim")."""
        return (
            f"{plural(self.claimed, 'step')} claimed in {plural(self.claims, 'claim')} "
            f"({self.empty_claims:,} found none), {plural(self.recorded, 'result')} recorded "
            f"in {plural(self.flushes, 'write')}, {plural(self.dropped, 'late result')} "
            f"dropped, {plural(self.abandoned, 'step')} stopped without a result (run "
            f"cancelled or failed, lease lost), {plural(self.requeued, 'expired lease')} "
            "requeued"
        )


class Worker:
    """One worker loop set. `await worker.run(stop)` returns after a graceful drain."""

    def __init__(
        self,
        store: Store,
        deps: executor.ExecutorDeps,
        wakeups: Wakeups,
        config: WorkerConfig,
        *,
        run_events: RunChanges | None = None,
        cancellations: Cancellations | None = None,
    ) -> None:
        self._store = store
        self._deps = deps
        self._wakeups = wakeups
        self._run_events = run_events
        self._config = config
        self._in_flight: dict[str, ClaimedStep] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._done: asyncio.Queue[Finished | None] = asyncio.Queue()
        self._cancellations = cancellations
        self._stops = Stops(cancellations)
        """The stop signals of the steps held (see `engine.execution.stops`)."""
        self._slot_freed = asyncio.Event()
        # When steps this worker parked or redispatched become due (store clock), so an idle
        # claim loop wakes for them instead of at its next poll; a min-heap.
        self._due: list[float] = []
        self._due_earlier = asyncio.Event()
        """Set when a step becomes due sooner than the idle claim loop planned to sleep."""
        self._min_claim = max(1, min(config.claim_batch, config.concurrency) // 2)
        self._closing = asyncio.Event()
        self._shown_waits: set[str] = set()
        """Claim tokens whose admission wait is recorded on their step."""
        self._reaped = False
        """The reaper has looked at every RUNNING run's held steps once (`_reap`)."""
        self._hurry = asyncio.Event()
        self._abandoned: list[str] = []
        """Claim tokens of steps cancelled mid-execution (given back when the worker stops)."""
        self._leases: dict[str, float] = {}
        """Per claim held, the store-clock time its lease surely lasts until (claimed or last
        renewed then): a result that cannot be recorded is kept until shortly before it."""
        self._recording: set[str] = set()
        """Claim tokens in the batch the flusher is writing (their rows may be locked)."""
        self.stats = WorkerStats()
        deps.metrics.watch(lambda: len(self._in_flight), config.concurrency)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(self, stop: asyncio.Event) -> None:
        self._deps.admission_tickets.renewed_by(self._config.lease_s)
        self._deps.http.open()  # before the first claim, not on the first call
        with contextlib.ExitStack() as listening:
            if self._cancellations is not None:
                listening.enter_context(self._cancellations.listening(self._stops.runs_cancelled))
                listening.enter_context(
                    self._cancellations.listening_failed(self._stops.runs_failed)
                )
            await self._run(stop)

    async def _run(self, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            flusher = group.create_task(self._flusher(), name="flusher")
            group.create_task(self._every(self._config.lease_s / 3, self._renew), name="renewer")
            slots = self._every(self._config.lease_s / 3, self._renew_slots)
            group.create_task(slots, name="slot-renewer")
            # The reaper's first pass is at once: a worker started after a crash takes back
            # the leases that ran out meanwhile now, not a third of a lease later.
            reaper = self._every(self._config.lease_s / 3, self._reap, first_s=0.0)
            group.create_task(reaper, name="reaper")
            group.create_task(self._every(ANALYZE_EVERY_S, self._analyze), name="analyze")
            expiry = self._every(self._config.payload_expiry_every_s, self._expire_payloads)
            group.create_task(expiry, name="payload-retention")
            if self._config.run_retention_s > 0:
                purge = self._every(
                    self._config.run_purge_every_s, self._purge_runs, start_to_start=True
                )
                group.create_task(purge, name="run-retention")
            await self._claim_loop(group, stop)
            await self._drain()
            self._closing.set()
            await self._done.put(None)  # wakes the flusher to notice closing
            await flusher

    # ── claiming ────────────────────────────────────────────────────────────────────────────

    async def _claim_loop(self, group: asyncio.TaskGroup, stop: asyncio.Event) -> None:
        stop_wait = asyncio.ensure_future(stop.wait())
        loop = asyncio.get_running_loop()
        deep = False
        gather_until: float | None = None
        try:
            while not stop.is_set():
                # Executing steps count against the concurrency; finished-but-unrecorded ones
                # only against a backlog bound, so claiming overlaps with recording.
                free = min(
                    self._config.concurrency - len(self._running),
                    2 * self._config.concurrency - len(self._in_flight),
                )
                # While the queue is deep (the last claim was full), claim in batches of at
                # least half a batch: one claim per freed slot would cost a round trip each.
                # But only for CLAIM_GATHER_S: slow steps must not keep slots idle for long.
                enough = 1 if not deep or not self._running else self._min_claim
                if free <= 0:
                    self._slot_freed.clear()
                    await _first(self._slot_freed.wait(), stop_wait, self._config.idle_poll_s)
                    continue
                if free < enough:
                    gather_until = gather_until or loop.time() + CLAIM_GATHER_S
                    if loop.time() < gather_until:
                        self._slot_freed.clear()
                        await _first(self._slot_freed.wait(), stop_wait, gather_until - loop.time())
                        continue
                gather_until = None
                wanted = min(free, self._config.claim_batch)
                claimed = await self._claim(wanted)
                for step in claimed:
                    self._start(group, step)
                deep = len(claimed) == wanted
                if len(claimed) < wanted:
                    idle_s = self._idle_wait_s()
                    self._due_earlier.clear()
                    await _first(
                        self._wakeups.wait(idle_s), stop_wait, idle_s, self._due_earlier.wait()
                    )
        finally:
            stop_wait.cancel()

    def _idle_wait_s(self) -> float:
        """How long an idle claim loop may sleep: until the next step this worker parked or
        redispatched is due, at most `idle_poll_s`. Without it, steps redispatched together
        (with spread-out times) would all be claimed at the next poll, in one burst."""
        now = self._deps.clock.now()
        self._drop_past_due(now)
        if not self._due:
            return self._config.idle_poll_s
        return max(0.001, min(self._config.idle_poll_s, self._due[0] - now))

    def _drop_past_due(self, now: float) -> None:
        # Pruned on every push too, so a worker that is never idle keeps only future times.
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)

    async def _claim(self, wanted: int) -> list[ClaimedStep]:
        since = self._stops.now()
        lease_until = self._deps.clock.now() + self._config.lease_s  # the store's is later
        try:
            claimed = await self._store.claim(wanted, self._config.lease_s, self._config.service)
        except Exception:
            logger.exception("claim failed; retrying after the idle poll")
            return []
        for step in claimed:
            self._leases[step.claim_token] = lease_until
        self.stats.claims += 1
        self.stats.empty_claims += not claimed
        self.stats.claimed += len(claimed)
        for step in claimed:
            # A cancel heard while this claim was under way may name its steps already.
            self._stops.start(step, claimed_since=since)
        if claimed:
            # Their steps are RUNNING now: what a progress stream of those runs shows, and of
            # their parents (a fan-out's running children).
            await self._tell(claimed)
        return claimed

    async def _tell(self, changed: Iterable[ClaimedStep]) -> None:
        """Publish that the runs of these steps changed, with their parents: a child's step
        that starts, waits or ends moves its parent's fan-out progress (running, waiting). A
        set insertion per step; `RunEvents` coalesces the messages."""
        if self._run_events is not None:
            await self._run_events.changed(runs_and_parents(changed))

    def _start(self, group: asyncio.TaskGroup, step: ClaimedStep) -> None:
        self._in_flight[step.claim_token] = step
        task = group.create_task(self._execute(step), name=f"step:{step.run_id}/{step.vertex_id}")
        self._running.add(task)
        task.add_done_callback(self._step_done)

    def _step_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._slot_freed.set()

    async def _execute(self, step: ClaimedStep) -> None:
        try:
            workflow = await self._workflow(step)
            stop = self._stops.signal(step.claim_token)
            result, lines = await executor.execute(
                step, workflow, self._deps, stop=stop, worker=self._config.service
            )
        except asyncio.CancelledError:
            self._abandoned.append(step.claim_token)  # given back by `_drain`
            raise
        except Exception:
            # The store was unreachable while loading the definition: leave the claim; its
            # lease expires and the step runs again.
            logger.exception("could not execute %s/%s", step.run_id, step.vertex_id)
            self._release(step.claim_token)
            self._slot_freed.set()
            return
        vertex = workflow.vertices.get(step.vertex_id)
        kind = worker_metrics.UNKNOWN_VERTEX if vertex is None else vertex.type.value
        await self._done.put((result, lines, kind))

    async def _workflow(self, step: ClaimedStep) -> Workflow:
        version = await self._store.get_version(step.workflow_name, step.workflow_version)
        return version.workflow

    # ── recording ───────────────────────────────────────────────────────────────────────────

    async def _flusher(self) -> None:
        while True:
            first = await self._done.get()
            batch = [] if first is None else [first]
            while len(batch) < FLUSH_BATCH_MAX and not self._done.empty():
                item = self._done.get_nowait()
                if item is not None:
                    batch.append(item)
            if batch:
                await self._flush(batch)
            if self._closing.is_set() and self._done.empty() and not self._running:
                return

    def _release(self, claim_token: str) -> ClaimedStep | None:
        """The step is no longer held: its result is written, dropped, or left to its lease."""
        self._stops.end(claim_token)
        self._leases.pop(claim_token, None)
        return self._in_flight.pop(claim_token, None)

    async def _flush(self, batch: list[Finished]) -> None:
        # An abandoned step has nothing to record but its lines (its claim is gone).
        results = [result for result, _, _ in batch if not isinstance(result, StepAbandoned)]
        abandoned = [result for result, _, _ in batch if isinstance(result, StepAbandoned)]
        lines = [line for _, step_lines, _ in batch for line in step_lines]
        self._recording = {result.step.claim_token for result in results}
        try:
            report, results = await self._record(results, lines)
        finally:
            self._recording = set()
        for ended in [*results, *abandoned]:
            self._release(ended.step.claim_token)
        self._slot_freed.set()
        if report is None:
            return
        await self._stop_failed_runs(report)
        await self._give_back_held([a for a in abandoned if a.reason in CLAIM_KEPT])
        now = self._deps.clock.now()
        self._drop_past_due(now)
        for result in results:
            due = _due_at(result)
            if due is None or result.step.step_id in report.dropped:
                continue
            if not self._due or due < self._due[0]:
                self._due_earlier.set()
            if due > now:  # one already due needs the wake-up above, not a place in the heap
                heapq.heappush(self._due, due)
        self._count_finished(batch, report)
        self.stats.flushes += 1
        self.stats.recorded += report.recorded
        self.stats.dropped += len(report.dropped)
        self.stats.abandoned += len(abandoned)
        self.stats.finished_runs.extend(report.finished_runs)
        if report.dropped:
            logger.warning("dropped %d late results (claims expired)", len(report.dropped))
        _log_failed_runs(results, report)
        if report.changed_runs and self._run_events is not None:
            finished = [run_id for run_id, _ in report.finished_runs]
            await self._run_events.changed(report.changed_runs, finished)
        if report.newly_ready:
            await self._wakeups.notify()

    async def _stop_failed_runs(self, report: CompletionReport) -> None:
        """A FAILED run starts no new attempt of its other steps, here or in another worker
        (docs/architecture.md, 'Terminal failures')."""
        failed = frozenset(run for run, status in report.finished_runs if status == "FAILED")
        if not failed:
            return
        if self._cancellations is None:
            self._stops.runs_failed(failed)
        elif not await self._cancellations.announce_failed(failed):
            logger.warning("could not tell other workers that %d runs failed", len(failed))

    async def _give_back_held(self, stopped: list[StepAbandoned]) -> None:
        """Steps stopped because their run failed still hold their claims: give them back at
        once, held (PENDING) while the run stays FAILED, for the operator's retry to run."""
        if not stopped:
            return
        try:
            await self._store.give_back(
                [a.step.claim_token for a in stopped], why=HELD_BACK, lost=LOST_RUN_FAILED
            )
        except Exception as error:
            # Their leases expire instead, and the reaper holds them back the same way.
            logger.warning("could not give back %d claims (%s)", len(stopped), error)
            return
        await self._tell(a.step for a in stopped)

    async def _record(
        self, results: list[StepResult], lines: list[LogLine]
    ) -> tuple[CompletionReport | None, list[StepResult]]:
        """Write the results (and lines), trying again with a pause that doubles up to
        `FLUSH_RETRY_MAX_PAUSE_S` while the database fails. A result is kept for as long as
        its claim surely holds (until `RECORD_MARGIN_FRACTION` of the lease before it ends;
        the renewer extends that while the database answers): a completed call then costs
        no second call. Results whose claims are about to end are given up (released here:
        their leases expire and the steps run again). Answers the report (None when nothing
        was written) and the results it covers."""
        margin = self._config.lease_s * RECORD_MARGIN_FRACTION
        pending, tries, began = results, 0, time.monotonic()
        while True:
            try:
                report = await self._store.complete(pending, lines)
            except Exception as error:
                tries += 1
                now = self._deps.clock.now()
                ends = [self._leases.get(r.step.claim_token, 0.0) - margin for r in pending]
                if not store_unreachable(error) and tries >= FLUSH_RETRY_LIMIT:
                    ends = [now] * len(pending)  # refused, not an outage: give up all
                keep_s = max(ends, default=now) - now
                logger.exception(
                    "recording %d results failed (try %d); retrying for up to %.0f s more",
                    len(pending),
                    tries,
                    max(0.0, keep_s),
                )
                pause = min(0.1 * 2.0 ** (tries - 1), FLUSH_RETRY_MAX_PAUSE_S)
                kept: list[StepResult] = []
                given_up: list[StepResult] = []
                for result, end in zip(pending, ends, strict=True):
                    (kept if end > now + pause else given_up).append(result)
                if given_up or (not pending and tries >= FLUSH_RETRY_LIMIT):
                    self._give_up(given_up, tries)
                    pending = kept
                    if not pending:
                        return None, []
                await asyncio.sleep(pause)
                continue
            if tries:
                logger.info(
                    "recorded %d results after %d failed tries (%.1f s)",
                    len(pending),
                    tries,
                    time.monotonic() - began,
                )
            return report, pending

    def _give_up(self, results: list[StepResult], tries: int) -> None:
        """Stop keeping results whose claims are about to end: the steps run again."""
        for result in results:
            self._release(result.step.claim_token)
        if results:
            logger.warning(
                "gave up recording %d results after %d tries: their leases end within %.0f s; "
                "once they do, the steps run again (their calls are sent again)",
                len(results),
                tries,
                self._config.lease_s * RECORD_MARGIN_FRACTION + FLUSH_RETRY_MAX_PAUSE_S,
            )

    def _count_finished(self, batch: list[Finished], report: CompletionReport) -> None:
        """The batch's steps in the worker's metrics, by vertex type and outcome: a few
        `inc`s per flush, whatever its size."""
        dropped = set(report.dropped)
        self._deps.metrics.steps_finished(
            (
                kind,
                "dropped"
                if result.step.step_id in dropped
                else worker_metrics.step_outcome(result),
            )
            for result, _, kind in batch
        )

    # ── leases ──────────────────────────────────────────────────────────────────────────────

    async def _every(
        self,
        period_s: float,
        action: Callable[[], Awaitable[None]],
        *,
        start_to_start: bool = False,
        first_s: float | None = None,
    ) -> None:
        """Run `action` every `period_s`, one at a time: `period_s` after the last one ended,
        or with `start_to_start` after it started (a long action, run retention's pass, is
        followed by the next one sooner). The first run is `first_s` after the start (by
        default `period_s`)."""
        wait_s = period_s if first_s is None else first_s
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._closing.wait()
            if self._closing.is_set():
                return
            started = time.monotonic()
            try:
                await action()
            except Exception:
                logger.exception("%s failed; trying again next period", action.__name__)
            wait_s = period_s
            if start_to_start:
                wait_s = max(period_s - (time.monotonic() - started), 0.0)

    async def _renew(self) -> None:
        if self._in_flight:
            tokens = list(self._in_flight)
            recording = set(self._recording)
            lease_until = self._deps.clock.now() + self._config.lease_s
            renewed = await self._store.renew(tokens, self._config.lease_s)
            if renewed < len(tokens):
                # Some claims are gone (cancelled, or expired), or were being recorded (on
                # PostgreSQL a flush's rows are skipped, so under load this read comes most
                # periods): it tells which, so a step whose cancel was not announced here
                # (Redis down, a message lost) still sends nothing more.
                try:
                    lost = await self._store.lost_claims(tokens)
                    self._stops.claims_lost(lost)
                except Exception:
                    # A safety net's failure must not cost the admission waits' display;
                    # the next period reads again.
                    logger.exception("reading which claims are gone failed")
                    lost, tokens = {}, []
                # A row being recorded may have been skipped: its lease is not known renewed.
                tokens = [t for t in tokens if t not in lost and t not in recording]
            for token in tokens:
                if token in self._leases:
                    self._leases[token] = lease_until
        await self._show_admission_waits()

    async def _renew_slots(self) -> None:
        """The admission slots of the calls under way last as long as their steps' leases.
        A task of its own: a database that stalls the steps' renewal must not let the slots
        expire under calls still running."""
        if self._deps.admission is None:
            return
        try:
            lost = await self._deps.admission_tickets.renew(self._deps.admission)
        except COORDINATION_ERRORS as error:
            logger.warning(
                "could not renew admission slots (%s); they expire unless renewed", error
            )
            return
        if lost:
            logger.warning("%d calls under way lost their admission slot's lease", lost)

    async def _show_admission_waits(self) -> None:
        """Record on the steps that have waited for an admission slot for a while that they
        do, and clear it from those that no longer wait (their result clears it too)."""
        waits = self._deps.admission_waits.since(time.monotonic() - ADMISSION_WAIT_SHOWN_S)
        over = [t for t in self._shown_waits if t not in waits and t in self._in_flight]
        new = {t: d for t, d in waits.items() if t not in self._shown_waits}
        if new or over:
            await self._store.mark_admission_waits(new, over)
            await self._tell(self._in_flight[t] for t in [*new, *over] if t in self._in_flight)
        self._shown_waits = set(waits)

    async def _analyze(self) -> None:
        await self._store.analyze()

    async def _expire_payloads(self) -> None:
        """Delete the payloads past retention, a batch per transaction, while batches come
        back full (at most `PAYLOAD_EXPIRY_BATCHES`). Every worker does it: two deleting at
        once take different chunks, or find them gone."""
        chunks = size = 0
        for _ in range(PAYLOAD_EXPIRY_BATCHES):
            if self._closing.is_set():
                break
            deleted, freed = await self._store.delete_expired_payloads(
                self._config.payload_retention_s,
                limit=PAYLOAD_EXPIRY_BATCH,
                max_bytes=PAYLOAD_EXPIRY_BATCH_BYTES,
            )
            chunks += deleted
            size += freed
            # A batch that reached a bound (its chunks, or half its bytes: the next chunk may
            # not have fitted) may have left more behind; one more read tells.
            full = deleted >= PAYLOAD_EXPIRY_BATCH or freed >= PAYLOAD_EXPIRY_BATCH_BYTES // 2
            if not deleted or not full:
                break
        if chunks:
            logger.info(
                "payload retention: deleted %d chunks (%d bytes) of runs ended over %g s ago",
                chunks,
                size,
                self._config.payload_retention_s,
            )

    async def _purge_runs(self) -> None:
        await run_retention.purge_pass(
            self._store, self._config.run_retention_s, closing=self._closing
        )

    async def _reap(self) -> None:
        requeued = await self._store.requeue_expired()
        if requeued:
            self.stats.requeued += len(requeued)
            self._deps.metrics.leases_expired(len(requeued))
            logger.warning(
                "requeued %s whose lease expired",
                plural(len(requeued), "step"),
                extra={"event": "step.lease_expired", "steps": len(requeued)},
            )
            await self._wakeups.notify()
            await self._tell_requeued(requeued)
        # The first look, as the worker starts, covers every run: a step stranded while no
        # worker reaped would be past the window by now.
        released = await self._store.release_stranded(every_run=not self._reaped)
        self._reaped = True
        if released:
            logger.warning("released %s of reopened runs", plural(len(released), "held step"))
            await self._wakeups.notify()
            await self._tell_requeued(released)

    async def _tell_requeued(self, requeued: Sequence[tuple[int, str, str]]) -> None:
        """Requeued or released steps are READY (or held back) again: their runs changed, and
        their parents' running children. Rare (a worker died, a race with a reopen), so the
        parents cost one read."""
        if self._run_events is not None:
            run_ids = {run_id for _, run_id, _ in requeued}
            await self._run_events.changed(await self._store.with_parents(run_ids))

    def hurry(self) -> None:
        """Stop waiting for in-flight steps: once stopping, cancel them at once and give
        their claims back (`schemabridge run` interrupted: the user wants the prompt back)."""
        self._hurry.set()

    async def _drain(self) -> None:
        if not self._running:
            return
        pending = set(self._running)
        if not self._hurry.is_set():
            hurry = asyncio.ensure_future(self._hurry.wait())
            all_done = asyncio.ensure_future(asyncio.wait(pending))
            try:
                await asyncio.wait(
                    {hurry, all_done},
                    timeout=self._config.shutdown_grace_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                hurry.cancel()
                all_done.cancel()  # stops the waiting only; the steps go on until cancelled
        still_running = {task for task in pending if not task.done()}
        for task in still_running:
            task.cancel()
        if still_running:
            await asyncio.wait(still_running)
            await self._give_back()

    async def _give_back(self) -> None:
        """The claims of the steps cancelled while stopping go back to READY at once, so
        another worker (or the next start) runs them without waiting for their leases."""
        tokens, self._abandoned = self._abandoned, []
        abandoned = [step for token in tokens if (step := self._release(token))]
        try:
            given = await self._store.give_back(tokens)
        except Exception as error:
            logger.warning(
                "could not give back %d claims (%s); their leases expire instead",
                len(tokens),
                error,
            )
            return
        await self._tell(abandoned)
        # A warning: the calls those steps had on the wire are sent again by whoever claims
        # them (with the same Idempotency-Key), which an operator wants to see in the logs.
        logger.warning(
            "stopping: %d in-flight steps did not end within the %s grace; cancelled and given "
            "back for another worker, which sends their calls again (same Idempotency-Key)",
            given,
            duration(self._config.shutdown_grace_s),
            extra={"event": "step.given_back", "steps": given},
        )


def _log_failed_runs(results: list[StepResult], report: CompletionReport) -> None:
    """One line per run this flush failed, what an operator acts on; the children of one
    parent that failed in the same flush share one line (a fan-out against a failing
    destination would otherwise write a line per child: thousands)."""
    failed = {run_id for run_id, status in report.finished_runs if status == "FAILED"}
    children: dict[str, list[StepFailed]] = {}
    for result in results:
        if isinstance(result, StepFailed) and result.retry_at is None:
            step = result.step
            if step.run_id not in failed:
                continue
            failed.discard(step.run_id)
            if step.parent_run_id is not None:
                children.setdefault(step.parent_run_id, []).append(result)
                continue
            kind = str(result.error.get("kind", "unknown"))
            logger.warning(
                "run %s failed at %s: %s: %s",
                step.run_id,
                step.vertex_id,
                kind,
                message_excerpt(str(result.error.get("message", ""))),
                extra={
                    "event": "run.failed",
                    "run_id": step.run_id,
                    "vertex": step.vertex_id,
                    "kind": kind,
                },
            )
    for parent, ended in children.items():
        _log_failed_children(parent, ended)


def _log_failed_children(parent: str, ended: list[StepFailed]) -> None:
    first = ended[0]
    kinds = Counter(str(result.error.get("kind", "unknown")) for result in ended)
    if len(ended) == 1:
        what = f"child run {first.step.run_id} of run {parent} failed"
    else:
        what = f"{len(ended)} child runs of run {parent} failed"
    logger.warning(
        "%s (%s); the first at %s: %s",
        what,
        ", ".join(f"{count} {kind}" for kind, count in kinds.most_common()),
        first.step.vertex_id,
        message_excerpt(str(first.error.get("message", ""))),
        extra={
            "event": "run.failed",
            "run_id": first.step.run_id,
            "parent_run_id": parent,
            "children_failed": len(ended),
            "vertex": first.step.vertex_id,
            "kind": str(first.error.get("kind", "unknown")),
        },
    )


def runs_and_parents(changed: Iterable[ClaimedStep]) -> set[str]:
    """The runs of these steps and the parents of those that are children."""
    ids: set[str] = set()
    for step in changed:
        ids.add(step.run_id)
        if step.parent_run_id is not None:
            ids.add(step.parent_run_id)
    return ids


def _due_at(result: StepResult | StepAbandoned) -> float | None:
    """When a recorded result makes its step claimable again (parked or redispatched)."""
    if isinstance(result, StepParked):
        return result.not_before
    if isinstance(result, StepFailed):
        return result.retry_at
    return None


async def _first(
    awaitable: Awaitable[object],
    stop_wait: asyncio.Future[Any],
    timeout_s: float,
    *also: Awaitable[object],
) -> None:
    """Wait for `awaitable` (or any of `also`), the stop signal or the timeout, whichever
    comes first."""
    tasks = {asyncio.ensure_future(a) for a in (awaitable, *also)}
    try:
        await asyncio.wait({*tasks, stop_wait}, timeout=timeout_s, return_when="FIRST_COMPLETED")
    finally:
        for task in tasks:
            task.cancel()
