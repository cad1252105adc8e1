"""Read a py-spy profile in collapsed form (`py-spy record --format raw`, as bench/api_submit.py
`--profile-s` writes it): where the samples were, and which of our calls led there.

    python -m bench.profile_summary bench/out/profile-submit.txt
    python -m bench.profile_summary bench/out/profile-submit.txt --callers __do_execute

Each line of the file is a stack (`frame;frame;…`, outermost first) and its sample count. The
first table is the innermost frame's share of all samples ("self"). With `--callers TEXT`, the
samples whose innermost frame contains TEXT are grouped by the nearest frames of this
repository (engine/, api/, admission/, vertices/): which statement or call of ours was paying.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

OURS = ("engine/", "api/rest/", "admission/", "vertices/")
"""Frames of these directories are "ours" (the CLI's frames are only the process's entry)."""


def stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """(frames outermost first, samples) of each line of a collapsed profile."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def function(frame: str) -> str:
    """`Worker._claim (engine/execution/worker.py:120)` → `Worker._claim`."""
    return frame.split(" (", 1)[0]


def summarise(path: Path, top: int, callers: str | None, depth: int) -> str:
    total = 0
    inner: Counter[str] = Counter()
    paying: Counter[str] = Counter()
    for frames, count in stacks(path):
        total += count
        inner[frames[-1]] += count
        if callers is not None and callers in frames[-1]:
            ours = [function(frame) for frame in frames if any(d in frame for d in OURS)]
            paying[" <- ".join(reversed(ours[-depth:])) or "(none of ours)"] += count
    if not total:
        return f"{path}: no samples"
    lines = [f"{total} samples in {path}", "", "self  innermost frame"]
    lines += [f"{100 * n / total:5.1f}% {frame[:140]}" for frame, n in inner.most_common(top)]
    if callers is not None:
        lines += ["", f"samples in frames matching {callers!r}, by our nearest calls"]
        lines += [f"{100 * n / total:5.1f}% {calls}" for calls, n in paying.most_common(top)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--callers", metavar="TEXT", help="group these frames by our callers")
    parser.add_argument("--depth", type=int, default=3, help="our frames named per caller")
    args = parser.parse_args(argv)
    print(summarise(args.profile, args.top, args.callers, args.depth))


if __name__ == "__main__":
    main()
