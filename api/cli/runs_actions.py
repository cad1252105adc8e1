"""`schemabridge runs retry | resolve | start-over | reprocess | cancel`: the operator actions
on the REST API (registered on the `runs` group by `api/cli/runs.py`).

Each prints what it did in one line (`--output json`: the API's answer). A run in a state the
action does not take is exit 1 with the run's state; an action that finds nothing to do where
repeating it is harmless (cancelling a cancelled run) is exit 0 and says so.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli import hints
from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.id_prefixes import full_run_id
from api.cli.remote import (
    ApiKeyOption,
    ApiUrlOption,
    DebugOption,
    OutputFormat,
    OutputOption,
    Remote,
    call,
    dump,
    fail,
    print_json,
    read_json_value,
    say,
    stderr,
    stdout,
)
from api.cli.run_options import (
    RouteOption,
    RunArgument,
    SinceOption,
    StatusOption,
    TenantOption,
    UntilOption,
    VersionOption,
    WorkflowOption,
    run_filter,
)
from api.cli.runs_reprocess import reprocess_runs
from api.cli.target import DEFAULT_API_URL
from schemas.batch_limits import DEFAULT_BATCH, MAX_BATCH
from schemas.counts import plural

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import (
        BatchRetryPreview,
        BatchRetryResult,
        CancelResult,
        ReprocessPreview,
        ReprocessResult,
        ResolveResult,
        RetryPreview,
        RetryResult,
        RunQuery,
        SkippedRun,
        SkippedRuns,
        StartOverPreview,
        StartOverResult,
        StepAgain,
        Wire,
    )


def _print(remote: Remote, result: Wire, line: str) -> None:
    if remote.json:
        print_json(dump(result))
    else:
        stdout().print(line, markup=False)


# ── retry ───────────────────────────────────────────────────────────────────────────────────


SKIP_WORDS = {
    "run_not_failed": "not FAILED",
    "run_not_found": "not found",
    "parent_succeeded": "under a SUCCEEDED run",
    "started_over": "started over",
    "deployment_run": "a deployment's own run",
    "run_past_retention": "being deleted",
}
"""A batch retry's skip reasons (the API's codes) as its summary line says them."""

SKIPPED_RUN_WORDS = {
    "run_not_failed": "not FAILED (it is {state}), not retried",
    "run_not_found": "not found",
    "deployment_run": "a deployment's own run, not retried (act on its deployment)",
}
"""Why a batch retry left one run alone, as its line says it: the API's `reason` is a code
for scripts, and its `state` alone read as the reason ("deployment_run: FAILED")."""


def skipped_run_words(run: SkippedRun) -> str:
    """One skipped run's reason in words: the short ones above, else the API's sentence
    (which says what to do instead: a run above has SUCCEEDED, the run was started over),
    else the code as it came (a reason this CLI does not know yet)."""
    words = SKIPPED_RUN_WORDS.get(run.reason)
    if words is not None and (run.state or "{state}" not in words):
        return words.format(state=run.state)
    return run.message or run.reason


def looked_for(
    status: str | None, named: Sequence[tuple[str, object | None]], all_runs: bool
) -> str:
    """What a batch retry's filter asked for, as given: `status FAILED, workflow W, version
    6` (`named`: each option's name and value, None when not given; root runs, as `runs
    list` shows them; `child runs too` with --all)."""
    parts = [f"status {(status or 'FAILED').upper()}"]
    parts += [f"{name} {value}" for name, value in named if value is not None]
    return ", ".join(parts + (["child runs too"] if all_runs else []))


def skip_counts(skipped: list[SkippedRun]) -> str:
    """The skipped runs counted by reason, most first: `2 not FAILED (1 RUNNING, 1
    SUCCEEDED), 1 not found`."""
    by_reason: dict[str, list[SkippedRun]] = {}
    for run in skipped:
        by_reason.setdefault(run.reason, []).append(run)
    parts = []
    for reason, runs in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        part = f"{len(runs):,} {SKIP_WORDS.get(reason, reason)}"
        states = Counter(run.state for run in runs if run.state)
        if states:
            part += f" ({', '.join(f'{n:,} {state}' for state, n in states.most_common())})"
        parts.append(part)
    return ", ".join(parts)


def batch_lines(result: BatchRetryResult, filter_text: str | None = None) -> list[str]:
    """What a batch retry did: the runs retried, then those skipped with their reasons
    counted. Nothing retried says so first, with what was looked for (`filter_text`, the
    filter's `looked_for`; None: the runs were named)."""
    skipped = len(result.skipped)
    if result.retried:
        lines = [f"retried {plural(len(result.retried), 'run')}"]
        lines += [f"  {run_id}" for run_id in result.retried]
        if skipped:
            lines.append(f"skipped {plural(skipped, 'run')}: {skip_counts(result.skipped)}")
    elif not skipped:
        looked = f" ({filter_text})" if filter_text else ""
        lines = [f"nothing to retry: no run matched{looked}"]
    elif filter_text is None:
        given = "the run given was" if skipped == 1 else f"the {skipped:,} runs given were"
        lines = [f"nothing to retry: {given} skipped: {skip_counts(result.skipped)}"]
    else:
        matched = plural(skipped, "run")
        lines = [
            f"nothing to retry: {matched} matched ({filter_text}), all skipped: "
            f"{skip_counts(result.skipped)}"
        ]
    lines += [f"  {run.run_id}  {skipped_run_words(run)}" for run in result.skipped]
    if result.truncated:
        lines.append("more runs matched than --limit; run the command again for the rest")
    return lines


def _retry_one(remote: Remote, given: str) -> None:
    """`runs retry RUN`: the retry, then what it sets off that the operator should hear."""

    async def single(api: ApiClient) -> RetryResult:
        return await api.actions.retry(await full_run_id(api, given))

    result = call(remote, single)
    _print(remote, result, f"run {result.run_id}: {result.message}; it is {result.status}")
    # The server says what the retry sets off (a finished run reopened, a join that fails
    # again, an open breaker) in words meant for the CLI too: printed as they come.
    _warn(remote, result.warnings)


def _preview_one(remote: Remote, given: str) -> None:
    """`runs retry RUN --dry-run`: what the retry would run again (the API's preview, which
    the web monitor's confirm step shows too) on stdout, its warnings on stderr as the retry
    would give them; exit 1 when the retry would be refused, as it would exit. A run the
    workflow or its input made fail leads with the sentence `runs show` says it with: the
    retry would fail the same way."""

    async def look(api: ApiClient) -> RetryPreview:
        return await api.actions.retry_preview(await full_run_id(api, given))

    preview = call(remote, look)
    if remote.json:
        print_json(dump(preview))
    else:
        _warn(remote, [preview.fix_first] if preview.fix_first else [])
        stdout().print(retry_preview_line(preview), markup=False)
    _warn(remote, preview.warnings)
    if not preview.retriable:
        raise typer.Exit(ExitCode.FAILED)


def retry_preview_line(preview: RetryPreview) -> str:
    """What `runs retry RUN --dry-run` says the retry would do, in the retry's own words."""
    run = preview.run_id
    if preview.retriable:
        return (
            f"run {run} ({preview.status}): a retry would have {preview.message}; nothing retried"
        )
    if preview.status != "FAILED":
        return f"run {run} is {preview.status}: a retry takes FAILED runs only; nothing retried"
    # A FAILED run the retry refuses (a deployment's own run, a run started over): the
    # warning says why.
    return f"run {run} (FAILED): a retry would be refused; nothing retried"


def _print_batch(
    remote: Remote,
    outcome: BatchRetryResult,
    filter_text: str | None,
    children_hidden: bool,
    fix_first: str | None = None,
) -> None:
    """A batch retry's answer, and on stderr the server's line for the runs that fail the
    same way at once (`fix_first`, its preview's), for each run whose joins fail again and
    for each open breaker the retried steps call (in JSON they are the answer's `stuck` and
    `warnings`)."""
    if remote.json:
        print_json(dump(outcome))
    else:
        console = stdout()
        for line in batch_lines(outcome, filter_text):
            console.print(line, markup=False)
        if children_hidden and not (outcome.retried or outcome.skipped):
            console.print("(child runs are retried with --all)", markup=False)
    _warn(remote, [fix_first] if fix_first else [])
    _warn(remote, [stuck.message for stuck in outcome.stuck if stuck.message])
    # The runs those lines say to reprocess, in one command (the API names one run a line).
    told = [s.run_id for s in outcome.stuck if f"runs reprocess {s.run_id}`" in s.message]
    if len(told) > 1 and not remote.json:
        say(f"to reprocess them all at once: schemabridge runs reprocess {' '.join(told)}")
    _warn(remote, outcome.warnings)


