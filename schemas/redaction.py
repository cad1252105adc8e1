"""Redaction: a secret's value replaced by `***` in everything a step records.

A step that uses secrets holds their values in memory while it calls its destination; what it
records afterwards (its output, its error with the answer's body excerpt, its log lines and
their attempt history) may show them again: a URL in an error message, a downstream that echoes
the request back. Everything the engine records of such a step goes through one `Redactor`
first (docs/architecture.md, 'Secrets').

A value is matched as written and in the encodings a request or an answer gives it: JSON string
escaping (both with and without `\\u` escapes of non-ASCII), percent-encoding as a URL's path,
query or form would write it, and the HTTP Basic credential when the value is a URL's password.
What the matching cannot see is listed in docs/security.md ('What is not protected'): a value
transformed by the destination (hashed, reversed, re-encoded some other way) or cut in pieces.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "***"
"""What a secret's value is replaced with."""
MIN_REDACTED_CHARS = 4
"""Shorter texts are not redacted: replacing every `ab` of a body would make it unreadable and
say more about the value than it hides. Stored secrets are longer (at least 8 characters)."""
_URL_SAFE_SETS = ("", "/", "/:@!$&'()*+,;=", "/?:@!$'()*+,;=", ":@!$&'()*,;=", "/?:@!$'()*,")
"""Characters left alone by the percent-encodings a client or a server may apply: none
(`quote(v, safe="")`), the path's default, a URL path's (RFC 3986 pchar), a query's, and
the two yarl (aiohttp's URL) sends a value encoded whole as one path segment or one query
value in (it decodes what it needs not keep encoded: `%40` becomes `@` in both)."""


def encodings(value: str) -> set[str]:
    """`value` and the ways a request or an answer may write it."""
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms.update(quote(value, safe=safe) for safe in _URL_SAFE_SETS)
    forms.add(quote_plus(value))
    return {form for form in forms if len(form) >= MIN_REDACTED_CHARS}


def basic_credential(user: str, password: str) -> str:
    """The `Authorization: Basic` token a client sends for a URL's `user:password@`."""
    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class Redactor:
    """Replaces known secret values (and their encodings) with `***`.

    Empty (false) until a value is added: then `scrub` returns its argument untouched, so a
    step without secrets pays nothing.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for value in values:
            self.add(value)

    def __bool__(self) -> bool:
        return bool(self._forms)

    @property
    def longest(self) -> int:
        """Characters of the longest form redacted (0 when empty)."""
        return max(map(len, self._forms), default=0)

    def add(self, value: str) -> None:
        """Redact `value` (and its encodings) from now on."""
        new = encodings(value) - self._forms
        if new:
            self._forms |= new
            self._pattern = None

    def add_literal(self, text: str) -> None:
        """Redact exactly `text` (already in the form it would appear in, e.g. a Basic
        credential)."""
        if len(text) >= MIN_REDACTED_CHARS and text not in self._forms:
            self._forms.add(text)
            self._pattern = None

    def _compiled(self) -> re.Pattern[str]:
        if self._pattern is None:
            # Longest first: a form that contains another must win, or its rest would stay.
            ordered = sorted(self._forms, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(form) for form in ordered))
        return self._pattern

    def text(self, text: str) -> str:
        """`text` with every known value replaced by `***`."""
        if not self._forms:
            return text
        return self._compiled().sub(REDACTED, text)

    def scrub(self, value: Any) -> Any:
        """`value` with every string inside it redacted: object keys and values, list items,
        recursively (iteratively: outputs may be deep). Other types are returned as they are."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, dict | list):
            return value
        root: list[Any] = [None]
        # (container the result goes into, its key or index, the value to scrub)
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            target, slot, item = stack.pop()
            if isinstance(item, str):
                target[slot] = self.text(item)
            elif isinstance(item, dict):
                copy: dict[str, Any] = {}
                target[slot] = copy
                for key, child in item.items():
                    new_key = self.text(key) if isinstance(key, str) else key
                    copy[new_key] = None
                    stack.append((copy, new_key, child))
            elif isinstance(item, list):
                items: list[Any] = [None] * len(item)
                target[slot] = items
                stack.extend((items, index, child) for index, child in enumerate(item))
            else:
                target[slot] = item
        return root[0]
