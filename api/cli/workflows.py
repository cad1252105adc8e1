"""`schemabridge workflows publish | list | versions | show | serving` on the REST API.

`publish` sends every document of every file in one request, so a parent and the child
workflows its spawners start are published together (one transaction); an invalid document
is exit 2 with each problem's file and JSON pointer. A later version gets no runs until a
deployment moves them to it, and `publish` says so with the command that starts one (the
API's answer says which version serves and how to make the new one serve: the CLI shows
it as it is). `show`
prints a version's document and its graph, layer by layer; `serving` shows which version new
runs get, or switches it at once (admin).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.problem_text import problem_line, split_first, where
from api.cli.remote import (
    EXIT_CODES_HELP,
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
    print_page,
    render,
    say,
    stdout,
    table,
)
from api.cli.run_options import split_version
from api.cli.target import DEFAULT_API_URL
from api.cli.text import MISSING, moment, relative
from api.cli.validate import INPUT_SUFFIX
from schemas.counts import plural

if TYPE_CHECKING:
    from rich.table import Table

    from api.cli.client import ApiClient
    from api.cli.wire import (
        GraphView,
        Page,
        PublishResult,
        ServingView,
        VersionDetail,
        VersionSummary,
        WorkflowSummary,
    )
    from schemas.errors import Problem

workflows_app = typer.Typer(
    help="Workflows on the REST API: publish, list, versions, show.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
)

NameArgument = Annotated[str, typer.Argument(help="The workflow's name.", metavar="NAME")]


@dataclass(frozen=True)
class Origin:
    """Where a document of a publish came from: its file and, in a file holding a list, its
    index there."""

    file: str
    index: int | None

    def __str__(self) -> str:
        return self.file if self.index is None else f"{self.file}[{self.index}]"


def read_documents(files: list[Path]) -> tuple[list[Any], list[Origin]]:
    """Every document of `files` in order, with where each came from (exit 2 for a file that
    cannot be read or is not JSON)."""
    # The loader of `schemabridge validate`, imported here: most commands never need it.
    from engine.validation import json_text
    from engine.validation.common import Limits
    from schemas.json_depth import HARD_MAX_NESTING_DEPTH

    # The server checks sizes and depth against its own settings, which this process may not
    # share: here only what reading the file can tell (syntax, encoding, a key written twice,
    # which json.loads would collapse to its last value before the server could see it).
    limits = Limits(sys.maxsize, sys.maxsize, HARD_MAX_NESTING_DEPTH, sys.maxsize, sys.maxsize)
    documents: list[Any] = []
    origins: list[Origin] = []
    for path in files:
        try:
            raw = path.read_bytes()
        except OSError as error:
            fail(f"cannot read {path}: {error.strerror or error}", ExitCode.USAGE)
        loaded = json_text.load(raw, limits)
        if loaded.problems:
            fail(_unreadable(path, loaded.problems), ExitCode.USAGE)
        content = loaded.data
        if isinstance(content, list):
            documents += content
            origins += [Origin(str(path), i) for i in range(len(content))]
        else:
            documents.append(content)
            origins.append(Origin(str(path), None))
    return documents, origins


def _unreadable(path: Path, problems: list[Problem]) -> str:
    """A file's problems as `validate` says them: one line each, with its pointer."""
    head = f"{path}: {plural(len(problems), 'problem')}; nothing was published"
    lines = [problem_line(p.pointer, p.message, p.code, str(path)) for p in problems]
    return "\n".join([head, *lines])


def _located(failure: ApiFailure, origins: list[Origin]) -> ApiFailure:
    """The API's problems (pointers into the list sent) pointed at the files instead."""
    problems = failure.details.get("problems")
    if failure.code != "invalid_workflow" or not isinstance(problems, list):
        return failure
    lines = [f"{plural(len(problems), 'problem')} in the workflows given; nothing was published"]
    for problem in problems:
        pointer, within = str(problem.get("pointer", "")), ""
        head, rest = split_first(pointer)
        if head.isdigit() and int(head) < len(origins):
            pointer, within = rest, str(origins[int(head)])
        message = _files_named(str(problem.get("message", "")), origins)
        lines.append(problem_line(pointer, message, str(problem.get("code", "")), within))
    return ApiFailure("\n".join(lines), ExitCode.USAGE, status=failure.status, code=failure.code)


