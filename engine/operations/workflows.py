"""Workflows: publish, validate, list, read versions, and the graph of a version."""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from engine.operations import graph
from engine.operations.boundary import store_boundary
from engine.operations.deployment_views import rest_words
from engine.operations.views import (
    GraphView,
    PublishResult,
    VersionDetail,
    VersionSummary,
    WorkflowSummary,
)
from engine.store import UnknownWorkflow, definition_hash, stored_document
from engine.store.records import ServingRecord, VersionRecord
from engine.validation import check_documents
from engine.validation import versions as validation_versions
from schemas.close_names import close_names, did_you_mean
from schemas.definitions import RESERVED_WORKFLOWS, Workflow
from schemas.errors import DefinitionError, NotFound, Problem

if TYPE_CHECKING:
    from engine.runtime import Runtime
    from engine.store.store import Store

Documents = dict[str, Any] | list[dict[str, Any]]
"""One workflow document, or a list of them (a parent with the child workflows it starts)."""
SOURCE = "request"
"""How problems name the documents an operation was given."""
CHECK_THREADS = 2
"""Threads per process that check and lay out workflow documents, off the event loop: a
document near the limits costs seconds of CPU (docs/security.md, 'Input limits'), which on
the loop would hold every other request of the process, every tenant's. Two at once; more
wait their turn, so a burst of them cannot take more than that share of the process."""

T = TypeVar("T")


def not_found(name: str, version: int | None = None, meant: Sequence[str] = ()) -> NotFound:
    """No published workflow `name` (or no such `version` of it); `meant`: the names close to
    a misspelt one, said in the message and listed in `details["meant"]`."""
    suffix = "" if version is None else f" version {version}"
    hint = f"; {did_you_mean(meant)}" if meant else ""
    return NotFound(
        f"no published workflow {name!r}{suffix}{hint}",
        code="workflow_not_found",
        details={"meant": list(meant)} if meant else None,
    )


async def unknown_workflow(
    store: Store, name: str, version: int | None = None, *, users_only: bool = False
) -> NotFound:
    """`not_found`, with the published workflows close to `name` when none has that name, or
    the versions of `name` when it has no `version` (one or two reads, on this refusal only).
    The close names include the engine's own workflows unless `users_only` (what a deployment
    or a serving version is asked of: the engine's own are never deployed). Front doors that
    add a fix of their own add none when `details["meant"]` or `details["versions"]` is
    there."""
    names = [
        s.name
        for s in await store.workflow_summaries()
        if not (users_only and s.name in RESERVED_WORKFLOWS)
    ]
    if name in names:  # the workflow is there: its version is not
        numbers = sorted(row[1] for row in await store.list_versions(name))
        if version is None or not numbers:
            return not_found(name, version)
        return no_version(name, version, numbers)
    return not_found(name, version, close_names(name, names))


def no_version(name: str, version: int, numbers: Sequence[int]) -> NotFound:
    """`workflow_not_found` for a `version` of `name` never published, naming the versions
    there are (`numbers`, sorted) in the message and `details.versions`: what a submission, a
    version's read and a run filter naming it all answer."""
    there = (
        f"its only version is {numbers[0]}"
        if len(numbers) == 1
        else f"its versions are {version_spans(numbers)}"
    )
    return NotFound(
        f"workflow {name!r} has no version {version}; {there}",
        code="workflow_not_found",
        details={"versions": list(numbers)},
    )


def version_spans(versions: Sequence[int]) -> str:
    """Sorted version numbers in few words: `1 to 3`, `1 to 3, 5` (versions run 1, 2, 3, … in
    practice, so this is one span)."""
    spans: list[list[int]] = []
    for number in versions:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a} to {b}" for a, b in spans)


async def require_published(store: Store, name: str, version: int | None = None) -> None:
    """Refuse (`workflow_not_found`) a run filter naming a workflow, or a version of it, that
    was never published: no run can match it, and "0 runs" would hide the typo. The refusal
    of a version names the versions there are (in the message and `details.versions`)."""
    numbers = sorted(row[1] for row in await store.list_versions(name))
    if not numbers:
        raise await unknown_workflow(store, name)
    if version is None or version in numbers:
        return
    raise no_version(name, version, numbers)


