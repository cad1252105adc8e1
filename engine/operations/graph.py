"""The layered layout of a workflow's DAG, computed once here so no client lays out a graph.

Layers are networkx's topological generations (a vertex sits one layer below its deepest
dependency, so every edge points down). A draft that is not a DAG yet (`sketch`, for the
editor) is laid out on its condensation instead: the vertices of a cycle share a layer, so a
broken document still has a picture to point the problems at. Inside each layer the order
starts as the document's and is improved by barycenter sweeps: alternately downwards (each
vertex moves towards the mean position of its dependencies) and upwards (of its dependants);
the order with the fewest crossings between adjacent layers wins. Then each layer is centred
horizontally on a grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from engine.operations.views import GraphEdge, GraphNode, GraphView
from schemas.definitions import SpawnerVertex, Workflow

NODE_WIDTH = 180.0
NODE_HEIGHT = 56.0
GAP_X = 40.0
GAP_Y = 64.0
MARGIN = 24.0
SWEEPS = 8
"""Barycenter sweeps (each one down and one up); small graphs settle in two or three."""
MOST_ORDERED_EDGES = 5_000
"""Edges past which layers keep the document's order: each sweep costs the edges (times
log V), and a graph that large cannot be read for its crossings anyway. A workflow's 500
vertices can depend on each other 100,000 times within 1 MiB."""
MOST_SKETCHED = 500
"""Vertices a sketch draws (the first ones written): a draft may be larger than anything
publication accepts (`MAX_VERTICES`, 500 by default), up to the REST body limit."""

Layers = list[list[str]]
DRAFT_VERSION = 0
"""The version a `sketch` (a document not published) reports."""


@dataclass(frozen=True)
class _Vertex:
    type: str
    depends_on: list[str]
    workflow: str | None


def _graph(vertices: Mapping[str, _Vertex]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(vertices)
    for vertex_id, vertex in vertices.items():
        graph.add_edges_from((dependency, vertex_id) for dependency in vertex.depends_on)
    return graph


def _generations(graph: nx.DiGraph) -> list[list[str]]:
    """Topological generations; on a graph with cycles, those of its condensation (each
    cycle's vertices together)."""
    if nx.is_directed_acyclic_graph(graph):
        return [list(g) for g in nx.topological_generations(graph)]
    condensed = nx.condensation(graph)
    members = condensed.graph["mapping"]
    by_component: dict[int, list[str]] = {}
    for vertex, component in members.items():
        by_component.setdefault(component, []).append(vertex)
    return [
        [v for component in generation for v in by_component[component]]
        for generation in nx.topological_generations(condensed)
    ]


def _positions(layers: Layers) -> dict[str, float]:
    """Each vertex's position in its layer, centred on 0 so layers of any width line up."""
    return {
        vertex: index - (len(layer) - 1) / 2
        for layer in layers
        for index, vertex in enumerate(layer)
    }


def _reordered(layer: list[str], neighbours: dict[str, list[str]], pos: dict[str, float]) -> None:
    """Sort `layer` in place by the mean position of each vertex's neighbours (a vertex with
    none keeps its place); ties keep the current order."""

    def barycenter(vertex: str) -> float:
        around = neighbours[vertex]
        return sum(pos[n] for n in around) / len(around) if around else pos[vertex]

    layer.sort(key=lambda v: (barycenter(v), pos[v]))
    pos.update({v: i - (len(layer) - 1) / 2 for i, v in enumerate(layer)})


def _crossings(layers: Layers, graph: nx.DiGraph) -> int:
    """Pairs of edges between the same two adjacent layers that cross: (a, b) and (c, d), by
    position in their layers, with a < c and b > d. Sorted by (a, b), those are the pairs out
    of order in b, counted with a Fenwick tree: O(E log V) (comparing every pair of edges was
    O(E²): two layers of 80 vertices, each depending on all of the first, took 24 s)."""
    index = {v: i for layer in layers for i, v in enumerate(layer)}
    total = 0
    for upper, lower in itertools.pairwise(layers):
        below = set(lower)
        edges = sorted(
            (index[u], index[v]) for u in upper for v in graph.successors(u) if v in below
        )
        tree = [0] * (len(lower) + 1)  # edges seen so far, by the position they end at
        for seen, (_, b) in enumerate(edges):
            at_most_b = 0
            i = b + 1
            while i > 0:
                at_most_b += tree[i]
                i -= i & -i
            total += seen - at_most_b  # edges before this one that end further right
            i = b + 1
            while i <= len(lower):
                tree[i] += 1
                i += i & -i
    return total


def order_layers(graph: nx.DiGraph, layers: Layers) -> Layers:
    """`layers` reordered to reduce edge crossings (bounded barycenter sweeps); as they are
    past `MOST_ORDERED_EDGES`."""
    if graph.number_of_edges() > MOST_ORDERED_EDGES:
        return [list(layer) for layer in layers]
    best = [list(layer) for layer in layers]
    best_crossings = _crossings(best, graph)
    current = [list(layer) for layer in layers]
    preds = {v: list(graph.predecessors(v)) for v in graph}
    succs = {v: list(graph.successors(v)) for v in graph}
    for _ in range(SWEEPS):
        if best_crossings == 0:
            break
        pos = _positions(current)
        for layer in current[1:]:
            _reordered(layer, preds, pos)
        for layer in reversed(current[:-1]):
            _reordered(layer, succs, pos)
        crossings = _crossings(current, graph)
        if crossings < best_crossings:
            best, best_crossings = [list(layer) for layer in current], crossings
    return best


def _edges(graph: nx.DiGraph, layers: Layers) -> Iterable[GraphEdge]:
    for layer in layers:
        for source in layer:
            for target in graph.successors(source):
                yield GraphEdge(source=source, target=target)


def layout(workflow: Workflow, version: int) -> GraphView:
    """The DAG of `workflow` (published as `version`) with every vertex placed."""
    vertices = {
        vertex_id: _Vertex(
            type=vertex.type.value,
            depends_on=list(vertex.depends_on),
            workflow=vertex.config.workflow if isinstance(vertex, SpawnerVertex) else None,
        )
        for vertex_id, vertex in workflow.vertices.items()
    }
    return _placed(workflow.name, version, vertices)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def sketch(document: Any) -> GraphView:
    """The graph of a draft document as written, however invalid: whatever is not a vertex
    object is left out, a dependency on an unknown vertex (or on itself) is dropped, cycles
    share a layer, an unknown type is shown as written (or "?"), and vertices past the first
    `MOST_SKETCHED` are left out. Its version is `DRAFT_VERSION`."""
    raw = document if isinstance(document, Mapping) else {}
    found = raw.get("vertices")
    written = found if isinstance(found, Mapping) else {}
    vertices: dict[str, _Vertex] = {}
    for vertex_id, vertex in written.items():
        if len(vertices) == MOST_SKETCHED:
            break
        if not isinstance(vertex, Mapping):
            continue
        depends = vertex.get("dependsOn")
        config = vertex.get("config")
        vertices[str(vertex_id)] = _Vertex(
            type=_text(vertex.get("type")) or "?",
            depends_on=[d for d in depends if isinstance(d, str)]
            if isinstance(depends, list)
            else [],
            workflow=_text(config.get("workflow")) if isinstance(config, Mapping) else None,
        )
    for vertex_id, vertex in vertices.items():
        kept = [d for d in dict.fromkeys(vertex.depends_on) if d in vertices and d != vertex_id]
        vertices[vertex_id] = _Vertex(vertex.type, kept, vertex.workflow)
    return _placed(_text(raw.get("name")) or "", DRAFT_VERSION, vertices)


def _placed(name: str, version: int, vertices: Mapping[str, _Vertex]) -> GraphView:
    graph = _graph(vertices)
    document_order = {v: i for i, v in enumerate(vertices)}
    generations = [
        sorted(generation, key=document_order.__getitem__) for generation in _generations(graph)
    ]
    layers = order_layers(graph, generations)
    widest = max((len(layer) for layer in layers), default=0)
    width = 2 * MARGIN + widest * NODE_WIDTH + max(0, widest - 1) * GAP_X
    height = 2 * MARGIN + len(layers) * NODE_HEIGHT + max(0, len(layers) - 1) * GAP_Y
    nodes = []
    for depth, layer in enumerate(layers):
        row_width = len(layer) * NODE_WIDTH + (len(layer) - 1) * GAP_X
        left = (width - row_width) / 2
        for order, vertex_id in enumerate(layer):
            vertex = vertices[vertex_id]
            nodes.append(
                GraphNode(
                    id=vertex_id,
                    type=vertex.type,
                    depends_on=list(vertex.depends_on),
                    workflow=vertex.workflow,
                    layer=depth,
                    order=order,
                    x=left + order * (NODE_WIDTH + GAP_X) + NODE_WIDTH / 2,
                    y=MARGIN + depth * (NODE_HEIGHT + GAP_Y) + NODE_HEIGHT / 2,
                )
            )
    return GraphView(
        name=name,
        version=version,
        nodes=nodes,
        edges=list(_edges(graph, layers)),
        layers=len(layers),
        width=width,
        height=height,
        node_width=NODE_WIDTH,
        node_height=NODE_HEIGHT,
    )
