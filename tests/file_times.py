"""Where the suite's time goes by test file, printed after `--durations`' slowest tests.

`make test` spreads whole files over xdist workers (`--dist loadfile`), so the suite lasts as
long as its busiest worker: the slowest files and each worker's total show which file to split
or speed up, which the per-test list alone does not.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

SHOWN_FILES = 15

_file_s: defaultdict[str, float] = defaultdict(float)
_worker_s: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _file_s[path] += report.duration
    # Under xdist the controller receives each report with the worker that ran it.
    node = getattr(report, "node", None)
    worker = node.gateway.id if node is not None else "main"
    _worker_s[worker] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _file_s:
        return
    terminalreporter.section("slowest test files (setup + call + teardown)")
    slowest = sorted(_file_s.items(), key=lambda item: item[1], reverse=True)[:SHOWN_FILES]
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    busiest = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_worker_s.items()))
    terminalreporter.write_line(f"per worker: {busiest}")
