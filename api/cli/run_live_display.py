"""What `schemabridge run` shows: the live progress with why work waits, and the final answer.

Live (stderr): one bar for the run's steps, one for its children once it fans out, and under
them one line per reason work is waiting, from the steps' `waiting` (docs/architecture.md,
'Why a step waits'): `call: redispatch 2/3 in 9 s after …`, `997 children: tenant default is
at its rate limit (1000/1000 GATEWAY steps a minute) … next try in 3 s`. The children's bar
says of its running ones how many a worker presumed dead holds, and a line per such worker
says until when, in `runs watch`'s words (`api.cli.fanout_words`): children held by a worker
of the same database that died are running in name only until their leases end. While the
database does not answer, a line says so and the display keeps polling.

Final (stdout): `--output text` (default) is a screenful — the status, the duration, the
steps and children by status, the output's size (or itself when it is short), and for a
failure the failed step's kind, message, HTTP status, body excerpt and every request it sent
across its redispatches, plus the first failed children. `--output json` prints the whole run
(steps without their attempt histories) for scripts.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from api.cli.fanout_words import held_lines, running_words
from schemas.errors import children_hint
from schemas.waiting import reason_words, wait_text

if TYPE_CHECKING:
    from engine.operations.views import ErrorView, RunDetail, RunProgress, RunSummary, StepView

OUTPUT_INLINE_CHARS = 300
"""A run output up to this long (as compact JSON) is printed in the summary itself."""
FIRST_FAILURES = 3
DONE = frozenset({"SUCCEEDED", "RESOLVED", "SKIPPED"})


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 attempt`, `2 attempts` (`words`: an irregular plural, `1 child`, `2 children`)."""
    return f"{count} {word}" if count == 1 else f"{count} {words or word + 's'}"


def describe_wait(reason: str, message: str, until: float | None, now: float) -> str:
    """One waiting reason as a person reads it, with the countdown to `until`."""
    left = None if until is None else max(0, round(until - now))
    if reason == "redispatch" and message.startswith("redispatch "):
        # "redispatch 2/3 after …" → "redispatch 2/3 in 9 s after …"
        head, _, rest = message.partition(" after ")
        countdown = f" in {left} s" if left is not None else ""
        return f"{head}{countdown} after {rest}" if rest else f"{head}{countdown}"
    if reason == "breaker_open":
        # Its countdown is in the wording; a group of children that share no words gets the
        # reason's own ("breaker open"), not a line ending in ": ".
        return wait_text(reason, message, until, now) or reason_words(reason)
    text = message or reason_words(reason)
    if reason == "tenant_rate_limit":
        text += "; or rerun with --tenant-rate N"
    if left is not None:
        text += f" (next try in {left} s)"
    return text


def waiting_lines(progress: RunProgress, now: float) -> list[str]:
    """Why the run's work waits: its own steps', then its children's by reason."""
    lines = [
        f"{step.vertex_id}: {describe_wait(w.reason, w.message, w.until, now)}"
        for step in progress.steps
        if (w := step.waiting) is not None
    ]
    lines += [
        f"{plural(g.children, 'child', 'children')}: "
        + describe_wait(g.reason, g.message, g.until, now)
        for g in progress.fanout.waiting
    ]
    return lines


class LiveView:
    """The bars and the waiting lines, redrawn from each `RunProgress`."""

    def __init__(self, workflow: str, steps: int) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        self._steps = self.progress.add_task(f"{workflow} steps", total=steps, detail="")
        self._children: TaskID | None = None
        self._notes = Text()

    def renderable(self) -> Group:
        return Group(self.progress, self._notes) if self._notes else Group(self.progress)

    def show(self, current: RunProgress) -> None:
        done = sum(1 for s in current.steps if s.status in DONE)
        running = [s.vertex_id for s in current.steps if s.status in {"RUNNING", "PARKED"}]
        detail = current.status if current.ended else ("running " + ", ".join(running))
        self.progress.update(
            self._steps, completed=done, detail=detail if running or current.ended else ""
        )
        fanout = current.fanout
        if fanout.total:
            if self._children is None:
                self._children = self.progress.add_task("children", total=fanout.total, detail="")
            ended = fanout.succeeded + fanout.failed + fanout.cancelled
            summary = f"{fanout.failed} failed, {running_words(fanout)}"
            self.progress.update(
                self._children, total=fanout.total, completed=ended, detail=summary
            )
        now = time.time()
        self.note(waiting_lines(current, now), held_lines(fanout, now))

    def note(self, lines: list[str], held: list[str] | None = None) -> None:
        """`lines` of why work waits, then `held`: the children a dead worker holds (not a
        wait of theirs: running in name only until their leases end)."""
        said = [f"  waiting: {line}" for line in lines] + [f"  {line}" for line in held or []]
        self._notes = Text("\n".join(said), style="yellow")


