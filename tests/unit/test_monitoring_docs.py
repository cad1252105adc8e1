"""docs/monitoring.md names every series the processes expose, and none they do not: an
operator writes alert rules from it, so a series renamed, added or dropped in the code must
be said there too."""

from __future__ import annotations

import re
from pathlib import Path

from api.rest.metrics import ApiMetrics
from engine.operations.metrics import MetricsSnapshot, WorkerMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
SERIES = re.compile(r"schemabridge_[a-z_]*[a-z](?![a-z_*])")
"""A whole series name (`schemabridge_runs`), not a prefix (`schemabridge_admission_*`)."""
SAMPLE_SUFFIX = re.compile(r"_(bucket|count|sum)$")
"""What a histogram's samples add to its name, as an alert rule writes them."""


def exposed() -> set[str]:
    """Every series `serve`'s `/metrics` declares (an api's and a worker's), from its `# TYPE`
    lines; `_created` is prometheus_client's own companion of each counter and histogram."""
    snapshot = MetricsSnapshot(
        runs_by_status={},
        ready_steps=0,
        destinations=[],
        failing=[],
        deployments_by_status={},
        deployments=[],
    )
    text, _ = ApiMetrics(WorkerMetrics()).render(snapshot, None)
    names = {line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE ")}
    return {name for name in names if not name.endswith("_created")}


def documented() -> set[str]:
    return {SAMPLE_SUFFIX.sub("", name) for name in SERIES.findall(DOC.read_text())}


def test_every_exposed_series_is_documented() -> None:
    missing = exposed() - documented()
    assert not missing, f"docs/monitoring.md does not name: {sorted(missing)}"


def test_every_documented_series_is_exposed() -> None:
    unknown = documented() - exposed()
    assert not unknown, f"docs/monitoring.md names series no process exposes: {sorted(unknown)}"
