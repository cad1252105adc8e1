"""A count with its noun in the right number ("1 step", "2 steps", "1,250 runs"): one helper
for the engine's log lines and the command line's messages alike."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`count` and its noun: "1 attempt", "2 attempts", "1,250 runs" (`nouns`: an irregular
    plural, "1 child", "2 children")."""
    word = noun if count == 1 else (nouns or f"{noun}s")
    return f"{count:,} {word}"
