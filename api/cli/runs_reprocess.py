"""`schemabridge runs reprocess RUN RUN ...`: the dead letters of several runs at once
(`POST /runs/reprocess`), each run reprocessed as it would be alone; a run whose reprocess
would reopen a SUCCEEDED run is skipped, as a batch retry skips such a child."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from api.cli.exit_codes import ExitCode
from api.cli.id_prefixes import full_run_id
from api.cli.remote import Remote, call, dump, print_json, say, stdout
from schemas.counts import plural

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import BatchReprocessResult


def reprocess_runs(remote: Remote, given: list[str]) -> None:
    """Reprocess each run of `given` (ids or prefixes, each resolved before anything is
    done); print what ran again and what was skipped, why; exit 1 when one was skipped."""

    async def batch(api: ApiClient) -> BatchReprocessResult:
        ids = [await full_run_id(api, run) for run in given]
        return await api.actions.batch_reprocess(ids)

    result = call(remote, batch)
    if remote.json:
        print_json(dump(result))
    else:
        for line in batch_reprocess_lines(result):
            stdout().print(line, markup=False)
        for warning in result.warnings:
            say(f"warning: {warning}")
    if result.skipped:
        raise typer.Exit(ExitCode.FAILED)


def batch_reprocess_lines(result: BatchReprocessResult) -> list[str]:
    """The runs reprocessed, each with its children that run again, then those skipped,
    each with the API's reason in words."""
    lines = []
    if result.reprocessed:
        children = plural(result.revived, "dead-lettered child runs", "dead-lettered children run")
        lines.append(f"reprocessed {plural(len(result.reprocessed), 'run')}: {children} again")
        for run in result.reprocessed:
            again = plural(run.revived, "child runs", "children run")
            lines.append(f"  {run.run_id}  {again} again; it is {run.status}")
    else:
        lines.append("nothing reprocessed")
    if result.skipped:
        lines.append(f"skipped {plural(len(result.skipped), 'run')}:")
        lines += [f"  {run.run_id}  {run.message or run.reason}" for run in result.skipped]
    return lines
