"""Start-up time of the `schemabridge` command line: wall time of short commands, each a fresh
process, median over `--repeat` rounds.

    python -m bench.cli_startup --repeat 10
    python -m bench.cli_startup --repeat 10 --api-url http://127.0.0.1:8000 \
        --tree /tmp/before --tree .

Each command runs as the console script does (`from api.cli import main; main()`) under this
interpreter, with stdout and stderr discarded. With `--tree DIR` (repeatable) each tree's code
is measured (PYTHONPATH=DIR, e.g. a `git archive` of the commit before a change), and the trees
and commands alternate inside every round, so a machine whose load drifts slows them alike.
`--api-url` adds `runs list` against that API (a running `schemabridge serve --demo`).
Prints one JSON object: per tree and command the median, min and max wall time and the median
CPU time (user + sys: steadier than wall time on a shared machine) in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENTRY = "import sys; from api.cli import main; sys.argv[0] = 'schemabridge'; main()"
HELP_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("runs", "--help"),
    ("runs", "list", "--help"),
)
HTTP_COMMANDS: tuple[tuple[str, ...], ...] = (("runs", "list"),)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(
    tree: Path | None, command: tuple[str, ...], api_url: str | None
) -> tuple[float, float]:
    """Wall time and CPU time (user + sys) of one `schemabridge COMMAND` in a fresh
    interpreter, in seconds."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if api_url is not None:
        env["SCHEMABRIDGE_API_URL"] = api_url
    cpu = children_cpu()
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", ENTRY, *command],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"schemabridge {' '.join(command)} exited {completed.returncode}")
    return elapsed, children_cpu() - cpu


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=10, help="rounds (each command once)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted")
    parser.add_argument("--api-url", help="also time `runs list` against this API")
    parser.add_argument(
        "--tree", action="append", type=Path, help="source tree to measure (repeatable)"
    )
    args = parser.parse_args()
    if not 1 <= args.repeat <= 100:
        parser.error("--repeat must be 1..100")
    trees: list[Path | None] = [tree.resolve() for tree in args.tree] if args.tree else [None]
    commands = HELP_COMMANDS + (HTTP_COMMANDS if args.api_url else ())
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.warmup + args.repeat):
        for command in commands:
            for tree in trees:
                measured = run_once(tree, command, args.api_url)
                if round_ >= args.warmup:
                    times.setdefault((str(tree or "."), " ".join(command)), []).append(measured)
    results = []
    for (tree_name, command_line), values in times.items():
        wall = [w for w, _ in values]
        results.append(
            {
                "tree": tree_name,
                "command": f"schemabridge {command_line}",
                "median_ms": ms(statistics.median(wall)),
                "min_ms": ms(min(wall)),
                "max_ms": ms(max(wall)),
                "cpu_median_ms": ms(statistics.median(c for _, c in values)),
                "n": len(values),
            }
        )
    load = os.getloadavg()
    print(json.dumps({"python": sys.version.split()[0], "loadavg": load, "results": results}))


if __name__ == "__main__":
    main()
