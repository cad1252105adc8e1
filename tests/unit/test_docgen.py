"""The committed authoring reference is exactly what the schema generates (no drift)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schemas import docgen, loader

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "authoring-reference.md"
REGENERATE = "python -m schemas.docgen > docs/authoring-reference.md"


def test_the_committed_reference_matches_the_schema() -> None:
    committed = REFERENCE.read_text(encoding="utf-8")
    assert committed == docgen.generate(), f"the reference is stale: run `{REGENERATE}`"


def test_the_reference_documents_every_field_of_every_section() -> None:
    text = docgen.generate()
    schema = loader.workflow_schema()
    for name in docgen.SECTIONS:
        node = schema["$defs"][name]
        assert f"## {node['title']}\n" in text
        for field in node["properties"]:
            assert f"| `{field}` |" in text, f"{name}.{field}"
    assert set(docgen.SECTIONS) == set(schema["$defs"])


def test_the_module_runs_as_a_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schemas.docgen"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.stdout == docgen.generate()


def test_the_guide_links_the_reference_and_documents_the_json_output() -> None:
    guide = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    assert "(authoring-reference.md)" in guide
    for key in ('"valid"', '"exitCode"', '"summary"', '"files"', '"pointer"', '"code"'):
        assert key in guide


def test_the_reference_states_the_bounds_of_array_elements() -> None:
    """The tour: successCodes refused 99 and 600 ("must be at least 100") while the
    reference said only "non-empty; no repeats"."""
    text = docgen.generate()
    schema = loader.workflow_schema()
    checked = 0
    for name in docgen.SECTIONS:
        for field, prop in schema["$defs"][name]["properties"].items():
            items = prop.get("items")
            if not isinstance(items, dict) or "minimum" not in items:
                continue
            row = next(line for line in text.splitlines() if line.startswith(f"| `{field}` |"))
            low, high = items["minimum"], items.get("maximum")
            assert f"each {low} to {high}" in row, row
            checked += 1
    assert checked >= 1  # successCodes
