"""Property-based tests of the validator (hypothesis).

- Random valid DAGs of GATEWAY, SPAWNER and MERGE vertices are accepted.
- The same DAG with one added back-edge is rejected, naming a cycle that really exists.
- Random mutations of valid documents (of their JSON value or of their bytes) never raise
  anything but `DefinitionError`.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.validation import parse_document, parse_documents
from schemas.errors import DefinitionError

URL = "http://127.0.0.1:8765/step"
CHILD = {
    "name": "child",
    "vertices": {"work": {"type": "GATEWAY", "config": {"url": URL + "/{{ item.id }}"}}},
}
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

vertex_ids = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,10}", fullmatch=True)


@dataclass
class Dag:
    document: dict[str, Any]
    deps: dict[str, list[str]]
    """vertex id → the ids it depends on."""


def _config(kind: str, deps: list[str], kinds: dict[str, str]) -> dict[str, Any] | None:
    ref = f'vertices."{deps[0]}".output' if deps else None
    # A list from the first dependency, read where its kind of output has one.
    listed = ".outputs" if deps and kinds[deps[0]] == "MERGE" else ".body.items"
    if kind == "GATEWAY":
        config: dict[str, Any] = {"url": URL, "method": "POST"}
        if ref:
            config["body"] = {"previous": "{{ " + ref + " }}", "run": "{{ run.id }}"}
        return config
    if kind == "SPAWNER":
        return {
            "items": "{{ " + ref + listed + " }}" if ref else [{"id": 1}, {"id": 2}],
            "workflow": "child",
            "input": {"id": "{{ item.id }}", "position": "{{ index }}"},
        }
    return None


@st.composite
def dags(draw: st.DrawFn) -> Dag:
    ids = draw(st.lists(vertex_ids, min_size=1, max_size=12, unique=True))
    kinds: dict[str, str] = {}
    deps: dict[str, list[str]] = {}
    for position, vid in enumerate(ids):
        earlier = ids[:position]
        spawners = [e for e in earlier if kinds[e] == "SPAWNER"]
        others = [e for e in earlier if kinds[e] != "SPAWNER"]
        kind = draw(st.sampled_from(["GATEWAY", "SPAWNER"] + (["MERGE"] if spawners else [])))
        if kind == "MERGE":
            chosen = [draw(st.sampled_from(spawners))]
            if others:
                chosen += draw(st.lists(st.sampled_from(others), unique=True, max_size=2))
        elif earlier:
            chosen = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3))
        else:
            chosen = []
        kinds[vid], deps[vid] = kind, chosen
    order = draw(st.permutations(ids))  # document order need not be run order
    vertices: dict[str, Any] = {}
    for vid in order:
        vertex: dict[str, Any] = {"type": kinds[vid]}
        write_empty: bool = draw(st.booleans())  # `"dependsOn": []` and no dependsOn are alike
        if deps[vid] or write_empty:
            vertex["dependsOn"] = deps[vid]
        config = _config(kinds[vid], deps[vid], kinds)
        if config is not None:
            vertex["config"] = config
        elif draw(st.booleans()):
            vertex["config"] = {
                "tolerateChildFailures": ["FAILED"],
                "failureTolerance": {"maxFailureRatio": draw(st.floats(0, 1))},
                "failFast": draw(st.booleans()),
            }
        vertices[vid] = vertex
    return Dag({"name": "parent", "vertices": vertices}, deps)


def _descendants(deps: dict[str, list[str]], start: str) -> set[str]:
    dependants: dict[str, list[str]] = {v: [] for v in deps}
    for vid, ds in deps.items():
        for d in ds:
            dependants[d].append(vid)
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in dependants[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


@PROPERTY_SETTINGS
@given(dags(), st.booleans())
def test_random_valid_dags_are_accepted(dag: Dag, split: bool) -> None:
    if split:
        documents = [("parent.json", json.dumps(dag.document)), ("child.json", json.dumps(CHILD))]
        workflows = parse_documents(documents)
    else:
        workflows = parse_document(json.dumps([dag.document, CHILD]))
    assert [w.name for w in workflows] == ["parent", "child"]
    assert set(workflows[0].vertices) == set(dag.deps)


@PROPERTY_SETTINGS
@given(dags(), st.data())
def test_a_back_edge_is_rejected_naming_the_cycle(dag: Dag, data: st.DataObject) -> None:
    pairs = [(u, v) for u in dag.deps for v in sorted(_descendants(dag.deps, u))]
    assume(pairs)
    source, target = data.draw(st.sampled_from(pairs))
    document = copy.deepcopy(dag.document)
    vertex = document["vertices"][source]
    vertex["dependsOn"] = [*vertex.get("dependsOn", []), target]  # source now waits for target

    try:
        parse_document(json.dumps([document, CHILD]))
    except DefinitionError as error:
        cycles = [p for p in error.problems if p.code == "cycle"]
    else:
        raise AssertionError("a cyclic workflow was accepted")
    assert len(cycles) == 1
    named = cycles[0].message.split("cycle: ", 1)[1].split(" (", 1)[0].split(" → ")
    assert named[0] == named[-1]
    assert {source, target} <= set(named)
    deps = {**dag.deps, source: [*dag.deps[source], target]}
    for before, after in itertools.pairwise(named):
        assert before in deps[after], f"{after} does not wait for {before}"
    assert cycles[0].pointer.startswith(f"/0/vertices/{named[0]}/dependsOn/")


# ── mutations ───────────────────────────────────────────────────────────────────────────────

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["GATEWAY", "SPAWNER", "MERGE", "{{ vertices.x.output }}", "{{ a[ }}"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


def _mutate(document: Any, data: st.DataObject) -> Any:
    document = copy.deepcopy(document)
    path = data.draw(st.sampled_from(_paths(document)))
    if not path:
        return data.draw(json_values)
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = data.draw(st.sampled_from(["replace", "delete", "add", "rename"]))
    if action == "replace":
        parent[last] = data.draw(json_values)
    elif action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=10))] = data.draw(json_values)
    elif action == "rename" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=10))] = parent.pop(last)
    return document


def _accepts_or_explains(raw: str | bytes) -> None:
    try:
        parse_document(raw)
    except DefinitionError as error:
        assert error.problems
        assert all(p.message.endswith((".", "?")) for p in error.problems)


@PROPERTY_SETTINGS
@given(dags(), st.data())
def test_mutated_documents_only_raise_definition_errors(dag: Dag, data: st.DataObject) -> None:
    document: Any = [dag.document, CHILD]
    for _ in range(data.draw(st.integers(1, 4))):
        document = _mutate(document, data)
    _accepts_or_explains(json.dumps(document))


@PROPERTY_SETTINGS
@given(dags(), st.data())
def test_mutated_bytes_only_raise_definition_errors(dag: Dag, data: st.DataObject) -> None:
    raw = bytearray(json.dumps([dag.document, CHILD]).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["truncate", "flip", "insert"]))
        position = data.draw(st.integers(0, len(raw)))
        if action == "truncate":
            del raw[position:]
        elif action == "flip" and position < len(raw):
            raw[position] = data.draw(st.integers(0, 255))
        else:
            raw[position:position] = data.draw(st.binary(min_size=1, max_size=8))
    _accepts_or_explains(bytes(raw))