def retry(
    runs: Annotated[
        list[str] | None,
        typer.Argument(help="The runs to retry (or a filter instead).", metavar="RUN"),
    ] = None,
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    route: RouteOption = None,
    tenant: TenantOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    all_runs: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Batch: child runs too (by default only runs no spawner started, as "
            "`runs list` shows them).",
        ),
    ] = False,
    roots: Annotated[
        bool,
        # Root runs are the default now; kept so scripts written for it still work, and
        # still a filter on its own (`runs retry --roots` retried FAILED root runs).
        typer.Option("--roots", hidden=True, help="Batch: only runs no spawner started."),
    ] = False,
    limit: Annotated[
        int, typer.Option(help="Batch: consider at most this many runs.", min=1, max=MAX_BATCH)
    ] = DEFAULT_BATCH,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Retry nothing: with one RUN, say what its retry would run again and its "
            "warnings; with several RUNs or a filter, count the runs it would take and skip, "
            "those that would fail the same way at once (the workflow or their input caused "
            "it), and the open breakers their steps would meet.",
        ),
    ] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Run a FAILED run's failed steps again (completed steps are kept).

    Several RUNs, or a filter (--status, default FAILED; --workflow, --version, --route,
    --tenant, --since, --until, --all: the options of `runs list`), retry many at once and
    print the runs retried and those skipped with the reason; with none retried it says
    "nothing to retry" and why. A filter covers the root runs `runs list` shows with the
    same options, child runs too with --all (`--workflow W --version V --route candidate
    --since T1 --until T2`: the runs a deployment sent to its candidate, its exposure). A
    FAILED child of a run that has SUCCEEDED is skipped (its retry would reopen that run's
    join and run the steps after it again); naming it alone retries it, with a warning.
    --dry-run counts what several RUNs or a filter would take first (the API counts it), or
    says what one RUN's retry would run again, retrying nothing. A filter's runs that failed
    because of the workflow or their input (invalid_config, expression_error, ...) fail the
    same way at once: the dry run and the batch warn of them first, with the fix. Exit 1
    when a RUN named is not FAILED (or not found) or is skipped; a filter that matches
    nothing, or only runs it skips, exits 0."""
    remote = Remote(api_url, api_key, output, debug)
    if roots and all_runs:
        fail("give --all (child runs too) or --roots (the default), not both", ExitCode.USAGE)
    named: list[tuple[str, object | None]] = [
        ("workflow", workflow),
        ("version", version),
        ("route", route),
        ("tenant", tenant),
        ("since", since),
        ("until", until),
    ]
    filtered = status is not None or any(v is not None for _, v in named) or all_runs or roots
    _check_retry_arguments(runs, filtered=filtered, dry_run=dry_run)
    if dry_run and runs and len(runs) == 1:
        _preview_one(remote, runs[0])
        return
    if dry_run and runs:
        _preview_runs(remote, runs, limit)
        return
    if runs and len(runs) == 1:
        _retry_one(remote, runs[0])
        return
    selection = None
    if filtered:
        selection = run_filter(
            status=status or "FAILED",
            workflow=workflow,
            tenant=tenant,
            since=since,
            until=until,
            roots_only=not all_runs,
            version=version,
            route=route,
        )

    if dry_run and selection is not None:
        asked = looked_for(status, named, all_runs)
        _preview_batch(remote, selection, limit, asked)
        return

    async def batch(api: ApiClient) -> tuple[BatchRetryResult, str | None]:
        # Each RUN resolved first: a prefix that names no run, or several, ends the command
        # before anything is retried, as a whole id the API does not know would not.
        ids = [await full_run_id(api, given) for given in runs] if runs else None
        fix_first = None
        if selection is not None and not remote.json:
            # Read before the retry, which clears the errors it is read from: the runs that
            # fail again the same way at once, as the monitor's dialog warns of them first.
            fix_first = fix_first_warning(await api.actions.batch_retry_preview(selection, limit))
        outcome = await api.actions.batch_retry(ids=ids, selection=selection, limit=limit)
        if selection and selection.workflow and not (outcome.retried or outcome.skipped):
            await hints.require_workflow(api, selection.workflow)
        return outcome, fix_first

    outcome, fix_first = call(
        remote,
        batch,
        workflow=selection.workflow if selection else None,
        system_workflows=True,  # a typo's fix may name gradual_deploy (a batch skips its runs)
    )
    filter_text = looked_for(status, named, all_runs) if filtered else None
    _print_batch(
        remote, outcome, filter_text, children_hidden=filtered and not all_runs, fix_first=fix_first
    )
    if runs and outcome.skipped:
        raise typer.Exit(ExitCode.FAILED)


def _check_retry_arguments(runs: list[str] | None, *, filtered: bool, dry_run: bool) -> None:
    """Runs or a filter, one of the two."""
    if runs and filtered:
        fail("give runs or a filter (--status, --workflow, ...), not both", ExitCode.USAGE)
    if not runs and not filtered:
        fail(
            "give the runs to retry, or a filter such as --status FAILED --workflow W",
            ExitCode.USAGE,
        )


def _preview_batch(remote: Remote, selection: RunQuery, limit: int, filter_text: str) -> None:
    """`runs retry FILTER --dry-run`: what the batch would take, as the API counts it, and on
    stderr its warnings (the runs that would fail the same way at once, then the open
    breakers its steps would meet). A `--workflow` no run matched because none
    is published is refused with the name meant, as the batch itself refuses it."""

    async def preview(api: ApiClient) -> BatchRetryPreview:
        answer = await api.actions.batch_retry_preview(selection, limit)
        if selection.workflow and not answer.matching:
            await hints.require_workflow(api, selection.workflow)
        return answer

    answer = call(remote, preview, workflow=selection.workflow, system_workflows=True)
    if remote.json:
        print_json(dump(answer))
    else:
        console = stdout()
        console.print(dry_run_line(answer, selection.status, filter_text), markup=False)
        if answer.truncated:
            console.print(
                f"more runs match than --limit {answer.limit:,}: the batch takes the newest "
                f"{answer.limit:,}; run it again for the rest",
                markup=False,
            )
    _warn(remote, answer.warnings)


def _preview_runs(remote: Remote, given: list[str], limit: int) -> None:
    """`runs retry RUN RUN… --dry-run`: what the batch of these runs would retry and skip,
    as the API counts it, and on stderr its warnings, as `_preview_batch` says a filter's.
    Exit 1 when it would skip some, as the batch would exit."""

    async def preview(api: ApiClient) -> BatchRetryPreview:
        ids = [await full_run_id(api, run) for run in given]
        return await api.actions.batch_retry_preview(None, limit, ids=ids)

    answer = call(remote, preview)
    if remote.json:
        print_json(dump(answer))
    else:
        line = dry_run_line(answer, None, f"of {len(given):,} named", "named")
        stdout().print(line, markup=False)
    _warn(remote, answer.warnings)
    if answer.skipped:
        raise typer.Exit(ExitCode.FAILED)


def fix_first_warning(preview: BatchRetryPreview) -> str | None:
    """The preview's sentence about the runs that fail the same way at once (the workflow
    or their input caused it), which leads its warnings when it has any such runs."""
    return preview.warnings[0] if preview.fix_first and preview.warnings else None


PREVIEW_SKIP_WORDS = {
    **SKIP_WORDS,
    "parent_succeeded": "under a SUCCEEDED run (their retry would reopen a finished run's "
    "join; name one alone to retry it)",
    "started_over": "started over (their retry would send their calls a second time, beside "
    "the new runs'; look at those)",
    "deployment_run": "deployments' own runs (act on their deployments)",
    "run_past_retention": "being deleted (run retention or a purge is deleting their trees; "
    "start their roots over to run their input again)",
}
"""A batch retry's skip reasons as its dry run says them: it names no run, so the reason
says what to do instead."""

PREVIEW_SKIP_WORDS_OF_ONE = {
    "parent_succeeded": "under a SUCCEEDED run (its retry would reopen a finished run's "
    "join; name it alone to retry it)",
    "started_over": "started over (its retry would send its calls a second time, beside "
    "the new run's; look at that one)",
    "deployment_run": "a deployment's own run (act on its deployment)",
    "run_past_retention": "being deleted (run retention or a purge is deleting its tree; "
    "start its root over to run its input again)",
}
"""The same of one run (the monitor's dialog says them so too)."""


def preview_skip_counts(skipped: list[SkippedRuns]) -> str:
    """The runs a dry run counts as skipped, by reason, most first, each with the newest of
    them: `under a SUCCEEDED run (...): run ID` for one reason, `3 under a SUCCEEDED run
    (...): runs A, B and 1 more; 1 not FAILED (1 RUNNING): run C` for several; a run started
    over is named with its new run (`run A (started over as run B)`)."""
    by_reason: dict[str, Counter[str]] = {}
    named: dict[str, list[str]] = {}
    for group in skipped:
        by_reason.setdefault(group.reason, Counter())[group.state or ""] += group.count
        names = named.setdefault(group.reason, [])
        new_runs = group.new_run_ids if len(group.new_run_ids) == len(group.run_ids) else []
        for i, run_id in enumerate(group.run_ids):
            names.append(f"{run_id} (started over as run {new_runs[i]})" if new_runs else run_id)
    parts = []
    for reason, states in sorted(by_reason.items(), key=lambda item: -item[1].total()):
        total = states.total()
        words = (total == 1 and PREVIEW_SKIP_WORDS_OF_ONE.get(reason)) or PREVIEW_SKIP_WORDS.get(
            reason, reason
        )
        if reason == "run_not_failed":
            known = [(state, n) for state, n in states.most_common() if state]
            words += f" ({', '.join(f'{n:,} {state}' for state, n in known)})" if known else ""
        if named[reason]:
            words += f": {_skipped_names(named[reason][:SKIPPED_SHOWN], total)}"
        parts.append(words if len(by_reason) == 1 else f"{total:,} {words}")
    return "; ".join(parts)


SKIPPED_SHOWN = 10
"""The most skipped runs of one reason a dry run names (the API sends at most as many)."""


def _skipped_names(names: list[str], total: int) -> str:
    """`run A`, `runs A, B and 3 more` (`names`: the newest `total` runs, each said so)."""
    if total == 1 and len(names) == 1:
        return f"run {names[0]}"
    more = f" and {total - len(names):,} more" if total > len(names) else ""
    return f"runs {', '.join(names)}{more}"


def dry_run_line(
    answer: BatchRetryPreview, status: str | None, filter_text: str, chosen: str = "matched"
) -> str:
    """The first line of `--dry-run`: the runs the batch would retry, as the API counts them,
    then those it would skip, by reason (`chosen`: how the runs were chosen, "matched" by a
    filter or "named"). A filter on another status than FAILED retries none
    of its runs (each skipped as not FAILED): "would retry 3 runs" would be untrue."""
    skipped = sum(group.count for group in answer.skipped)
    if (status or "FAILED").upper() == "FAILED":
        line = f"would retry {plural(answer.matching, 'run')} ({filter_text})"
        if skipped:
            verb = "is" if skipped == 1 else "are"
            reasons = preview_skip_counts(answer.skipped)
            line += f"; {skipped:,} {chosen} {verb} skipped: {reasons}"
        return f"{line}; nothing retried"
    # An older API counts them in `matching`, and skips none.
    considered = answer.matching + skipped
    matched = plural(considered, "run")
    verb = "matches" if considered == 1 else "match"
    return (
        f"would retry no run: {matched} {verb} ({filter_text}), and a retry takes FAILED runs "
        "only (the batch would skip them as not FAILED); nothing retried"
    )


# ── resolve, start over, reprocess, cancel ──────────────────────────────────────────────────


def resolve(
    run_id: RunArgument,
    vertex: Annotated[str, typer.Argument(help="The FAILED step's vertex id.", metavar="VERTEX")],
    value: Annotated[
        str,
        typer.Option(
            "--output",
            help="The output the step should have given: JSON text or @file.json.",
            metavar="JSON",
        ),
    ],
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    format: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help="text for people, json for scripts (--output is the step's output here).",
            case_sensitive=False,
        ),
    ] = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Give a FAILED step the output it should have had; its dependants go on."""
    remote = Remote(api_url, api_key, format, debug)
    step_output = read_json_value(value, "--output")

    async def action(api: ApiClient) -> ResolveResult:
        run = await full_run_id(api, run_id)
        try:
            return await api.actions.resolve(run, vertex, step_output)
        except ApiFailure as failure:
            if failure.code != "step_not_found" or "steps" in failure.details:
                raise  # (the API has named the steps meant)
            steps = [step.vertex_id for step in (await api.runs.get(run)).steps]
            raise hints.amended(failure, hints.step_fix(vertex, steps)) from None

    result = call(remote, action)
    _print(remote, result, f"run {result.run_id}: {result.message}")
    _warn(remote, result.warnings)  # e.g. a run above that had SUCCEEDED runs again


def start_over(
    run_id: RunArgument,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Start nothing: say what the start over would do (the version it runs, or "
            "the run an earlier one made, or why it would be refused) and its warnings.",
        ),
    ] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Start an ended run over as a new run with the same input (the same one each time).
    --dry-run says what it would do first. Exit 0 also when the run was started over already
    (the run that made is named), with --dry-run too; 1 when it is refused."""
    remote = Remote(api_url, api_key, output, debug)
    if dry_run:
        _preview_start_over(remote, run_id)
        return

    async def action(api: ApiClient) -> StartOverResult:
        return await api.actions.start_over(await full_run_id(api, run_id))

    result = call(remote, action)
    _print(remote, result, f"run {result.run_id}: {result.message}")
    _warn(remote, result.warnings)  # e.g. the version it repeats was rolled back
    if not remote.json:
        say(f"follow it: schemabridge runs watch {result.new_run_id}")


