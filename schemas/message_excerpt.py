"""An error message on one bounded line, as a worker's log line and the CLI's run lists quote
it: never cut inside the command a message ends with (`…; see `schemabridge runs children
<run id> --status FAILED``). A run id or a command cut mid-way would be copied by an operator
and name no run, or another one."""

from __future__ import annotations

LOG_MESSAGE_CHARS = 200
"""The most characters of a step's error message one log line quotes."""


def message_excerpt(message: str, limit: int = LOG_MESSAGE_CHARS) -> str:
    """`message` on one line in at most `limit` characters. When it must be cut, a closing
    hint (the part after the last "; " that quotes a command in backticks) is kept whole and
    the text before it is cut instead; any cut falls between words, never inside a quoted
    command, and ends with "…"."""
    flat = " ".join(message.split())
    if len(flat) <= limit:
        return flat
    head, separator, hint = flat.rpartition("; ")
    if separator and hint.count("`") >= 2 and len(hint) <= limit // 2:
        return f"{_cut(head, limit - len(hint) - len(separator))}{separator}{hint}"
    return _cut(flat, limit)


_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def _cut(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters with "…": between words, and before a quoted
    command the cut would fall in (an odd number of backticks before the cut). A bracket the
    kept text opened and the cut left open is closed after the "…" ("(3 http_error, e.g.
    POST …)"), so the line still reads as a sentence; the closers count within `limit`."""
    if len(text) <= limit:
        return text
    room = limit - 1
    while True:
        cut = text[: max(room, 0)]
        if cut.count("`") % 2:
            cut = cut[: cut.rindex("`")]
        elif " " in cut and not text[len(cut)].isspace():
            cut = cut[: cut.rindex(" ")]
        cut = cut.rstrip(" ;:,(")
        closers = _unclosed(cut)
        if len(cut) + 1 + len(closers) <= limit or room <= 0:
            return f"{cut}…{closers}"
        room = min(room - 1, limit - 1 - len(closers))


def _unclosed(text: str) -> str:
    """The closing brackets, innermost first, of those `text` opens and leaves open (outside
    backticks: a quoted command is not prose)."""
    expected: list[str] = []
    quoted = False
    for char in text:
        if char == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif char in _CLOSERS:
            expected.append(_CLOSERS[char])
        elif expected and char == expected[-1]:
            expected.pop()
    return "".join(reversed(expected))