def serving_hint(name: str, version: int, serving: ServingRecord | None) -> str | None:
    """None when `version` of `name` serves new runs (or no routing row says otherwise);
    else the sentence saying which version serves and how to make this one serve. Written
    here once: the REST answer of a publish carries it (`PublishResult.hint`) and
    `schemabridge workflows publish` prints it as it is, so it names the command as well as
    the request."""
    if serving is None or serving.serving_version == version:
        return None
    now = serving.serving_version
    if serving.deployment_id is not None and serving.candidate_version == version:
        return (
            f"{name} v{version} is not serving yet: deployment {serving.deployment_id} gives "
            f"it {serving.candidate_weight:g} % of new runs"
            f"{rest_words(serving.candidate_weight, now, 'gets the rest')}, and it "
            "serves them all once the deployment promotes it"
        )
    deploy = (
        f"`schemabridge deployments start {name} --version {version}` "
        f'(`POST /workflows/{name}/deployments` with `{{"version": {version}}}`)'
    )
    if serving.deployment_id is not None:
        return (
            f"{name} v{version} is NOT serving yet: new runs get v{now}, and deployment "
            f"{serving.deployment_id} gives v{serving.candidate_version} "
            f"{serving.candidate_weight:g} % of them. Once that deployment has ended, deploy "
            f"it: {deploy}"
        )
    return (
        f"{name} v{version} is NOT serving yet: new runs get v{now}. Deploy it: {deploy}; "
        f"or, as an admin, make it serve at once: `schemabridge workflows serving {name} "
        f'{version}` (`POST /workflows/{name}/serving` with `{{"version": {version}}}`)'
    )


