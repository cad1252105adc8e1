"""Vertex types written in the wrong case (`"gateway"`).

The schema refuses such a type (with a did-you-mean), and without a known type it would check
nothing else of the vertex: its config errors would only come out in the next pass, after the
type is fixed. Every phase reads such a vertex as the type it was clearly meant to be, so one
pass reports them all; the type problem itself keeps the document invalid.
"""

from __future__ import annotations

import copy
from typing import Any

VERTEX_TYPES = frozenset({"GATEWAY", "SPAWNER", "MERGE"})


def meant_type(value: Any) -> str | None:
    """The vertex type `value` names, in any case; None for anything else."""
    if not isinstance(value, str):
        return None
    upper = value.upper()
    return upper if upper in VERTEX_TYPES else None


def with_types_fixed(data: Any) -> Any | None:
    """A copy of a parsed file whose wrong-case vertex types are written as meant, or None
    when it has none (the common case: nothing is copied)."""
    spots = [
        vertex
        for workflow in (data if isinstance(data, list) else [data])
        if isinstance(workflow, dict) and isinstance(workflow.get("vertices"), dict)
        for vertex in workflow["vertices"].values()
        if isinstance(vertex, dict)
        and meant_type(vertex.get("type")) not in (None, vertex.get("type"))
    ]
    if not spots:
        return None
    fixed = copy.deepcopy(data)
    for workflow in fixed if isinstance(fixed, list) else [fixed]:
        if isinstance(workflow, dict) and isinstance(workflow.get("vertices"), dict):
            for vertex in workflow["vertices"].values():
                if isinstance(vertex, dict) and (meant := meant_type(vertex.get("type"))):
                    vertex["type"] = meant
    return fixed
