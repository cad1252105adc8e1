"""Run retention for operators: count or delete now the root runs that ended before a moment,
with their whole tree, in the workers' bounded batches (docs/architecture.md, 'Run
retention'). `schemabridge runs purge` calls it; the workers' automatic pass is
`engine.execution.run_retention`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from engine.execution import run_retention
from engine.runtime import Runtime
from engine.store.models import AuditAction, AuditSubject
from engine.store.records import RunsPurged
from schemas.errors import InvalidRequest


@dataclass(frozen=True)
class PurgeOutcome:
    """What a purge deleted (or, for a dry run, would delete) of the runs ended before
    `ended_before` (epoch seconds)."""

    ended_before: float
    dry_run: bool
    roots: int
    children: int
    steps: int
    log_lines: int
    payload_chunks: int

    def sentence(self) -> str:
        """'deleted 1,204 runs (3 roots, 1,201 children), 2,410 steps, … ended before …'"""
        counts = RunsPurged(
            self.roots, self.children, self.steps, self.log_lines, self.payload_chunks
        )
        if not counts.runs:  # children alone: a worker's pass took their root meanwhile
            return f"nothing to delete: no run tree ended before {iso_time(self.ended_before)}"
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"{verb} {run_retention.describe(counts)} of runs ended before "
            f"{iso_time(self.ended_before)}"
        )


def iso_time(epoch: float) -> str:
    """`2026-12-01T09:30:00Z`."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RetentionOperations:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def purge(self, ended_before: float, *, dry_run: bool, actor: str | None) -> PurgeOutcome:
        """Delete now (or only count, `dry_run`) every root run that ended before
        `ended_before` with its tree, as the workers' passes would (the same exceptions: an
        unfinished tree, a running deployment's runs). A moment still to come is refused:
        every run ended so far would go. A purge that deleted something is an audit event of
        `actor` (`runs.purged`, subject `runs`, the cutoff and the counts in `detail`)."""
        store = self._runtime.store
        if ended_before > store.cutoff(0):
            raise InvalidRequest(
                f"--ended-before {iso_time(ended_before)} is still to come: give a span back "
                "from now (30d) or a past time"
            )
        if dry_run:
            counts = await store.count_ended_runs(ended_before)
        else:
            counts = await run_retention.purge_until_done(store, ended_before)
        if counts.runs and not dry_run:
            await store.append_alone(
                actor=actor,
                action=AuditAction.RUNS_PURGED,
                subject=AuditSubject.RUNS,
                subject_id=iso_time(ended_before),
                detail={
                    "endedBefore": ended_before,
                    "roots": counts.roots,
                    "children": counts.children,
                    "steps": counts.steps,
                    "logLines": counts.log_lines,
                    "payloadChunks": counts.payload_chunks,
                },
            )
        return PurgeOutcome(
            ended_before,
            dry_run,
            counts.roots,
            counts.children,
            counts.steps,
            counts.log_lines,
            counts.payload_chunks,
        )
