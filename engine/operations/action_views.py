"""What operator actions answer: small views saying what was done (camelCase on the wire)."""

from __future__ import annotations

from enum import StrEnum

from engine.operations.views import BreakerRef, RunSummary, View
from engine.store.models import RunStatus
from engine.store.operator_actions import Action
from schemas.definitions import VertexType


class SkipReason(StrEnum):
    """Why a batch action left a run alone (`SkippedRun.reason`)."""

    RUN_NOT_FOUND = "run_not_found"
    """No such run, or another tenant's: the code a single action would refuse it with."""
    RUN_NOT_FAILED = "run_not_failed"
    """The run is not FAILED: the code a single retry would refuse it with."""
    PARENT_SUCCEEDED = "parent_succeeded"
    """A FAILED child whose retry would reopen the join of a run that had ended SUCCEEDED
    (and run the steps after it again)."""
    DEPLOYMENT_RUN = "deployment_run"
    """The engine's own `gradual_deploy` run of a deployment: the code a single retry would
    refuse it with (act on the deployment instead)."""
    STARTED_OVER = "started_over"
    """A FAILED run that was started over (or is under a root run that was): the code a
    single retry would refuse it with (its steps' calls would be sent twice; `message` names
    the new run to look at instead)."""
    RUN_PAST_RETENTION = "run_past_retention"
    """A FAILED run whose tree run retention (`SCHEMABRIDGE_RUN_RETENTION_S`) or an
    operator's purge is deleting; the code a single retry would refuse it with (start over
    the root to run its input again)."""
    RUN_CANCELLED = "run_cancelled"
    """A CANCELLED run: the code a single reprocess would refuse it with (nothing runs a
    cancelled run's children again)."""
    NO_DEAD_LETTERS = "no_dead_letters"
    """A run with no dead-lettered child to run again: a single reprocess of it would change
    nothing."""
    REOPENS_SUCCEEDED = "reopens_succeeded"
    """A run whose reprocess would reopen the join of a run that had ended SUCCEEDED (itself
    or one above it) and run the steps after it again: a batch leaves it, as a batch retry
    leaves such a child (`parent_succeeded`); the single reprocess of it by id still does it."""


class BreakerWarning(BreakerRef):
    """An open breaker layer the steps an action runs again call: they fail again at once,
    sending nothing, until it half-opens. `message` is the warning's sentence (one of the
    answer's `warnings`, naming the CLI command that closes it); `destination` and `tenantId`
    (None: the global layer) name what `POST /destinations/{destination}/breakers/reset`
    (`?tenant=` the tenant) closes."""

    half_open_in_s: float
    """Seconds until it half-opens, as of the answer."""
    message: str


class ActionResult(View):
    """One action on one run. `changed` is False when the action found nothing to do (it is
    idempotent there); `status` is the run's status after it."""

    run_id: str
    action: Action
    """retry, resolve, start_over, reprocess or cancel (as in the run's log)."""
    changed: bool
    message: str
    status: RunStatus


class RetryResult(ActionResult):
    steps_retried: int
    """FAILED steps that run again."""
    steps_held_back: int = 0
    """Steps stopped when the run failed that run again too: the run's other steps that were
    due or running then, held back (docs/architecture.md, 'Terminal failures'). `message`
    says both counts."""
    warnings: list[str] = []
    """What the retry sets off that the operator may not expect, in words and in this order: a
    join reopened (`reopenedRun`), joins that fail again at once (`stuckJoins`), the run's
    version rolled back by a deployment or no longer serving (the retry runs it again), then
    each open breaker of a destination the steps call (when it half-opens, and the command
    that closes it)."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, in the same order, each with its sentence:
    what a front door needs to offer its own way to reset one (the web monitor links to the
    destination's Reset)."""
    reopened_run: str | None = None
    """A child run's retry that came back into the join of an ancestor that had ended
    SUCCEEDED: that ancestor, which runs again from its join, so the steps after it run a
    second time. None otherwise."""
    reopened_join: str | None = None
    """The MERGE of `reopenedRun` that reopened."""
    stuck_joins: list[str] = []
    """The run's MERGE steps that failed because children FAILED or were CANCELLED: they fail
    again at once, the children being still FAILED (reprocess the run to run them again) or
    CANCELLED (nothing runs them again: resolve the join or start the run over)."""
    children_failed: int = 0
    """How many of the run's children are FAILED (with `stuckJoins`)."""
    children_cancelled: int = 0
    """How many CANCELLED children the stuck joins do not tolerate (with `stuckJoins`)."""