def _preview_start_over(remote: Remote, given: str) -> None:
    """`runs start-over RUN --dry-run`: the API's preview on stdout, its warnings on stderr
    as the start over would give them; the exit code it would have: 0 when it would start a
    run or name the one an earlier start over made (what was asked is already the case), 1
    when it would be refused."""

    async def look(api: ApiClient) -> StartOverPreview:
        return await api.actions.start_over_preview(await full_run_id(api, given))

    preview = call(remote, look)
    if remote.json:
        print_json(dump(preview))
    else:
        line = f"run {preview.run_id} ({preview.status}): {preview.message}; nothing started"
        if not preview.startable and preview.new_run_id is None:
            line = f"{preview.message}; nothing started"  # the refusal names the run itself
        stdout().print(line, markup=False)
    _warn(remote, preview.warnings)
    if not preview.startable and preview.new_run_id is None:
        raise typer.Exit(ExitCode.FAILED)


SHOWN_DEAD_LETTERS = 10
"""Dead letters a reprocess's preview lists by name (`runs children` lists them all)."""

RETRY_INSTEAD = "its own failed steps run again with `schemabridge runs retry {run}`"
"""What a FAILED run with no dead letter to reprocess needs instead: a reprocess runs only a
fan-out's failed children, so a run that failed at one of its own steps waits for a retry."""


