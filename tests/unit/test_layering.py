"""Dependencies point one way: api → engine → vertices → admission; everyone may use schemas
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