# ── the final answer ────────────────────────────────────────────────────────────────────────


def requests_sent(step: StepView) -> tuple[int, int]:
    """(HTTP requests sent, executions) of a step across its redispatches, from its history
    (attempts admission refused sent nothing; an execution lost with its worker is no
    request read, though its call may have been sent)."""
    sent = [a for a in step.history if a.refused is None and a.lost is None]
    executions = len({a.execution for a in step.history})
    return len(sent), executions


def _counts(statuses: list[str]) -> str:
    counted = Counter(statuses)
    return ", ".join(f"{n} {status.lower()}" for status, n in sorted(counted.items()))


def summary(run: RunDetail, failed_children: list[RunSummary]) -> str:
    """The screenful `--output text` prints."""
    took = ""
    if run.ended_at is not None:
        took = f" in {run.ended_at - run.created_at:.1f} s"
    lines = [f"{run.status} run {run.id} ({run.workflow} v{run.version}){took}"]
    lines.append(f"  steps:    {_counts([s.status for s in run.steps])}")
    fanout = run.fanout
    if fanout.total:
        lines.append(
            f"  children: {fanout.total} — {fanout.succeeded} succeeded, {fanout.failed} failed"
            + (f", {fanout.cancelled} cancelled" if fanout.cancelled else "")
        )
    if run.status == "SUCCEEDED":
        lines.append(_output_line(run.output))
    elif run.error is not None:
        lines += _failure_lines(run, _listed_below(run, run.error, failed_children))
    for child in failed_children:
        error = child.error
        what = f"{error.kind}: {error.message}" if error is not None else child.status
        lines.append(f"  failed child #{child.item_index} ({child.id}): {_one_line(what)}")
    if len(failed_children) == FIRST_FAILURES and fanout.failed > FIRST_FAILURES:
        lines.append(
            f"  … and {fanout.failed - FIRST_FAILURES} more failed children (list them with "
            f"`schemabridge runs children {run.id} --status FAILED` against a "
            "`schemabridge serve` on this database)"
        )
    return "\n".join(lines)


def _listed_below(run: RunDetail, error: ErrorView, failed_children: list[RunSummary]) -> ErrorView:
    """`error` without the `runs children` command a join's message ends with, when the
    summary lists those children itself: that command asks a running API, which a
    `schemabridge run` has not (against the default URL it could not connect)."""
    hint = children_hint(run.id)
    if not failed_children or not error.message.endswith(hint):
        return error
    return error.model_copy(update={"message": error.message.removesuffix(hint)})


def _why_executions(step: StepView) -> str:
    """Why a step ran more than once, as `runs show` counts it: executions lost with their
    worker (their call may have been sent) apart from the engine's redispatches; an
    operator's retry is neither, so it adds nothing here."""
    lost = sum(1 for attempt in step.history if attempt.lost is not None)
    said = [f"{lost:,} lost"] if lost else []
    if step.auto_retries:
        said.append(plural(step.auto_retries, "redispatch", "redispatches"))
    return f" ({', '.join(said)})" if said else ""


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _output_line(output: Any) -> str:
    text = json.dumps(output, separators=(",", ":"), default=str)
    if len(text) <= OUTPUT_INLINE_CHARS:
        return f"  output:   {text}"
    return f"  output:   {len(text):,} bytes of JSON (print it with --output json)"


def _failure_lines(run: RunDetail, error: ErrorView) -> list[str]:
    lines = [
        f"  vertex:   {error.vertex_id or '-'}",
        f"  kind:     {error.kind}",
        f"  message:  {_one_line(error.message, 300)}",
    ]
    step = next((s for s in run.steps if s.vertex_id == error.vertex_id), None)
    if error.http_status is not None:
        http = f"  http:     status {error.http_status}"
        if step is not None and step.history:
            sent, executions = requests_sent(step)
            http += f" after {plural(sent, 'request')}"
            if executions > 1:
                http += f" over {plural(executions, 'execution')}{_why_executions(step)}"
        elif error.attempts is not None:
            http += f" after {plural(error.attempts, 'attempt')}"
        lines.append(http)
    if error.body_excerpt:
        lines.append(f"  body:     {_one_line(error.body_excerpt, 300)}")
    if error.request is not None:
        lines.append(f"  sent:     {_one_line(f'{error.request.method} {error.request.url}', 300)}")
        if error.request.body_excerpt:
            lines.append(f"  payload:  {_one_line(error.request.body_excerpt, 300)}")
    return lines


def as_json(run: RunDetail) -> str:
    """The whole run for `--output json` (steps without their attempt histories)."""
    body = run.model_dump(mode="json", by_alias=True, exclude={"steps": {"__all__": {"history"}}})
    return json.dumps(body, indent=2)
