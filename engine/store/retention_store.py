"""The run-retention role of the store: delete root runs that ended before a cutoff with their
whole tree, a bounded batch per transaction (docs/architecture.md, 'Run retention');
statements in `engine.store.run_purge`."""

from __future__ import annotations

from collections.abc import Sequence

from engine.store import past_retention, run_purge
from engine.store.core import StoreCore
from engine.store.records import RunsPurged


class RunRetentionStore(StoreCore):
    """What the workers' retention pass and `schemabridge runs purge` need."""

    def cutoff(self, retention_s: float) -> float:
        """The end before which runs are past `retention_s`, by the store's clock (the one
        the operator actions refuse reopening a run by, `past_retention`)."""
        return past_retention.cutoff(self._clock.now(), retention_s)

    async def purge_ended_runs(
        self, ended_before: float, *, limit: int, retention_s: float | None
    ) -> RunsPurged:
        """Delete, in one short transaction, up to `limit` runs of the trees whose root ended
        before `ended_before` (descendants first, each root once its tree is gone), with their
        steps, log lines and payload chunks, marking each root it takes first as being deleted
        by the retention `retention_s` (None: an operator's purge; the actions refuse to
        reopen a marked tree). A read first, so a call with nothing to delete writes nothing.
        Safe to call from every worker at once (`run_purge.purge_batch`)."""
        async with self._engines.read.connect() as conn:
            if not await run_purge.any_due(conn, ended_before):
                return RunsPurged()
        mark = run_purge.PurgeMark(self._clock.now(), retention_s)
        async with self._engines.write.begin() as conn:
            return await run_purge.purge_batch(conn, ended_before, limit, mark)

    async def runs_gone(self, run_ids: Sequence[str]) -> set[str]:
        """Those of `run_ids` no run has (any more): what a view links to that retention
        deleted (a start over's `restarted_from`)."""
        async with self._engines.read.connect() as conn:
            return await run_purge.runs_gone(conn, run_ids)

    async def count_ended_runs(self, ended_before: float) -> RunsPurged:
        """What `purge_ended_runs` would delete, to the last batch, were it called now."""
        async with self._engines.read.connect() as conn:
            return await run_purge.count_due(conn, ended_before)
