"""Phase 3 of validation: the dependency graph of each workflow, and links between workflows.

These checks read the parsed JSON defensively rather than the typed models, so they still run
(and report) when the same document also has schema problems: an author sees a cycle and a
typo in one pass. Anything malformed is skipped here because phase 2 already reports it.

Per workflow (networkx `DiGraph`, edge `dependency → dependant`):
- its name is not reserved for a system workflow, and no SPAWNER starts one;
- every `dependsOn` target exists, and no vertex depends on itself;
- no cycles: each strongly connected component is reported once, with one of its cycles named
  vertex by vertex in run order (`a → b → c → a`, each waiting for the one before);
- a MERGE depends on exactly one SPAWNER;
- `failureTolerance` only with `tolerateChildFailures` (otherwise nothing is tolerated).

Across the documents validated together:
- workflow names are unique;
- a SPAWNER's child workflow is among them or already known (published);
- spawners do not start their own workflow again, directly or through other workflows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from engine.validation.common import Code, did_you_mean, join, quoted_list
from engine.validation.type_case import meant_type
from schemas.close_names import close_names
from schemas.definitions import RESERVED_WORKFLOWS
from schemas.errors import Problem


@dataclass(frozen=True)
class RawVertex:
    """What the graph checks need from one vertex, read defensively from JSON."""

    id: str
    type: str | None
    """GATEWAY, SPAWNER or MERGE; None when missing or invalid (reported by the schema)."""
    depends_on: tuple[tuple[int, str], ...]
    """(index in the dependsOn array, target id) for each string entry."""
    config: Any


@dataclass
class RawWorkflow:
    """One workflow object of a document, with its dependency graph."""

    source: str
    base: str
    """JSON pointer of the workflow object in its document ("" or "/<index>")."""
    name: str | None
    vertices: dict[str, RawVertex]
    graph: Any = None
    """networkx DiGraph over the vertex ids, edges dependency → dependant (valid edges only)."""
    input_schema: Any = None
    """The workflow's `inputSchema` as written (None when absent)."""
    _ancestry: tuple[dict[str, int], dict[str, int]] | None = field(default=None, repr=False)

    def at(self, *parts: str | int) -> str:
        """Pointer to `parts` inside this workflow."""
        return join(self.base, *parts)

    def is_ancestor(self, candidate: str, vertex_id: str) -> bool:
        """Whether `vertex_id` reaches `candidate` through dependsOn (directly or not)."""
        if self._ancestry is None:
            self._ancestry = _ancestry(self.graph)
        bits, ancestors = self._ancestry
        return candidate in bits and bool(ancestors[vertex_id] & bits[candidate])

    def misspelt_dependency(self, target: str, vertex_id: str) -> tuple[str, str] | None:
        """(vertex, entry) when `target` is not an ancestor of `vertex_id` because a dependsOn
        entry of `vertex_id` or of one of its ancestors names no vertex and is close to
        `target` ("colect" for "collect"): that typo is the one fix, which "add it to
        dependsOn" would leave in place. None otherwise (only read on that refusal)."""
        for owner in [vertex_id, *nx.ancestors(self.graph, vertex_id)]:
            for _, entry in self.vertices[owner].depends_on:
                if entry not in self.vertices and target in close_names(entry, [target]):
                    return owner, entry
        return None