class RetryPreview(View):
    """What `POST /runs/{id}/retry` would do now, read without doing it: what a confirm
    dialog says before the operator clicks. The fields mean what `RetryResult`'s do."""

    run_id: str
    status: RunStatus
    """The run's status now."""
    retriable: bool
    """False unless the run is FAILED (the retry would answer 409 `run_not_failed`), and for
    a deployment's own `gradual_deploy` run (409 `deployment_run`) and a run that was started
    over, or is under a root run that was (409 `started_over`), or whose tree run retention
    (or an operator's purge) is deleting (409 `run_past_retention`): the refusal's sentence is
    then the one of `warnings`."""
    new_run_id: str | None = None
    """When the retry would be refused because the run, or the root run above it, was
    started over (409 `started_over`): the run that start over made, where to look
    instead (the refusal's `details.newRunId`)."""
    steps_retried: int = 0
    """FAILED steps that would run again."""
    steps_held_back: int = 0
    """Steps stopped when the run failed (held back) that would run again too."""
    message: str = ""
    """What the retry would run again, in the words its answer's `message` would use (empty
    when the run is not retriable)."""
    warnings: list[str] = []
    """The retry's warnings, in its words and order, as they stand now."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, in the same order, each with its sentence:
    what a front door needs to offer its own way to reset one (the web monitor links to the
    destination's Reset)."""
    reopened_run: str | None = None
    reopened_join: str | None = None
    stuck_joins: list[str] = []
    """Joins that would fail again at once: reprocess the run instead (its dead letters run
    again and the joins reopen), or, when `childrenCancelled`, resolve the join or start the
    run over (nothing runs a cancelled child again)."""
    children_failed: int = 0
    children_cancelled: int = 0
    fix_first: str | None = None
    """When the run failed for a cause the workflow or its input makes: the sentence a
    front door leads with (the retry would fail the same way at once; fix the workflow,
    publish, submit anew), the run's `fixFirst` (`GET /runs/{id}`). None otherwise."""


class ResolveResult(ActionResult):
    vertex_id: str
    warnings: list[str] = []
    """What the resolve sets off that the operator may not expect: the last FAILED step of a
    child run resolved, the child comes back into its parent's join, as a retry of it does;
    when that reopens the join of a run above that had ended SUCCEEDED, the retry's sentence
    for it, with the steps after the join that run a second time and what they call."""
    reopened_run: str | None = None
    """The run above that had ended SUCCEEDED and runs again from its join (`reopenedJoin`),
    so the steps after it run a second time, as a retry's `reopenedRun`. None otherwise."""
    reopened_join: str | None = None
    """The MERGE of `reopenedRun` that reopened."""


class StartOverResult(ActionResult):
    new_run_id: str
    """The run that starts the old one over (the same one for every start over of it)."""
    warnings: list[str] = []
    """What the start over repeats that the operator may not expect: a version a deployment
    rolled back, or one that no longer serves (a start over always runs the old run's
    version; to run the input on the serving version, submit it anew)."""


class StepAgain(View):
    """A step after a reopened join that had ended and runs again."""

    vertex_id: str
    type: VertexType
    destinations: list[str] = []
    """The destinations a GATEWAY calls, as far as they are known before the call (a templated
    host is not): each is called a second time."""