_IN_REQUEST = re.compile(r"request at /(\d+)(/[^\s);,]*)?")


def _files_named(message: str, origins: list[Origin]) -> str:
    """A message's own pointers into the list sent ("already used (request at /0/name)")
    said as files: "already used (tour-v1.json at /name)"."""

    def file_of(found: re.Match[str]) -> str:
        index = int(found[1])
        if index >= len(origins):
            return found[0]
        return f"{origins[index]} at {where(found[2] or '')}"

    return _IN_REQUEST.sub(file_of, message)


@workflows_app.command("publish", epilog=EXIT_CODES_HELP)
def publish(
    files: Annotated[
        list[Path],
        typer.Argument(help="Workflow files (a document or a list each).", metavar="FILE"),
    ],
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Publish workflows as new immutable versions (identical content keeps its version).

    Every document of every file goes in one request: all are published, or none. Files
    named *.input.json are run inputs, as `validate` reads them: left out, with a note."""
    remote = Remote(api_url, api_key, output, debug)
    workflows = [path for path in files if not path.name.endswith(INPUT_SUFFIX)]
    if not workflows:
        fail("no workflow file among those given: only run inputs (*.input.json)", ExitCode.USAGE)
    for path in files:
        if path.name.endswith(INPUT_SUFFIX):
            say(f"left out {path}: a run input (*{INPUT_SUFFIX}), not a workflow")
    documents, origins = read_documents(workflows)

    async def action(api: ApiClient) -> list[PublishResult]:
        try:
            return await api.workflows.publish(documents)
        except ApiFailure as failure:
            raise _located(failure, origins) from None

    results = call(remote, action)
    if remote.json:
        print_json(dump(results))
        return
    rows = [
        [r.name, f"v{r.version}", "published" if r.created else "unchanged", _serves(r)]
        for r in results
    ]
    render(stdout(), table(["WORKFLOW", "VERSION", "RESULT", "SERVING"], rows))
    for result in results:
        if result.hint:  # the server's sentence, also what a REST client gets
            say(result.hint)


def _serves(result: PublishResult) -> str:
    """Whether new runs get the version published ("yes"), or which one they get (an API
    that does not say: unknown)."""
    if result.serving:
        return "yes"
    if result.serving_version is None:
        return MISSING
    return f"no (v{result.serving_version} serves)"


@workflows_app.command("list", epilog=EXIT_CODES_HELP)
def list_workflows(
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Every published workflow: its latest version and when it was published."""
    remote = Remote(api_url, api_key, output, debug)
    found = call(remote, lambda api: api.workflows.list())

    def rows(items: list[WorkflowSummary]) -> Table:
        now = time.time()
        return table(
            ["WORKFLOW", "LATEST", "SERVING", "VERSIONS", "UPDATED"],
            [
                [
                    w.name,
                    f"v{w.latest_version}",
                    MISSING if w.serving_version is None else f"v{w.serving_version}",
                    f"{w.versions:,}",
                    relative(w.updated_at, now),
                ]
                for w in items
            ],
        )

    print_page(
        remote, found, rows, "no workflows published yet: schemabridge workflows publish FILE..."
    )


@workflows_app.command("versions", epilog=EXIT_CODES_HELP)
def versions(
    name: NameArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Every version of a workflow, newest first, with the one new runs get (SERVES)."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> tuple[Page[VersionSummary], ServingView]:
        return await api.workflows.versions(name), await api.deployments.serving(name)

    found, serving = call(remote, action, workflow=name)

    def rows(items: list[VersionSummary]) -> Table:
        now = time.time()
        return table(
            ["VERSION", "SERVES", "HASH", "PUBLISHED"],
            [
                [
                    f"v{v.version}",
                    serving_role(serving, v.version) or MISSING,
                    v.definition_hash[:12],
                    moment(v.created_at, now),
                ]
                for v in items
            ],
        )

    print_page(remote, found, rows, f"{name} has no versions")


def serving_role(serving: ServingView, version: int) -> str | None:
    """What `version` is to new runs: "serving", "candidate (10 %)" while a deployment
    routes some to it, else None."""
    if version == serving.serving_version:
        return "serving"
    if version == serving.candidate_version:
        return f"candidate ({serving.candidate_weight * 100:g} %)"
    return None


def graph_table(graph: GraphView) -> Any:
    """The DAG layer by layer: each vertex with its type, what it waits for and, for a
    SPAWNER, the workflow it starts."""
    nodes = sorted(graph.nodes, key=lambda node: (node.layer, node.order))
    rows = [
        [
            str(node.layer + 1),
            node.id,
            node.type,
            ", ".join(node.depends_on) or MISSING,
            node.workflow or MISSING,
        ]
        for node in nodes
    ]
    return table(["LAYER", "VERTEX", "TYPE", "AFTER", "STARTS"], rows)


@workflows_app.command("show", epilog=EXIT_CODES_HELP)
def show(
    workflow: Annotated[
        str,
        typer.Argument(
            help="NAME (the latest version, which may not be the one serving) or NAME@VERSION.",
            metavar="NAME[@V]",
        ),
    ],
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A workflow version: its graph, layer by layer, and its document."""
    remote = Remote(api_url, api_key, output, debug)
    name, version = split_version(workflow)

    async def action(api: ApiClient) -> tuple[VersionDetail, GraphView, ServingView]:
        detail = await api.workflows.get(name, version)
        graph = await api.workflows.graph(name, detail.version)
        return detail, graph, await api.deployments.serving(name)

    detail, graph, serving = call(remote, action, workflow=name)
    if remote.json:
        print_json(dump(detail))
        return
    console = stdout()
    published = moment(detail.created_at, time.time())
    console.print(
        f"{detail.name} v{detail.version}  published {published}  "
        f"sha256 {detail.definition_hash[:12]}",
        markup=False,
    )
    # The latest version is not always the one new runs get: say which is.
    role = serving_role(serving, detail.version)
    said = f"v{serving.serving_version} serves new runs"
    console.print(
        f"{role}" if role == "serving" else f"{role or 'not serving'}: {said}", markup=False
    )
    console.print(f"graph: {plural(len(graph.nodes), 'vertex', 'vertices')}", markup=False)
    render(console, graph_table(graph))
    console.print("document:", markup=False)
    console.print(json.dumps(detail.document, indent=2, ensure_ascii=False), markup=False)


@workflows_app.command("serving", epilog=EXIT_CODES_HELP)
def serving(
    name: NameArgument,
    version: Annotated[
        int | None,
        typer.Argument(
            help="Make this version serve new runs at once (admin); left out: show which does.",
            metavar="VERSION",
            min=1,
        ),
    ] = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Which version of a workflow new runs get, and a running deployment's candidate; with
    VERSION, switch to it at once (admin, recorded with the key; refused while a deployment
    of the workflow runs: a deployment is the gradual way; the version that serves already:
    says since when and by whom, changes nothing, exit 0)."""
    remote = Remote(api_url, api_key, output, debug)
    # `workflow=name`: a version or a name that does not exist gets its fix on the error's
    # line (the command that lists the versions, or the name meant), as `deployments start`.
    if version is None:
        found = call(remote, lambda api: api.deployments.serving(name), workflow=name)
        if remote.json:
            print_json(dump(found))
            return
        stdout().print(_serving_line(found), markup=False)
        return
    switched = call(remote, lambda api: api.deployments.set_serving(name, version), workflow=name)
    if remote.json:
        print_json(dump(switched))
        return
    # The API's sentence, a switch or nothing to do (the version served already), as a
    # REST client reads it.
    stdout().print(switched.message, markup=False)


def _serving_line(view: ServingView) -> str:
    now = time.time()
    by = f" by {view.updated_by}" if view.updated_by else ""
    line = f"{view.workflow}: v{view.serving_version} serves new runs"
    line += f" (since {moment(view.updated_at, now)}{by})"
    if view.candidate_version is not None and view.deployment_id is not None:
        line += (
            f"; deployment {view.deployment_id} gives v{view.candidate_version} "
            f"{view.candidate_weight:g} % of them"
        )
    return line
