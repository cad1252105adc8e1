"""The layered drawing of a workflow's graph (`engine.operations.graph`), which `preview`
answers any key for a draft and `graph` for a published version: its cost grows with the
edges, never with their square."""

from __future__ import annotations

import cProfile
import itertools
import pstats
from typing import Any

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.operations.graph import MOST_ORDERED_EDGES, _crossings, sketch


def brute_force_crossings(layers: list[list[str]], graph: nx.DiGraph) -> int:
    index = {v: i for layer in layers for i, v in enumerate(layer)}
    total = 0
    for upper, lower in itertools.pairwise(layers):
        edges = [(index[u], index[v]) for u in upper for v in graph.successors(u) if v in lower]
        total += sum(
            1 for i, (a, b) in enumerate(edges) for c, d in edges[i + 1 :] if (a - c) * (b - d) < 0
        )
    return total


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 19), st.integers(0, 19)), max_size=30),
)
def test_crossings_are_the_pairs_of_edges_that_cross(
    widths: list[int], pairs: list[tuple[int, int]]
) -> None:
    layers = [[f"{depth}-{i}" for i in range(width)] for depth, width in enumerate(widths)]
    vertices = [v for layer in layers for v in layer]
    graph = nx.DiGraph()
    graph.add_nodes_from(vertices)
    graph.add_edges_from(
        (vertices[a % len(vertices)], vertices[b % len(vertices)]) for a, b in pairs if a != b
    )
    assert _crossings(layers, graph) == brute_force_crossings(layers, graph)


def complete_bipartite(n: int) -> dict[str, Any]:
    """A draft of 2n vertices, each of the second n depending on every one of the first."""
    call = {"type": "GATEWAY", "config": {"url": "https://a.example/"}}
    vertices: dict[str, Any] = {f"a{i}": call for i in range(n)}
    first = list(vertices)
    vertices |= {f"b{i}": {**call, "dependsOn": first} for i in range(n)}
    return {"name": "dense", "vertices": vertices}


def calls(document: dict[str, Any]) -> int:
    profile = cProfile.Profile()
    profile.runcall(sketch, document)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize("n", [70, 80])
def test_a_dense_draft_is_drawn_in_work_linear_in_its_edges(n: int) -> None:
    # Crossings were counted by comparing every pair of edges between two layers: 80 x 80
    # edges took 24 s, 250 x 250 (a 0.5 MB document) hours, on the API's event loop. 70 x 70
    # (4,900 edges) is under MOST_ORDERED_EDGES, so its layers are swept and their crossings
    # counted; 80 x 80 is over it, so they keep the document's order.
    assert 70 * 70 <= MOST_ORDERED_EDGES < 80 * 80
    edges = n * n
    assert calls(complete_bipartite(n)) < 100 * edges
    graph = sketch(complete_bipartite(n))
    assert len(graph.nodes) == 2 * n
    assert len(graph.edges) == edges


def test_a_sketch_draws_at_most_500_vertices() -> None:
    call = {"type": "GATEWAY", "config": {"url": "https://a.example/"}}
    graph = sketch({"name": "huge", "vertices": {f"v{i}": call for i in range(5_000)}})
    assert len(graph.nodes) == 500
