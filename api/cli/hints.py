"""The fix that goes with a "not found" from the API, added to its one line: the workflow
names a typo was close to (`did you mean 'support-ticket'?`), or the command that lists what
exists; and with a running deployment in the way, the commands that follow and stop it. A
failure to find the names leaves the message as the API said it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from api.cli.client_errors import ApiFailure
from schemas.close_names import close_names, did_you_mean

if TYPE_CHECKING:
    from api.cli.client import ApiClient

MAX_LISTED = 8
"""Workflow names listed when none is close to the one given."""
RUNS_FIX = "`schemabridge runs list` shows the runs (a fan-out's children: `runs list --all`)"
DEPLOYMENTS_FIX = "`schemabridge deployments list` shows the deployments"


def deployment_running_fix(deployment_id: str) -> str:
    """What to do about a deployment that keeps a start or a serving switch from happening
    (`deployment_running`): the commands that follow it and stop it, whichever was refused."""
    return (
        f"watch it with `schemabridge deployments show {deployment_id}` or stop it with "
        f"`schemabridge deployments abort {deployment_id}`"
    )


def amended(failure: ApiFailure, fix: str) -> ApiFailure:
    return ApiFailure(
        f"{failure.message}; {fix}",
        failure.exit_code,
        status=failure.status,
        code=failure.code,
        details=failure.details,
        transient=failure.transient,
    )


def workflow_fix(name: str, names: list[str]) -> str:
    """What to do about `name`, given the published `names` (with the engine's own when the
    command reads runs: a typo of `gradual_deploy` is offered it). What is listed when no
    name is close is the users' workflows alone, as `workflows list` and `runs submit` say
    them: the engine's are no workflow to submit, nor one a tenant sees runs of."""
    if name in names:  # the workflow is there: its version is not
        return f"`schemabridge workflows versions {name}` lists its versions"
    close = close_names(name, names)
    if close:
        return did_you_mean(close)
    # Here, not at the top: the workflow models load only for the commands that need them.
    from schemas.definitions import RESERVED_WORKFLOWS

    published = [n for n in names if n not in RESERVED_WORKFLOWS]
    if not published:
        return "nothing is published yet: `schemabridge workflows publish FILE...`"
    listed = ", ".join(published[:MAX_LISTED]) + (", …" if len(published) > MAX_LISTED else "")
    return f"published: {listed}"


def step_fix(vertex: str, steps: list[str]) -> str:
    """What to do about a `vertex` the run does not have, given its `steps`."""
    close = close_names(vertex, steps)
    return did_you_mean(close) if close else f"its steps: {', '.join(steps)}"


async def require_workflow(api: ApiClient, name: str) -> None:
    """Refuse (`workflow_not_found`) a workflow filter that can match nothing because no such
    workflow is published: a typo must not read as "no runs"."""
    await api.workflows.versions(name)


async def unknown_tenant(api: ApiClient, tenant: str) -> list[str]:
    """What an empty list filtered by `tenant` adds when no such tenant is known (no runs, API
    keys or settings: `tenants list`), with the known ones it may have been meant to be: a
    typo must not read as "no runs" alone. Nothing when it is known, or when the key may not
    list tenants (a tenant key's filter is its own tenant)."""
    try:
        known = [view.tenant_id for view in (await api.settings.tenants()).items]
    except ApiFailure:
        return []
    if tenant in known:
        return []
    close = close_names(tenant, known)
    fix = did_you_mean(close) if close else "`schemabridge tenants list` shows the known ones"
    return [f"no tenant {tenant!r} is known ({fix})"]


async def with_fix(
    api: ApiClient, failure: ApiFailure, workflow: str | None, *, system: bool = False
) -> ApiFailure:
    """`failure` with its fix, when it is a run, a deployment or a workflow `workflow` not
    found. The names suggested are the users' workflows, and with `system` the engine's own
    too (for the commands that read runs, which `gradual_deploy` has)."""
    if failure.code == "run_not_found":
        return amended(failure, RUNS_FIX)
    if failure.code == "deployment_not_found":
        return amended(failure, DEPLOYMENTS_FIX)
    running = failure.details.get("deploymentId")
    if failure.code == "deployment_running" and isinstance(running, str):
        return amended(failure, deployment_running_fix(running))
    if failure.code != "workflow_not_found" or workflow is None:
        return failure
    if failure.details.get("meant") or failure.details.get("versions"):
        return failure  # (the API has said which names were meant, or which versions exist)
    try:
        page = await api.workflows.list(system=system)
    except ApiFailure:
        return failure
    return amended(failure, workflow_fix(workflow, [w.name for w in page.items]))