class ReopenedJoin(View):
    """A join a reprocess reopens (or would): a closed one opens again and the steps after it
    that had ended run again; a FAILED spawner runs again."""

    run_id: str
    """The reprocessed run, a nested fan-out's run under it, or an ancestor above it (whose
    join counts the reprocessed run, which runs again)."""
    join: str
    """Its MERGE vertex (the spawner when no MERGE joins it)."""
    spawner: str
    above: bool = False
    """The join of an ancestor of the reprocessed run (it counts that run, which runs
    again), not of the run or of a run under it."""
    ended: RunStatus | None = None
    """The status the run had ended with and runs again from (SUCCEEDED: a finished run
    reopens); None when it was still going."""
    steps_again: list[StepAgain] = []
    """The steps after the join that had ended and run again, calls included."""


class ReprocessResult(ActionResult):
    revived: int
    """Dead-lettered child runs that run again, nested ones included."""
    warnings: list[str] = []
    """What the reprocess sets off that the operator may not expect, in words and in this
    order: each run that had ended SUCCEEDED and runs again from its join, with the steps
    after it that send their calls a second time (`reopenedJoins`; the words a retry uses for
    the run it reopens); each other run whose steps after a join run again and call their
    destinations; then each open breaker of a destination the children or those steps call
    (when it half-opens, and the command that closes it)."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, in the same order, each with its sentence:
    what a front door needs to offer its own way to reset one (the web monitor links to the
    destination's Reset)."""
    reopened_run: str | None = None
    """The first run that had ended SUCCEEDED and runs again from its join (the reprocessed
    run itself, or an ancestor), as a retry's `reopenedRun`. None otherwise."""
    reopened_join: str | None = None
    """The join of `reopenedRun` that reopened."""
    reopened_joins: list[ReopenedJoin] = []
    """Every join the reprocess reopened: the run's own first, then nested fan-outs', then the
    ancestors' up the tree."""


class ReprocessPreview(View):
    """What `POST /runs/{id}/reprocess` would do now, read without doing it: what a confirm
    step says before the operator acts. The fields mean what `ReprocessResult`'s do."""

    run_id: str
    status: RunStatus
    """The run's status now (SUCCEEDED with `revived` > 0: the reprocess reopens it)."""
    reprocessable: bool
    """False for a CANCELLED run (the reprocess would answer 409 `run_cancelled`), for a
    deployment's `gradual_deploy` run (409 `deployment_run`, its words in `warnings`) and for
    a run whose tree run retention (or an operator's purge) is deleting (409
    `run_past_retention`, its words in `warnings`)."""
    revived: int = 0
    """Dead-lettered children that would run again, nested ones included (0: the reprocess
    would change nothing)."""
    dead_letters: list[RunSummary] = []
    """The run's own dead letters that would run again, the first 100 in item order."""
    warnings: list[str] = []
    """The reprocess's warnings, in its words and order, as they stand now."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, as `ReprocessResult.breakers`."""
    reopened_run: str | None = None
    reopened_join: str | None = None
    reopened_joins: list[ReopenedJoin] = []


class StartOverPreview(View):
    """What `POST /runs/{id}/start-over` would do now, read without doing it: what a confirm
    step says before the operator acts. The fields mean what `StartOverResult`'s do."""

    run_id: str
    status: RunStatus
    """The run's status now."""
    startable: bool
    """True when a start over now would create a new run. False when one was created before
    (`newRunId`: a start over answers that run) and when the start over would be refused (a
    run not ended, a child run, a deployment's own run: the refusal's sentence in
    `message`)."""
    new_run_id: str | None = None
    """The run an earlier start over created."""
    message: str = ""
    """What the start over would answer, in its words: the new run it would make (of which
    version), the run an earlier one created, or its refusal."""
    warnings: list[str] = []
    """The start over's warnings, in its words, as they stand now (a version a deployment
    rolled back, or that no longer serves, runs again)."""


class AbortedDeployment(View):
    """A deployment aborted because the `gradual_deploy` run that drove it was cancelled."""

    id: str
    workflow: str
    version: int
    """The candidate version, which gets no new runs."""
    serving_version: int
    """The version that serves on."""


