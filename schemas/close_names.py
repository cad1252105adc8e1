"""The names a misspelt one was probably meant to be, and how a message offers them: one rule
for the API's refusals and the CLI's hints alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

MOST_OFFERED = 3
CLOSENESS = 0.6
"""`difflib` similarity a name must reach to be offered."""


def close_names(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to `MOST_OFFERED` of `candidates` close to `name`, closest first."""
    return difflib.get_close_matches(name, list(candidates), n=MOST_OFFERED, cutoff=CLOSENESS)


def did_you_mean(meant: Sequence[str]) -> str:
    """`did you mean 'a' or 'b'?`, or "" when nothing was close."""
    return f"did you mean {' or '.join(repr(m) for m in meant)}?" if meant else ""


def typo_clause(name: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'a'?)` for a message that goes on after the name, or "" when nothing
    in `candidates` is close to `name`."""
    meant = did_you_mean(close_names(name, candidates))
    return f" ({meant})" if meant else ""
