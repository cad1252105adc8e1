"""The names a misspelt one was probably meant to be, and how a message offers them: one rule
for the API's refusals and the CLI's hints alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

MOST_OFFERED = 3
CLOSENESS = 0.6
"""`difflib` similarity a name must reach to be offered."""
NEAR_BEST = 0.1
"""How far below the closest name's similarity another may be and still be offered beside it
(about one character fewer in common): names that share a prefix reach `CLOSENESS` on it
alone, so a typo of `tour-chain` is not also offered the unrelated `tour-fan`."""
_ROUNDING = 1e-9
"""Slack for float rounding: a name exactly `NEAR_BEST` below the closest is offered."""


def close_names(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to `MOST_OFFERED` of `candidates` close to `name`, closest first: the closest, and
    those about as close as it (`NEAR_BEST`); one much closer than the rest stands alone."""
    found = difflib.get_close_matches(name, list(candidates), n=MOST_OFFERED, cutoff=CLOSENESS)
    # As `get_close_matches` scores them (the candidate first: the ratio is not symmetric).
    ratios = [difflib.SequenceMatcher(None, meant, name).ratio() for meant in found]
    if not ratios:
        return []
    least = max(ratios) - NEAR_BEST - _ROUNDING
    return [meant for meant, ratio in zip(found, ratios, strict=True) if ratio >= least]


def did_you_mean(meant: Sequence[str]) -> str:
    """`did you mean 'a' or 'b'?`, or "" when nothing was close."""
    return f"did you mean {' or '.join(repr(m) for m in meant)}?" if meant else ""


def typo_clause(name: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'a'?)` for a message that goes on after the name, or "" when nothing
    in `candidates` is close to `name`."""
    meant = did_you_mean(close_names(name, candidates))
    return f" ({meant})" if meant else ""