class CancelResult(ActionResult):
    runs_cancelled: int
    """The run and its descendants that were still going (0: it was already CANCELLED)."""
    steps_cancelled: int
    aborted_deployment: AbortedDeployment | None = None
    """The deployment the run drove (a `gradual_deploy` run), aborted with it; `message`
    names it too."""


class SkippedRun(View):
    """A run a batch action left alone, and why: `reason` is the code the single action
    would have refused it with (`run_not_found`, `run_not_failed`, `deployment_run`,
    `started_over`, `run_past_retention`), or `parent_succeeded`
    for a FAILED child whose retry would reopen the join of a run that had ended SUCCEEDED
    (and run the steps after it again); `state` its status; `message` the reason in words,
    with what to do instead."""

    run_id: str
    reason: SkipReason
    state: RunStatus | None = None
    message: str = ""


class ReprocessedRun(View):
    """A run whose dead-lettered children a batch reprocess ran again."""

    run_id: str
    revived: int
    """Its dead-lettered child runs that run again, nested ones included."""
    status: RunStatus
    """The run's status after it (RUNNING: its join reopened)."""


class BatchReprocessResult(View):
    """A batch reprocess: the runs whose dead letters run again and those skipped, each in
    the order asked, each run reprocessed as `POST /runs/{id}/reprocess` does it alone."""

    reprocessed: list[ReprocessedRun]
    skipped: list[SkippedRun]
    revived: int
    """The dead-lettered children that run again, of every run reprocessed."""
    warnings: list[str] = []
    """What the reprocessed runs' single answers warn of, each sentence once however many
    runs said it (an open breaker their children call is said once)."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, each once, in the same order."""


class StuckRun(View):
    """A run a batch retried whose joins fail again at once: its children are still FAILED
    (reprocess it to run them again and reopen its joins), or CANCELLED ones its joins do not
    tolerate (`childrenCancelled`: resolve the join or start the run over)."""

    run_id: str
    joins: list[str]
    children_failed: int
    children_cancelled: int = 0
    message: str


class BatchRetryResult(View):
    """A batch retry: the runs retried and those skipped, in the order asked (a filter's
    runs newest first). `truncated`: the filter matched more runs than `limit`, and only the
    first `limit` were considered."""

    retried: list[str]
    skipped: list[SkippedRun]
    truncated: bool = False
    stuck: list[StuckRun] = []
    """Runs retried whose joins fail again at once, in the order of `retried`."""
    warnings: list[str] = []
    """First, for each workflow version of the runs retried that a deployment rolled back
    (or that no longer serves), once however many of its runs were retried, that the retry
    runs it again; then each open breaker of a destination the retried steps call, once per
    breaker layer however many runs call it (when it half-opens, and the command that
    closes it): as a single retry's `warnings` say them."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, in the same order, each with its sentence:
    what a front door needs to offer its own way to reset one (the web monitor links to the
    destination's Reset)."""


class FixFirstRuns(View):
    """Runs a batch retry would take that failed with one error kind the workflow or the
    run's input causes (`invalid_input`, `invalid_config`, `expression_error`,
    `too_many_items`: a step's own, or most of a failed join's children's): retrying runs the
    same version with the same input, so they fail the same way at once."""

    kind: str
    count: int
    """How many of the runs the batch would take failed so."""
    run_ids: list[str]
    """The newest of them, at most 10 (`count` says how many there are)."""


class StuckRuns(View):
    """The runs a batch retry would take whose joins would fail again at once: their
    children are still FAILED, and a retry does not run them (what the batch then lists in
    `stuck`, run by run). Reprocessing a run's dead letters runs them again instead; a join
    that failed on CANCELLED children needs a resolve or a start over (`message` says so)."""

    count: int = 0
    """How many of the runs the batch would take (all of them, not a sample)."""
    run_ids: list[str] = []
    """The newest of them, at most 10 (`count` says how many there are)."""
    message: str | None = None
    """The sentence of `warnings` that says them (None when there are none)."""
    cancelled: int = 0
    """Of `count`, the runs whose joins failed on CANCELLED children, which no reprocess runs
    again: a front door offers Resolve or Start over for those, not Reprocess."""


