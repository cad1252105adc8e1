"""Dependencies point one way: api → engine.operations → engine → vertices → admission;
everyone may use schemas
(docs/architecture.md, 'Packages and the dependency direction'). Checked on the import
statements of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["api", "engine", "vertices", "admission"]
FORBIDDEN = {layer: set(LAYERS[:i]) for i, layer in enumerate(LAYERS)}
FORBIDDEN["schemas"] = set(LAYERS)
FORBIDDEN["demo"] = set(LAYERS)


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package: str) -> None:
    violations = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in imported_packages(path) & FORBIDDEN[package]
    ]
    assert violations == []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The product modules `path` imports, type-only imports included. `from pkg import mod`
    names the module `pkg.mod`, not the package: a package's `__init__` re-exporting its
    modules is not an edge back from each of them."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= submodules & known if submodules <= known else {node.module}
    return found & known


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as a path that returns to its start, or [] if there is none."""
    done: set[str] = set()
    for start in sorted(graph):
        path: list[str] = []
        stack = [(start, iter(sorted(graph[start])))]
        on_path = {start}
        path.append(start)
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
                on_path.add(nxt)
    return []


def test_no_module_imports_one_that_imports_it_back() -> None:
    paths = [path for package in FORBIDDEN for path in sorted((ROOT / package).rglob("*.py"))]
    known = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, known) for path in paths}
    graph = {module: deps - {module} for module, deps in graph.items()}
    assert import_cycle(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


# Inside `engine`, front doors see only the operations layer (and the process plumbing that
# builds it); the engine's own subpackages never reach up into the operations layer.
FRONT_DOOR_ENGINE_MODULES = (
    "engine.operations",
    "engine.runtime",
    "engine.settings",
    "engine.lifecycle",
    "engine.validation",
)
ENGINE_BELOW_OPERATIONS = ("store", "execution", "coordination", "validation")


def engine_modules_imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("engine."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "engine":
                found.update(f"engine.{alias.name}" for alias in node.names)
            elif node.module.startswith("engine."):
                found.add(node.module)
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def test_front_doors_go_through_the_operations_layer() -> None:
    violations = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / "api").rglob("*.py"))
        for module in sorted(engine_modules_imported(path))
        if not _within(module, FRONT_DOOR_ENGINE_MODULES)
    ]
    assert violations == []


@pytest.mark.parametrize("subpackage", ENGINE_BELOW_OPERATIONS)
def test_the_engine_never_imports_the_operations_layer(subpackage: str) -> None:
    violations = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / "engine" / subpackage).rglob("*.py"))
        for module in sorted(engine_modules_imported(path))
        if _within(module, ("engine.operations",))
    ]
    assert violations == []


def test_the_front_door_check_sees_store_imports(tmp_path: Path) -> None:
    module = tmp_path / "door.py"
    module.write_text("from engine import store\nfrom engine.store.records import RunRecord\n")
    assert engine_modules_imported(module) == {"engine.store", "engine.store.records"}
