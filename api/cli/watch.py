"""Following a run live from the API's event stream (`GET /runs/{id}/events`) until it ends:
`runs watch`, and `runs submit --wait`.

The stream sends the run's progress whenever it changes and `end` once it has ended. A stream
also closes on its own after an hour, and the connection may break (the API crashed, a
proxy timed out): the watcher reconnects, and gives up only when the API stays unreachable
longer than its `Reconnect` bounds (`api.cli.reconnect`: a time window and a count of tries,
with backoff). Each outage is one warning line on stderr when it begins and one when it ends.
An API process that stops on purpose (a rolling restart) says `stopping` first: that is one
calm line (`RESTARTING_LINE`), not a warning, and a restart's own bounds, not the outage's.
On a terminal the progress is redrawn in place; piped, it is one line per change at most
every `PIPED_INTERVAL_S` (and at every status change), never the same line twice in a row.
Both say why work waits: each waiting step's reason, and for a fan-out the most common reason
its children wait (`8 children waiting: tenant acme is at its rate limit …`), from the
progress's `fanout.waiting`, and which running children a worker presumed dead holds until
their leases end (`fanout.presumedDead`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.fanout_words import held_lines, running_words
from api.cli.reconnect import RESTARTING_LINE, Reconnect
from api.cli.remote import say, status_text
from api.cli.run_display import children_waiting_line, error_line, waiting_line
from api.cli.run_options import ENDED
from api.cli.text import clock
from schemas.durations import duration

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import RunProgress, Waiting

MAX_STREAMS = 10_000
"""Streams one watch may open (each lasts up to an hour, or until it breaks)."""
PIPED_INTERVAL_S = 2.0
DONE_STEPS = frozenset({"SUCCEEDED", "RESOLVED", "SKIPPED"})


class ApiStopping(Exception):
    """The API process a stream was read from said it stops (`event: stopping`: a rolling
    restart); the stream closes next."""


class StillRunning(Exception):
    """`--timeout` ran out before the run ended; `progress` is the last state seen."""

    def __init__(self, progress: RunProgress | None) -> None:
        super().__init__("still running")
        self.progress = progress


@dataclass(frozen=True)
class Snapshot:
    """The latest progress of the run."""

    progress: RunProgress

    @classmethod
    def of(cls, data: Any) -> Snapshot:
        from api.cli.wire import RunProgress  # loaded with the client that read `data`

        return cls(RunProgress.model_validate(data))

    @property
    def waiting(self) -> dict[str, Waiting]:
        """Why steps wait, by vertex, when the API says so."""
        return {s.vertex_id: s.waiting for s in self.progress.steps if s.waiting is not None}

    def steps_done(self) -> int:
        return sum(1 for step in self.progress.steps if step.status in DONE_STEPS)

    def summary(self) -> str:
        """One line: status, steps, children and what waits."""
        progress = self.progress
        parts = [progress.status, f"steps {self.steps_done()}/{len(progress.steps)}"]
        fanout = progress.fanout
        if fanout.total:
            ended = fanout.succeeded + fanout.failed + fanout.cancelled
            parts.append(
                f"children {ended:,}/{fanout.total:,} ({fanout.failed:,} failed, "
                f"{running_words(fanout)})"
            )
        now = time.time()
        parts += [f"{vertex}: {waiting_line(w, now)}" for vertex, w in self.waiting.items()]
        children = children_waiting_line(fanout, now)
        if children is not None:
            parts.append(children)
        return "  ".join(parts + held_lines(fanout, now))


class LiveView:
    """The progress as a terminal shows it (rendered afresh at each refresh, so the elapsed
    time moves between events)."""

    def __init__(self, title: str, started: float) -> None:
        self.title = title
        self.started = started
        self.snapshot: Snapshot | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.render()

    def render(self) -> RenderableType:
        elapsed = duration(time.monotonic() - self.started)
        head = Text(f"{self.title}  ", style="bold")
        if self.snapshot is None:
            return Group(head + Text(f"connecting… {elapsed}"))
        progress = self.snapshot.progress
        head.append_text(status_text(progress.status))
        head.append(f"  watching for {elapsed}")
        grid = Table.grid(padding=(0, 2))
        for _ in range(3):
            grid.add_column()
        steps = len(progress.steps)
        running = [s.vertex_id for s in progress.steps if s.status in {"RUNNING", "PARKED"}]
        grid.add_row(
            "steps",
            ProgressBar(total=max(steps, 1), completed=self.snapshot.steps_done(), width=30),
            f"{self.snapshot.steps_done()}/{steps}"
            + (f"  running {', '.join(running)}" if running else ""),
        )
        fanout = progress.fanout
        if fanout.total:
            ended = fanout.succeeded + fanout.failed + fanout.cancelled
            grid.add_row(
                "children",
                ProgressBar(total=fanout.total, completed=ended, width=30),
                f"{ended:,}/{fanout.total:,}  {fanout.failed:,} failed, "
                f"{running_words(fanout)}, {fanout.waiting_count:,} waiting",
            )
        now = time.time()
        lines = [
            Text(f"  {vertex}: {waiting_line(waiting, now)}", style="yellow")
            for vertex, waiting in self.snapshot.waiting.items()
        ]
        children = children_waiting_line(fanout, now)
        if children is not None:
            lines.append(Text(f"  {children}", style="yellow"))
        lines += [Text(f"  {line}", style="yellow") for line in held_lines(fanout, now)]
        return Group(head, grid, *lines)


class PipedView:
    """The progress as lines, for a log or a pipe: at status changes and at most every
    `PIPED_INTERVAL_S` otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.last_status: str | None = None
        self.last_line = ""
        self.last_at = 0.0

    def show(self, snapshot: Snapshot) -> None:
        now = time.monotonic()
        line = snapshot.summary()
        if line == self.last_line:
            return  # a new stream starts with the progress the last one ended on
        changed = snapshot.progress.status != self.last_status
        if changed or snapshot.progress.ended or now - self.last_at >= PIPED_INTERVAL_S:
            self.console.print(f"{clock(time.time())[:8]}  {line}", markup=False)
            self.last_status = snapshot.progress.status
            self.last_line = line
            self.last_at = now