class SkippedRuns(View):
    """Runs a batch retry would skip, counted by reason and state: `SkippedRun`'s `reason`
    and `state` (`parent_succeeded` for FAILED children under a run that has SUCCEEDED,
    `run_not_failed` for the runs of another status a filter or the ids name; of a batch by
    ids, `run_not_found` and `deployment_run`, without a state), and `message` the reason in
    the batch's words, with what to do instead."""

    reason: SkipReason
    state: RunStatus | None = None
    count: int
    message: str = ""
    run_ids: list[str] = []
    """The newest of them, at most 10 (`count` says how many there are); of a batch by ids,
    the first named."""
    new_run_ids: list[str] = []
    """Of `started_over`: the run each of `runIds` was started over as (the new run of its
    root, for a child), in the same order; empty for the other reasons."""


class BatchRetryPreview(View):
    """What `POST /runs/retry` with this filter (or these ids) would take, counted without
    retrying: what a confirm step says before the operator sends the batch."""

    matching: int
    """The runs the batch would retry: of those the filter matches (FAILED unless it names a
    status; root runs unless it names a `parent` or sets `roots` false), the newest `limit`
    the batch would consider, less those it would skip (`skipped`). A deployment's own
    `gradual_deploy` runs are not counted: the batch skips them (`deployment_run`) beside its
    `limit`. `matching` plus the counts of `skipped` is the runs the batch would consider
    (the `limit` that makes it consider these same runs); some may still be retried by
    someone else meanwhile, or be a FAILED child of a FAILED run under a SUCCEEDED one (the
    batch skips it too, `parent_succeeded`; the count looks at a run's parent only). Of a
    batch by ids: the FAILED runs among them it would retry."""
    skipped: list[SkippedRuns] = []
    """The runs among those the batch would consider that it would skip, by reason and
    state, most first: FAILED children under a run that has SUCCEEDED (`parent_succeeded`),
    runs not FAILED (`run_not_failed`, a filter naming another status), runs started over
    (`started_over`), runs whose tree is being deleted (`run_past_retention`); of a
    batch by ids, also the ids no run has (`run_not_found`) and deployments' own runs
    (`deployment_run`)."""
    limit: int
    """The most runs the batch would consider (the request's `limit`)."""
    truncated: bool = False
    """More than `limit` runs match: the batch would take the newest `limit`, and answer
    `truncated: true`."""
    warnings: list[str] = []
    """What the batch would set off that the operator may not expect, in this order: first,
    when some of those runs failed for a cause the workflow or their input makes, one
    sentence saying how many, with which kinds and the newest run ids, and that they would
    fail the same way at once (fix the workflow first: `fixFirst`); then, when some of those
    runs have joins that would fail again at once, one sentence saying how many, the newest
    run ids and that "Reprocess dead letters" (`schemabridge runs reprocess RUN`) runs their
    children again instead (`stuck`); then, for each workflow version of those runs that a
    deployment rolled back (or that no longer serves), once, that the batch runs it again,
    as the batch would say it; then each open breaker of a destination the steps of those
    runs that would run again call (their FAILED steps and the steps held back when they
    failed), as the batch would say it."""
    breakers: list[BreakerWarning] = []
    """The open breakers among `warnings` as data, in the same order, each with its sentence:
    what a front door needs to offer its own way to reset one (the web monitor links to the
    destination's Reset)."""
    fix_first: list[FixFirstRuns] = []
    """The runs among those the batch would take (all of them, not a sample) that would fail
    the same way at once, by error kind, most runs first: the first of `warnings` says
    them."""
    stuck: StuckRuns = StuckRuns()
    """The runs among those the batch would take whose joins would fail again at once (the
    batch's `stuck`, counted before it): one of `warnings` says them."""