def _as_text(documents: Documents) -> str:
    try:
        return json.dumps(documents, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problem = Problem("", f"The document is not JSON: {exc}.", "json_syntax", SOURCE)
        raise DefinitionError([problem]) from exc


class WorkflowOperations:
    """Workflows: publish, validate, list, read versions, and the graph of a version."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._checks = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="workflow-check")

    async def _off_loop(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`work(*args, **kwargs)` on a check thread (`CHECK_THREADS`), in this task's
        context (the checks' work bounds are context variables). The loop serves other
        requests meanwhile: the thread takes the GIL in turns with it."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, work, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._checks, call)

    async def _problems(self, documents: Documents) -> tuple[list[Problem], list[Workflow]]:
        try:
            text = _as_text(documents)
        except DefinitionError as exc:
            return exc.problems, []
        known = [w.name for w in await self._runtime.store.workflow_summaries()]
        report = await self._off_loop(
            check_documents,
            [(SOURCE, text)],
            settings=self._runtime.settings,
            known_workflows=known,
            egress=self._runtime.http.egress,
        )
        if not report.valid:
            return report.problems, report.workflows
        # Valid, so a list's workflows are its items in order.
        workflows = report.workflows
        bases = [f"/{i}" for i in range(len(workflows))] if isinstance(documents, list) else [""]
        problems = validation_versions.version_problems(
            list(zip(bases, workflows, strict=True)), await self._versions_after(workflows)
        )
        stamped = [dataclasses.replace(p, source=SOURCE) for p in problems]
        return stamped, [] if stamped else workflows

    async def _versions_after(self, workflows: list[Workflow]) -> dict[str, set[int]]:
        """The versions of each child workflow pinned as `name@N` that exist once `workflows`
        are published: the stored ones, and the one publishing adds to a child published with
        its parent unless it is identical to its latest version (which publishing keeps)."""
        batch = {wf.name: wf for wf in workflows}
        result: dict[str, set[int]] = {}
        for name in validation_versions.pinned_children(workflows):
            stored = await self._runtime.store.list_versions(name)  # newest first
            result[name] = {version for _, version, _, _ in stored}
            if name in batch:
                latest = stored[0] if stored else None
                if latest is None or latest[2] != definition_hash(stored_document(batch[name])):
                    result[name].add(1 if latest is None else latest[1] + 1)
        return result

    @store_boundary
    async def validate(self, documents: Documents) -> list[Problem]:
        """Every problem of `documents` (one workflow document or a list), as `publish` would
        find them; nothing is stored. Empty: valid. A SPAWNER's child workflow may be among
        the documents or already published. Pointers are into `documents` as given (in a list
        they start with the workflow's index)."""
        problems, _ = await self._problems(documents)
        return problems

    @store_boundary
    async def preview(self, documents: Documents) -> tuple[list[Problem], list[GraphView]]:
        """What an editor shows before publishing: every problem (as `validate`) and the
        graph of each document as written (`graph.sketch`: drawn even when invalid, so the
        problems can be pointed at on it), in the order given. Nothing is stored."""
        problems, _ = await self._problems(documents)
        drafts = documents if isinstance(documents, list) else [documents]
        return problems, await self._off_loop(lambda: [graph.sketch(d) for d in drafts])

    @store_boundary
    async def publish(
        self, documents: Documents, *, actor: str | None = None
    ) -> list[PublishResult]:
        """Validate `documents` and store each workflow as a new immutable version, all in one
        transaction; a workflow identical to its latest version keeps that version
        (`created` False). One result per workflow, in the order given. Publishing moves no
        traffic: a new version gets runs only through a deployment, an operator's switch
        (`deployments.set_serving`) or a submission that names it, except the first version
        of a workflow, which serves at once. Each result says whether its version serves
        (`serving`, `serving_version`) and, when not, how to make it (`serving_hint`).

        Invalid documents raise `DefinitionError` with every problem (nothing is stored).
        Each version created is an audit event (`workflow.published`) of `actor`, who
        publishes (`key:<id>`, `cli`; docs/security.md, 'Audit').
        """
        return await self._publish(documents, serve_as=None, actor=actor)

    @store_boundary
    async def publish_serving(self, documents: Documents, *, actor: str) -> list[PublishResult]:
        """`publish`, and in the same transaction make each version published the serving
        one of its workflow, recorded (and logged) as `actor`'s doing — except where a
        deployment of the workflow is running, whose routing is left alone (logged too).

        Only for `serve --demo`, which publishes its examples at a new downstream address on
        every start and must then run them; anything else moves traffic through a deployment
        or an explicit `deployments.set_serving`."""
        return await self._publish(documents, serve_as=actor, actor=actor)

    async def _publish(
        self, documents: Documents, *, serve_as: str | None, actor: str | None
    ) -> list[PublishResult]:
        problems, workflows = await self._problems(documents)
        if problems:
            raise DefinitionError(problems)
        published = await self._runtime.store.publish_all(workflows, serve_as=serve_as, actor=actor)
        # Read after the commit, one primary-key read per workflow (a publish is rare): what
        # serves as the answer is sent, a switch racing the publish included. It reports;
        # it decides nothing.
        rows = {
            name: await self._runtime.store.serving(name) for name in {r.name for r, _ in published}
        }
        results = []
        for record, created in published:
            row = rows[record.name]
            results.append(
                PublishResult(
                    name=record.name,
                    version=record.version,
                    created=created,
                    serving=row is None or row.serving_version == record.version,
                    serving_version=None if row is None else row.serving_version,
                    hint=serving_hint(record.name, record.version, row),
                )
            )
        return results

    @store_boundary
    async def list(self, *, system: bool = False) -> list[WorkflowSummary]:
        """Every published workflow, by name; the engine's own (`gradual_deploy`) only with
        `system`: users neither publish nor run them, so lists and typo fixes leave them out
        (their runs and versions stay readable by name)."""
        return [
            WorkflowSummary(
                name=s.name,
                latest_version=s.latest_version,
                versions=s.versions,
                created_at=s.created_at,
                updated_at=s.updated_at,
                serving_version=s.serving_version,
            )
            for s in await self._runtime.store.workflow_summaries()
            if system or s.name not in RESERVED_WORKFLOWS
        ]

    async def _version(self, name: str, version: int | None) -> VersionRecord:
        if version is not None and (isinstance(version, bool) or version < 1):
            raise not_found(name, version)
        try:
            return await self._runtime.store.get_version(name, version)
        except UnknownWorkflow as exc:
            raise await unknown_workflow(self._runtime.store, name, version) from exc

    @store_boundary
    async def get(self, name: str, version: int | None = None) -> VersionDetail:
        """A published version with its document (the latest when `version` is None) and the
        workflow's serving version. Unknown name or version:
        `NotFound(code="workflow_not_found")`."""
        record = await self._version(name, version)
        serving = await self._runtime.store.serving(name)
        return VersionDetail(
            name=record.name,
            version=record.version,
            definition_hash=record.definition_hash,
            created_at=record.created_at,
            document=record.workflow.model_dump(mode="json", by_alias=True, exclude_none=True),
            serving_version=None if serving is None else serving.serving_version,
        )

    @store_boundary
    async def versions(self, name: str) -> builtins.list[VersionSummary]:
        """Every version of `name`, newest first. Unknown name: `NotFound`."""
        rows = await self._runtime.store.list_versions(name)
        if not rows:
            raise await unknown_workflow(self._runtime.store, name)
        return [
            VersionSummary(name=n, version=v, definition_hash=h, created_at=at)
            for n, v, h, at in rows
        ]

    @store_boundary
    async def graph(self, name: str, version: int | None = None) -> GraphView:
        """The DAG of a version (the latest when `version` is None) laid out in layers, with
        every vertex's position (see `engine.operations.graph`)."""
        record = await self._version(name, version)
        return await self._off_loop(graph.layout, record.workflow, record.version)