async def follow(
    api: ApiClient,
    run_id: str,
    *,
    timeout_s: float | None,
    console: Console,
    title: str,
    quiet: bool = False,
    reconnect: Reconnect | None = None,
) -> RunProgress:
    """Follow the run until it ends and answer its last progress. Raises `StillRunning` when
    `timeout_s` runs out first, `ApiFailure` when the run is unknown or the API is lost."""
    started = time.monotonic()
    live_view = LiveView(title, started)
    piped = PipedView(console)
    latest: Snapshot | None = None

    def seen(snapshot: Snapshot) -> None:
        nonlocal latest
        latest = snapshot
        live_view.snapshot = snapshot
        if not quiet and not console.is_terminal:
            piped.show(snapshot)

    live = Live(live_view, console=console, refresh_per_second=4, transient=False)
    use_live = console.is_terminal and not quiet
    try:
        if use_live:
            live.start()
        async with asyncio.timeout(timeout_s):
            return await _stream(api, run_id, seen, reconnect or Reconnect())
    except TimeoutError:
        raise StillRunning(None if latest is None else latest.progress) from None
    finally:
        if use_live:
            live.stop()


async def _stream(
    api: ApiClient, run_id: str, seen: Callable[[Snapshot], None], reconnect: Reconnect
) -> RunProgress:
    """Read the run's streams until one says it ended. A stream that ends early (an hour
    passed, the API stopped, the connection dropped, the API answered 5xx or said `error`)
    is opened again under `reconnect`'s bounds; progress events are whole snapshots, so a
    new stream repeats nothing and misses nothing."""
    for _ in range(MAX_STREAMS):
        try:
            ended = await _one_stream(api, run_id, seen, reconnect)
        except ApiFailure as failure:
            delay = reconnect.delay_after(failure)
            if delay is None:
                raise reconnect.gave_up(failure, f"schemabridge runs watch {run_id}") from None
            if reconnect.attempts == 1 and not reconnect.restarting:
                say(reconnect.lost_line(failure))
            await asyncio.sleep(delay)
            continue
        except ApiStopping:
            # Reconnect at once: behind a load balancer another process answers; else the
            # tries back off, unannounced, until one is back.
            reconnect.stopped()
            say(RESTARTING_LINE)
            continue
        if ended is not None:
            return ended
    raise ApiFailure(
        f"gave up watching run {run_id} after {MAX_STREAMS:,} streams", ExitCode.UNREACHABLE
    )


async def _one_stream(
    api: ApiClient, run_id: str, seen: Callable[[Snapshot], None], reconnect: Reconnect
) -> RunProgress | None:
    """One stream: the run's last progress when it ended, None when the stream closed first;
    `ApiStopping` when the API said it stops. A stream that closed before saying anything
    counts as a failure (a server that keeps doing so must not be reconnected to for ever)."""
    heard = False
    async with api.runs.events(run_id) as events:
        async for event in events:
            if event.name == "error":
                # The API could not read the run (its database, for a moment): read it again.
                message = "the API could not read the run"
                if isinstance(event.data, dict):
                    message += f": {event.data.get('message') or event.data.get('code')}"
                raise ApiFailure(message, ExitCode.UNREACHABLE, transient=True)
            if event.name == "stopping":
                raise ApiStopping
            if event.name not in {"progress", "end"}:
                continue
            if not heard:
                heard = True
                lasted = reconnect.recovered()
                if lasted is not None:
                    say(f"reconnected to the API after {duration(lasted)}")
            snapshot = Snapshot.of(event.data)
            seen(snapshot)
            if event.name == "end" or snapshot.progress.status in ENDED:
                return snapshot.progress
    if not heard:
        raise ApiFailure(
            "the API closed the event stream before sending anything",
            ExitCode.UNREACHABLE,
            transient=True,
        )
    return None


def outcome_line(run_id: str, progress: RunProgress) -> str:
    """The last line of a watch: how the run ended."""
    if progress.status == "SUCCEEDED":
        return f"run {run_id} SUCCEEDED"
    if progress.status == "FAILED":
        return f"run {run_id} FAILED: {error_line(progress.error)}"
    return f"run {run_id} {progress.status}"


def outcome_code(progress: RunProgress) -> ExitCode:
    return ExitCode.OK if progress.status == "SUCCEEDED" else ExitCode.FAILED


def still_running_line(run_id: str, timeout_s: float, progress: RunProgress | None) -> str:
    status = "still going" if progress is None else f"still {progress.status}"
    return (
        f"run {run_id} is {status} after --timeout {duration(timeout_s)}; it goes on: "
        f"follow it with `schemabridge runs watch {run_id}`"
    )
