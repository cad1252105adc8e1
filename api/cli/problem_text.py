"""How every CLI command writes a problem for people: one rendering of a JSON pointer, one
problem line.

The API and `--output json` keep RFC 6901 pointers as they are (`""` is the whole document);
only text meant for people goes through here. A pointer is printed as written except the
whole document: in RFC 6901 `/` is the member named "" and not the root, so the root is
printed as `(document)` rather than as `/` or an empty string nobody would see.
"""

from __future__ import annotations

ROOT = "(document)"
"""The whole document, as people read it."""


def where(pointer: str, within: str = "") -> str:
    """`pointer` for people, after `within` (a file, `input`, `body`) when one is given."""
    shown = pointer or ROOT
    return f"{within} {shown}" if within else shown


def problem_line(pointer: str, message: str, code: str = "", within: str = "") -> str:
    """One problem as `validate` and every other command print it:
    `  WHERE  MESSAGE  [code]` (the code only when there is one)."""
    tail = f"  [{code}]" if code else ""
    return f"  {where(pointer, within)}  {message}{tail}"


def split_first(pointer: str) -> tuple[str, str]:
    """`/0/vertices/a` → ("0", "/vertices/a"); `/0` → ("0", ""): the pointer into a list's
    element. Keeps `""` for the element itself, which `/` (its member "") is not."""
    head, sep, rest = pointer.removeprefix("/").partition("/")
    return head, sep + rest