def reprocess(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="The run's id, or its first 8 or more characters; several RUNs are each "
            "reprocessed, a run whose reprocess would reopen a SUCCEEDED run skipped.",
            metavar="RUN",
        ),
    ],
    preview: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            # Its first name, kept: retry and start-over call the same thing --dry-run.
            "--preview",
            help="Only say what the reprocess would do (nothing is changed).",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Reprocess without asking, also when a run that had SUCCEEDED runs again.",
        ),
    ] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Run a fan-out's dead-lettered (FAILED) children again; their joins reopen.

    It reads what the reprocess would do first (--dry-run prints only that). When a join
    that had closed reopens and the steps after it run a second time — a run that had
    SUCCEEDED (its MERGE tolerated the failures) runs again, and calls it had sent are sent
    again — it says so and asks before acting; without a terminal to ask on, it acts only
    with --yes (else exit 1, nothing done). Several RUNs (a batch retry's runs whose joins
    fail again, say) are each reprocessed as one would be, except a run that would reopen a
    SUCCEEDED run, which is skipped with the reason (reprocess it alone); exit 1 when one
    was skipped."""
    remote = Remote(api_url, api_key, output, debug)
    if len(runs) > 1:
        if preview:
            fail("--dry-run looks at one run: give one RUN", ExitCode.USAGE)
        reprocess_runs(remote, runs)
        return
    (run_id,) = runs

    async def look(api: ApiClient) -> ReprocessPreview:
        return await api.actions.reprocess_preview(await full_run_id(api, run_id))

    seen = call(remote, look)
    if preview:
        _print_preview(remote, seen)
        if not seen.reprocessable:
            raise typer.Exit(ExitCode.FAILED)
        return
    if reopens_finished_work(seen) and not yes:
        _confirm_reopening(seen)

    async def action(api: ApiClient) -> ReprocessResult:
        return await api.actions.reprocess(seen.run_id)

    result = call(remote, action)
    _print(remote, result, f"run {result.run_id}: {result.message}; it is {result.status}")
    _warn(remote, result.warnings)
    if not result.changed and result.status == "FAILED" and not remote.json:
        say(RETRY_INSTEAD.format(run=result.run_id))


def reopens_finished_work(preview: ReprocessPreview) -> bool:
    """Whether the reprocess would run work again that had finished: a run that had
    SUCCEEDED runs again, or steps after a join that had ended call their destinations a
    second time (the cases the API's warnings name first, `reopenedJoins`)."""
    return any(
        join.ended == "SUCCEEDED" or any(step.type == "GATEWAY" for step in join.steps_again)
        for join in preview.reopened_joins
    )


def preview_lines(preview: ReprocessPreview) -> list[str]:
    """What a reprocess would do, in lines: the children it runs again (the first few by
    name) and each join it reopens with the steps that run again and what they call."""
    run = preview.run_id
    if not preview.reprocessable:
        return [f"run {run} is {preview.status}; its children are not run again"]
    if not preview.revived:
        line = f"run {run} ({preview.status}): no dead-lettered children to run again"
        return [line, RETRY_INSTEAD.format(run=run)] if preview.status == "FAILED" else [line]
    children = plural(preview.revived, "dead-lettered child", "dead-lettered children")
    lines = [f"run {run} ({preview.status}): a reprocess runs {children} again"]
    shown = preview.dead_letters[:SHOWN_DEAD_LETTERS]
    lines += [f"  {c.parent_vertex_id}[{c.item_index}]  {c.id}" for c in shown]
    if preview.revived > len(shown):
        more = preview.revived - len(shown)
        lines.append(f"  … {more:,} more (schemabridge runs children {run} --status FAILED)")
    for join in preview.reopened_joins:
        where = "" if join.run_id == run else f" of run {join.run_id}"
        had = f", which had {join.ended}," if join.ended else ""
        line = f"the join {join.join!r}{where}{had} reopens"
        steps = [_step_again(step) for step in join.steps_again]
        verb = "runs" if len(steps) == 1 else "run"
        lines.append(f"{line}: {', '.join(steps)} {verb} again" if steps else line)
    return lines


def _step_again(step: StepAgain) -> str:
    if step.destinations:
        return f"{step.vertex_id} (calls {', '.join(step.destinations)})"
    return step.vertex_id


def _print_preview(remote: Remote, preview: ReprocessPreview) -> None:
    """`--dry-run`: what the reprocess would do on stdout (`--output json`: the API's
    answer), its warnings on stderr, as the reprocess would give them."""
    if remote.json:
        print_json(dump(preview))
    else:
        console = stdout()
        for line in preview_lines(preview):
            console.print(line, markup=False)
    _warn(remote, preview.warnings)


def _confirm_reopening(preview: ReprocessPreview) -> None:
    """A reprocess that runs finished work again goes ahead only when the operator says
    so: asked on a terminal (the preview shown first), else refused with what it would do
    and how to go ahead (exit 1, nothing done)."""
    run = preview.run_id
    if not sys.stdin.isatty():
        lines = [
            f"error: run {run} was not reprocessed: it runs again work that had finished, "
            f"and sends calls a second time; add --yes to reprocess it all the same "
            f"(`schemabridge runs reprocess {run} --dry-run` shows what it would do)",
            *(f"  {warning}" for warning in preview.warnings),
        ]
        for line in lines:
            stderr().print(line, markup=False)
        raise typer.Exit(ExitCode.FAILED)
    for line in preview_lines(preview):
        say(line)
    for warning in preview.warnings:
        say(f"warning: {warning}")
    if not typer.confirm(f"reprocess run {run}?", default=False, err=True):
        say(f"run {run} was not reprocessed")
        raise typer.Exit(ExitCode.FAILED)


def _warn(remote: Remote, warnings: list[str]) -> None:
    """The API's warnings (an open breaker the steps run again will meet), on stderr; in JSON
    they are the answer's `warnings`."""
    if not remote.json:
        for warning in warnings:
            say(f"warning: {warning}")


def cancel(
    run_id: RunArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Cancel a run and every run under it still going (a run that SUCCEEDED or FAILED:
    exit 1; one already cancelled: exit 0, said so)."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> CancelResult:
        return await api.actions.cancel(await full_run_id(api, run_id))

    result = call(remote, action)
    runs_cancelled = result.runs_cancelled
    if not result.changed:
        line = f"run {result.run_id} was already cancelled"
    elif runs_cancelled > 1:
        under = plural(runs_cancelled - 1, "run")
        line = f"run {result.run_id} cancelled, with {under} under it"
    else:
        line = f"run {result.run_id} cancelled"
    aborted = result.aborted_deployment
    if aborted is not None:
        # The run drove a deployment: the operator cancelled a run and must hear that the
        # deployment ended with it, and which.
        line += (
            f"; deployment {aborted.id} ({aborted.workflow} v{aborted.version}), which it "
            f"drove, is aborted: v{aborted.version} gets no new runs, "
            f"v{aborted.serving_version} serves"
        )
    _print(remote, result, line)