def _ancestry(graph: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(each vertex's bit, each vertex's ancestors as a bitset of those bits).

    One pass in topological order over the condensation (strongly connected components
    collapsed, so it works on cyclic graphs too): linear in the graph's size, where asking
    networkx for each vertex's ancestors separately would be quadratic on long chains.
    """
    bit = {vid: 1 << i for i, vid in enumerate(graph)}
    condensed = nx.condensation(graph)
    reach: dict[int, int] = {}  # component → bits of its members and all their ancestors
    result: dict[str, int] = {}
    for component in nx.topological_sort(condensed):
        members = condensed.nodes[component]["members"]
        before = 0
        for parent in condensed.predecessors(component):
            before |= reach[parent]
        member_bits = sum(bit[m] for m in members)
        reach[component] = before | member_bits
        # Inside a cycle every member reaches every other one (and itself).
        own = member_bits if len(members) > 1 else 0
        for member in members:
            result[member] = before | own
    return bit, result


def workflow_objects(data: Any) -> list[tuple[str, dict[str, Any]]]:
    """(pointer, object) for each workflow object of a parsed file (one object or a list)."""
    if isinstance(data, dict):
        return [("", data)]
    if isinstance(data, list):
        return [(f"/{i}", item) for i, item in enumerate(data) if isinstance(item, dict)]
    return []


def read_workflow(source: str, base: str, obj: dict[str, Any]) -> RawWorkflow:
    """Extract the graph view of a workflow object, ignoring malformed parts."""
    name = obj.get("name") if isinstance(obj.get("name"), str) else None
    vertices: dict[str, RawVertex] = {}
    raw_vertices = obj.get("vertices")
    if isinstance(raw_vertices, dict):
        for vid, raw in raw_vertices.items():
            vertices[vid] = _read_vertex(vid, raw)
    graph = nx.DiGraph()
    graph.add_nodes_from(vertices)
    for vertex in vertices.values():
        for _, target in vertex.depends_on:
            if target in vertices and target != vertex.id:
                graph.add_edge(target, vertex.id)
    return RawWorkflow(source, base, name, vertices, graph, obj.get("inputSchema"))


def _read_vertex(vid: str, raw: Any) -> RawVertex:
    if not isinstance(raw, dict):
        return RawVertex(vid, None, (), None)
    vtype = raw.get("type")
    deps = raw.get("dependsOn")
    depends_on = tuple(
        (i, d) for i, d in enumerate(deps if isinstance(deps, list) else []) if isinstance(d, str)
    )
    # "gateway" is read as GATEWAY: the schema reports the case, the rest is checked as meant.
    return RawVertex(vid, meant_type(vtype), depends_on, raw.get("config"))


# ── one workflow ────────────────────────────────────────────────────────────────────────────


def workflow_problems(wf: RawWorkflow) -> list[Problem]:
    """Every graph problem inside one workflow."""
    problems: list[Problem] = []
    if wf.name in RESERVED_WORKFLOWS:
        problems.append(
            Problem(
                wf.at("name"),
                f'The workflow name "{wf.name}" is reserved for the engine\'s own system '
                "workflow; choose another name.",
                Code.RESERVED_WORKFLOW,
            )
        )
    for vertex, child in _spawners(wf):
        if child in RESERVED_WORKFLOWS:
            problems.append(
                Problem(
                    wf.at("vertices", vertex.id, "config", "workflow"),
                    f'SPAWNER "{vertex.id}" starts "{child}", the engine\'s own system '
                    "workflow, which only the engine starts.",
                    Code.RESERVED_WORKFLOW,
                )
            )
    problems.extend(_dependency_problems(wf))
    problems.extend(_cycle_problems(wf))
    for vertex in wf.vertices.values():
        if vertex.type == "MERGE":
            problems.extend(_merge_problems(wf, vertex))
    return problems


def _first_entries(vertex: RawVertex) -> list[tuple[int, str]]:
    """`vertex.depends_on` without the entries that repeat an earlier one: the schema
    reports each of those once, at its pointer, and nothing else should count it again."""
    seen: set[str] = set()
    first = []
    for index, target in vertex.depends_on:
        if target not in seen:
            seen.add(target)
            first.append((index, target))
    return first


def _dependency_problems(wf: RawWorkflow) -> Iterator[Problem]:
    for vertex in wf.vertices.values():
        for index, target in _first_entries(vertex):
            at = wf.at("vertices", vertex.id, "dependsOn", index)
            if target == vertex.id:
                message = f'Vertex "{vertex.id}" depends on itself; remove it from dependsOn.'
                yield Problem(at, message, Code.SELF_DEPENDENCY)
            elif target not in wf.vertices:
                hint = did_you_mean(target, wf.vertices)
                yield Problem(
                    at,
                    f'Vertex "{vertex.id}" depends on "{target}", which is not a vertex of this '
                    f"workflow.{hint}",
                    Code.UNKNOWN_DEPENDENCY,
                )


def _cycle_problems(wf: RawWorkflow) -> Iterator[Problem]:
    order = {vid: i for i, vid in enumerate(wf.vertices)}
    components = [c for c in nx.strongly_connected_components(wf.graph) if len(c) > 1]
    for component in sorted(components, key=lambda c: min(order[v] for v in c)):
        start = min(component, key=order.__getitem__)
        edges = nx.find_cycle(wf.graph.subgraph(component), source=start)
        cycle = _rotate([u for u, _ in edges], order)
        # The dependsOn entry of the first vertex that names the last one closes the loop.
        first, last = cycle[0], cycle[-1]
        index = next(i for i, d in wf.vertices[first].depends_on if d == last)
        path = " → ".join([*cycle, first])
        yield Problem(
            wf.at("vertices", first, "dependsOn", index),
            f"dependsOn forms a cycle: {path} (each vertex waits for the one before it), so "
            "none of these vertices can ever start.",
            Code.CYCLE,
        )


def _rotate(cycle: list[str], order: dict[str, int]) -> list[str]:
    """The same cycle, starting at its vertex that comes first in the document."""
    start = min(range(len(cycle)), key=lambda i: order[cycle[i]])
    return cycle[start:] + cycle[:start]


def _what_merge_depends_on(wf: RawWorkflow, deps: list[str], spawners: list[str]) -> str:
    """What a MERGE without exactly one SPAWNER depends on, named: "none" alone would read as
    if its dependsOn were empty when it names a GATEWAY."""
    if spawners:
        return f"{len(spawners)} SPAWNERs ({quoted_list(spawners)})"
    if not deps:
        return "nothing"
    named = [f'{wf.vertices[d].type} "{d}"' for d in dict.fromkeys(deps)]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"no SPAWNER, only on {listed}"


def _merge_problems(wf: RawWorkflow, vertex: RawVertex) -> Iterator[Problem]:
    deps = [d for _, d in _first_entries(vertex)]
    spawners = [d for d in deps if d in wf.vertices and wf.vertices[d].type == "SPAWNER"]
    unclear = any(d not in wf.vertices or wf.vertices[d].type is None for d in deps)
    if len(spawners) != 1 and not (unclear and not spawners):
        at = wf.at("vertices", vertex.id, "dependsOn" if deps else "type")
        yield Problem(
            at,
            f'MERGE "{vertex.id}" must depend on exactly one SPAWNER (the fan-out it joins); '
            f"it depends on {_what_merge_depends_on(wf, deps, spawners)}.",
            Code.MERGE_SPAWNER,
        )
    config = vertex.config
    if (
        isinstance(config, dict)
        and "failureTolerance" in config
        and not config.get("tolerateChildFailures")
    ):
        yield Problem(
            wf.at("vertices", vertex.id, "config", "failureTolerance"),
            "failureTolerance has no effect without tolerateChildFailures; add "
            'tolerateChildFailures (e.g. ["FAILED"]) to say which child statuses it tolerates.',
            Code.INEFFECTIVE_TOLERANCE,
        )


# ── across documents ────────────────────────────────────────────────────────────────────────


def batch_problems(
    workflows: list[RawWorkflow], known_workflows: Collection[str] | None
) -> list[tuple[RawWorkflow, Problem]]:
    """Problems between workflows validated together, each with the workflow it is in.

    `known_workflows` None: what is published cannot be seen (offline validation), so a
    child workflow outside the batch is not a problem here but one of `unseen_children`."""
    problems: list[tuple[RawWorkflow, Problem]] = []
    first_by_name: dict[str, RawWorkflow] = {}
    for wf in workflows:
        if wf.name is None:
            continue
        if wf.name in first_by_name:
            other = first_by_name[wf.name]
            where = f"{other.source} at {other.at('name')}"
            message = (
                f'The workflow name "{wf.name}" is already used ({where}); names must be unique.'
            )
            problems.append((wf, Problem(wf.at("name"), message, Code.DUPLICATE_WORKFLOW)))
        else:
            first_by_name[wf.name] = wf
    if known_workflows is not None:
        known = {k.split("@", 1)[0] for k in known_workflows}
        problems.extend(_child_problems(workflows, set(first_by_name), known))
    problems.extend(_workflow_cycle_problems(workflows, first_by_name))
    return problems


def spawned(wf: RawWorkflow) -> set[str]:
    """The names of the workflows the SPAWNERs of `wf` start (`name@N` as `name`)."""
    return {child for _, child in _spawners(wf)}


def _spawners(wf: RawWorkflow) -> Iterator[tuple[RawVertex, str]]:
    """(vertex, child workflow name) for each SPAWNER with a readable `workflow`."""
    for vertex in wf.vertices.values():
        if vertex.type == "SPAWNER" and isinstance(vertex.config, dict):
            child = vertex.config.get("workflow")
            if isinstance(child, str) and child:
                yield vertex, child.split("@", 1)[0]


def _child_problems(
    workflows: list[RawWorkflow], batch: set[str], known: set[str]
) -> Iterator[tuple[RawWorkflow, Problem]]:
    for wf in workflows:
        for vertex, child in _spawners(wf):
            if child in batch or child in known or child in RESERVED_WORKFLOWS:
                continue
            hint = did_you_mean(child, batch | known)
            yield (
                wf,
                Problem(
                    wf.at("vertices", vertex.id, "config", "workflow"),
                    f'SPAWNER "{vertex.id}" starts workflow "{child}", which is neither among the '
                    f"documents validated together nor published; validate its file with this one."
                    f"{hint}",
                    Code.UNKNOWN_WORKFLOW,
                ),
            )


def unseen_children(workflows: list[RawWorkflow]) -> list[tuple[RawWorkflow, Problem]]:
    """Notes, not problems, for SPAWNERs whose child workflow is not among `workflows` when
    what is published cannot be seen: the child may well be published, so only the server
    can tell, and the note says how to ask it."""
    batch = {wf.name for wf in workflows if wf.name is not None}
    notes: list[tuple[RawWorkflow, Problem]] = []
    for wf in workflows:
        for vertex, child in _spawners(wf):
            if child in batch or child in RESERVED_WORKFLOWS:
                continue
            message = (
                f'SPAWNER "{vertex.id}" starts workflow "{child}", which is not among the '
                "documents given, and offline validation cannot see published workflows: "
                f"`schemabridge workflows versions {child} --api-url URL` says whether the "
                "server has it, or validate its file with this one."
                f"{did_you_mean(child, batch)}"
            )
            pointer = wf.at("vertices", vertex.id, "config", "workflow")
            notes.append((wf, Problem(pointer, message, Code.UNKNOWN_WORKFLOW)))
    return notes


def _workflow_cycle_problems(
    workflows: list[RawWorkflow], by_name: dict[str, RawWorkflow]
) -> Iterator[tuple[RawWorkflow, Problem]]:
    calls = nx.DiGraph()
    first_spawner: dict[tuple[str, str], RawVertex] = {}
    for wf in by_name.values():
        for vertex, child in _spawners(wf):
            if child in by_name:
                calls.add_edge(wf.name, child)
                first_spawner.setdefault((str(wf.name), child), vertex)
    order = {wf.name: i for i, wf in enumerate(workflows) if wf.name is not None}
    loops = [c for c in nx.strongly_connected_components(calls) if len(c) > 1]
    loops += [{u} for u, v in nx.selfloop_edges(calls)]
    for component in sorted(loops, key=lambda c: min(order[n] for n in c)):
        start = min(component, key=order.__getitem__)
        if len(component) == 1:
            cycle = [start]
        else:
            edges = nx.find_cycle(calls.subgraph(component), source=start)
            cycle = _rotate([u for u, _ in edges], order)
        parent = by_name[cycle[0]]
        child = cycle[1] if len(cycle) > 1 else cycle[0]
        spawner = first_spawner[(cycle[0], child)]
        path = " → ".join([*cycle, cycle[0]])
        yield (
            parent,
            Problem(
                parent.at("vertices", spawner.id, "config", "workflow"),
                f"SPAWNERs start these workflows in a loop: {path}; each child run would start "
                "another fan-out without end.",
                Code.WORKFLOW_CYCLE,
            ),
        )
