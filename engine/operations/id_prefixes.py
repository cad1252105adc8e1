"""A prefix of a run's or a deployment's id, as people copy it: the first 8 characters the web
monitor shows (`3f2a9c1e`), or more of the id, with or without its hyphens.

Both are UUIDs in their canonical text form (lower-case hex, hyphens after the 8th, 12th,
16th and 20th digit: `uuid.uuid4()` and, for child runs, `uuid.uuid5()`). A prefix is read as
hex digits, from `MIN_PREFIX_DIGITS` (8: one id in 4 billion shares them, so a prefix that
names one run today rarely stops doing so) to the id's 32, and becomes the range of ids that
start with it, [low, high): `high` is the prefix's hex number plus one, written back in the
id's layout. A range rather than `LIKE 'prefix%'` so that PostgreSQL reads it from the
primary key whatever the database's collation, and hex arithmetic rather than "the last
character plus one" because under a linguistic collation (`en_US.UTF-8`) punctuation such as
`:` (after `9`) sorts apart from the digits and letters.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from schemas.errors import InvalidRequest

MIN_PREFIX_DIGITS = 8
"""The fewest hex digits a prefix has: what the web monitor shows of an id."""
ID_DIGITS = 32
HYPHENS_AFTER = (8, 12, 16, 20)
"""Where a canonical UUID has its hyphens, counted in hex digits before them."""
_HEX = frozenset("0123456789abcdef")
PREFIX_PATTERN = rf"^(?:-*[0-9A-Fa-f]){{{MIN_PREFIX_DIGITS},{ID_DIGITS}}}-*$"
"""What `prefix_range` accepts, as a regular expression (for the REST API's schema)."""
MAX_MATCHES = 20
"""The most ids a lookup by prefix lists (an ambiguous prefix is shown a few of them)."""


@dataclass(frozen=True)
class PrefixRange:
    """The ids that start with `prefix`: from `low` (inclusive) to `high` (exclusive; None:
    up to the last id there can be)."""

    prefix: str
    """The prefix as ids are written (lower case, the id's hyphens)."""
    low: str
    high: str | None


def _laid_out(digits: str) -> str:
    """Hex `digits` with the hyphens of a canonical UUID, as far as they go."""
    parts, start = [], 0
    for end in (*HYPHENS_AFTER, ID_DIGITS):
        if start >= len(digits):
            break
        parts.append(digits[start:end])
        start = end
    return "-".join(parts)


def is_whole_id(given: str) -> bool:
    """Whether `given` has an id's shape: a canonical UUID, as the store writes ids."""
    try:
        return str(uuid.UUID(given)) == given
    except ValueError:
        return False


def reads_as_prefix(given: object) -> bool:
    """Whether `given` reads as a prefix of an id (what `prefix_range` takes) rather than a
    whole id: the 8 hex digits the monitor shows, or an id written otherwise than the store
    writes it (upper case, without its hyphens), which only a prefix lookup finds."""
    if not isinstance(given, str) or is_whole_id(given):
        return False
    return re.fullmatch(PREFIX_PATTERN, given) is not None


def check_limit(limit: int) -> int:
    """`limit` when it is 1 to `MAX_MATCHES`; else `InvalidRequest(code="invalid_limit")`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_MATCHES:
        raise InvalidRequest(f"limit is 1 to {MAX_MATCHES}; got {limit!r}", code="invalid_limit")
    return limit


def prefix_range(prefix: str, *, of: str = "run") -> PrefixRange:
    """The range of ids starting with `prefix` (case and hyphens as people type them), a
    prefix of the id of a run or a deployment (`of`: which, for the refusal). Refused with
    `InvalidRequest(code="invalid_run_id_prefix")` (`invalid_deployment_id_prefix`): anything
    but hex digits and hyphens, fewer than `MIN_PREFIX_DIGITS` digits or more than an id's
    32."""
    digits = prefix.lower().replace("-", "") if isinstance(prefix, str) else ""
    if not MIN_PREFIX_DIGITS <= len(digits) <= ID_DIGITS or not set(digits) <= _HEX:
        raise InvalidRequest(
            f"a {of} id prefix is {MIN_PREFIX_DIGITS} to {ID_DIGITS} hex digits (hyphens "
            f"allowed); got {prefix!r}",
            code=f"invalid_{of}_id_prefix",
        )
    low = _laid_out(digits)
    if set(digits) == {"f"}:
        return PrefixRange(low, low, None)  # no id sorts after every one starting with f…f
    following = format(int(digits, 16) + 1, f"0{len(digits)}x")
    return PrefixRange(low, low, _laid_out(following))
