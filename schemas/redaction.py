"""Redaction: a secret's value replaced by `***` in everything a step records.

A step that uses secrets holds their values in memory while it calls its destination; what it
records afterwards (its output, its error with the answer's body excerpt, its log lines and
their attempt history) may show them again: a URL in an error message, a downstream that echoes
the request back. Everything the engine records of such a step goes through one `Redactor`
first (docs/architecture.md, 'Secrets').

A value is matched as one pattern (`_value`) in which each of its characters may be
written any way a request or an answer writes that character:

* as itself, or percent-encoded (its UTF-8 bytes as `%XX`, either case), and a space also as
  `+`. Which characters a client leaves unencoded differs by client and by part of the URL
  (yarl, which aiohttp sends every URL through, writes a `query` value's space as `+` and
  leaves `/ : @ ! $ ' ( ) * , ?` alone; a path segment keeps `%3F` but not `%40`), so every
  choice is accepted rather than a list of choices that must track the client's;
* JSON string escapes, as encoders write them: `\\uXXXX` (either case: Python, PHP, Gson's
  HTML-safe `\\u003d`, .NET's `\\u002B`; a surrogate pair beyond the BMP), `\\/` (PHP),
  `\\"`, `\\\\` and `\\n`-style escapes, nested up to three JSON strings deep (a body echoed
  inside a JSON answer that is itself quoted in another: up to 8 backslashes);
* HTML and XML character references, as a downstream that echoes the request HTML-escaped
  writes them: `&amp; &lt; &gt; &quot; &apos;` (and HTML5's `&AMP;`, `&LT;`, `&GT;`,
  `&QUOT;`) and, for any character but an ASCII letter or digit, decimal `&#39;` or hex
  `&#x27;` with up to six leading zeros (`&#039;`, PHP's quote). Each is a whole form of
  its character (`_html_reference`), never combined with the forms above (`&#x27;` written
  JSON-escaped or percent-encoded is not recognised).

ASCII letters and digits are matched only as themselves: no encoder above rewrites them (an
escaper that wrote `a` as `&#97;` would be hiding it, not escaping it). So
the longest run of them in a value (its anchor) is in every spelling of it, and a text without
any value's anchor is returned after one substring test per value, without running a pattern:
that is most texts a step records. A value shorter than `MIN_REDACTED_CHARS` is not redacted.
What the matching cannot see is listed in docs/security.md ('What is not protected'): a value
transformed by the destination (hashed, reversed, its case changed, written with other named
HTML references than the five above, re-encoded some other way) or cut in pieces.
"""

from __future__ import annotations

import functools
import itertools
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

REDACTED = "***"
"""What a secret's value is replaced with."""
MIN_REDACTED_CHARS = 4
"""Shorter texts are not redacted: replacing every `ab` of a body would make it unreadable and
say more about the value than it hides. Stored secrets are longer (at least 8 characters)."""

_PLAIN = frozenset(string.ascii_letters + string.digits)
"""Characters no percent-encoding or JSON encoder rewrites: matched as themselves."""
_MAX_BACKSLASHES = 8
"""A JSON escape's backslashes three strings deep: 1, 3 or 7 before an escaped character,
2, 4 or 8 for a backslash itself."""
_BACKSLASHES = rf"\\{{1,{_MAX_BACKSLASHES}}}"
_SHORT_ESCAPES = {'"': '"', "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
"""The two-character JSON escapes (RFC 8259) by the character they stand for; a backslash's
own (`\\\\`) is `_backslash_run`'s."""
_HTML_NAMES: dict[str, tuple[str, ...]] = {
    "&": ("amp", "AMP"),
    "<": ("lt", "LT"),
    ">": ("gt", "GT"),
    '"': ("quot", "QUOT"),
    "'": ("apos",),
}
"""The named character references escapers write (HTML5 takes the upper-case ones too; `&apos;`
is XML's and XHTML's): `html.escape`, PHP's htmlspecialchars, Jinja, Go's html/template and
.NET write these or numeric references."""
_MAX_ZEROS = 6
"""Leading zeros a numeric reference may carry (`&#039;`, PHP; `&#x0027;`): bounded, so a
reference is matched one way at a place, whatever zeros a hostile text holds."""
_MAX_PATTERNS = 64
"""Compiled patterns kept per redactor, one per set of values a text may hold (usually one)."""


def _hex(number: int, digits: int) -> str:
    """`number` in hexadecimal as a pattern that takes either case."""
    return "".join(
        f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in f"{number:0{digits}x}"
    )


@dataclass(frozen=True)
class _Spellings:
    """Every way a request or an answer writes one character: `plain` forms (no leading
    backslash: the character, its percent-encoding) and JSON escape `tails`, each of which
    follows a run of 1 to `_MAX_BACKSLASHES` backslashes; with the longest match of each."""

    plain: tuple[tuple[str, int], ...]
    tails: tuple[tuple[str, int], ...] = ()

    def pattern(self) -> str:
        """The character's pattern: its escapes share one run of backslashes."""
        forms = [form for form, _ in self.plain]
        if self.tails:
            forms.append(f"{_BACKSLASHES}(?:{'|'.join(tail for tail, _ in self.tails)})")
        return forms[0] if len(forms) == 1 else f"(?:{'|'.join(forms)})"

    def longest(self) -> int:
        """Characters of the longest text the pattern matches."""
        escaped = [_MAX_BACKSLASHES + length for _, length in self.tails]
        return max([length for _, length in self.plain] + escaped)


def _spellings(char: str) -> _Spellings:
    """How `char` is written: as itself, percent-encoded, as an HTML character reference,
    JSON-escaped (nested up to three strings deep), and a space also as `+` (a form's, and
    yarl's query)."""
    if char in _PLAIN:
        return _Spellings(((char, 1),))
    encoded = char.encode("utf-8", errors="surrogatepass")
    code = ord(char)
    plain = [
        # The reference first: a value ending in `&` then takes all of `&amp;`, not its `&`.
        _html_reference(char, code),
        (re.escape(char), 1),
        ("".join(f"%{_hex(byte, 2)}" for byte in encoded), 3 * len(encoded)),
    ]
    if code > 0xFFFF:  # a surrogate pair, as `json.dumps` and Java write it
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        tails = [(f"u{_hex(high, 4)}{_BACKSLASHES}u{_hex(low, 4)}", 5 + _MAX_BACKSLASHES + 5)]
    else:
        tails = [(f"u{_hex(code, 4)}", 5)]
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        tails.append((re.escape(short), 1))
    if char == " ":
        plus = _spellings("+")
        plain.extend(plus.plain)
        tails.extend(plus.tails)
    return _Spellings(tuple(plain), tuple(tails))


def _html_reference(char: str, code: int) -> tuple[str, int]:
    """`char` as an HTML or XML character reference, as a downstream that echoes the request
    HTML-escaped writes it: decimal `&#39;` or hex `&#x27;` (`x` and the digits in either
    case, up to `_MAX_ZEROS` leading zeros; one code point beyond the BMP, not a surrogate
    pair), and the named reference of `& < > " '`. One plain form: each begins with `&` and
    ends at its `;`, so it matches one way at a place and adds no backtracking."""
    decimal, hexadecimal = str(code), f"{code:x}"
    zeros = f"0{{0,{_MAX_ZEROS}}}"
    names = _HTML_NAMES.get(char, ())
    forms = [f"#{zeros}{decimal}", f"#[xX]{zeros}{_hex(code, len(hexadecimal))}", *names]
    longest = max(
        3 + _MAX_ZEROS + len(decimal),  # `&#` zeros digits `;`
        4 + _MAX_ZEROS + len(hexadecimal),
        *(2 + len(name) for name in names),
    )
    return f"&(?:{'|'.join(forms)});", longest


@dataclass(frozen=True)
class _Value:
    pattern: str
    longest: int
    """Characters of the longest text `pattern` matches."""
    anchor: str
    """The longest run of ASCII letters and digits in the value: in every spelling of it.
    Empty when it has none (its pattern then runs on every text)."""


def _backslash_run(count: int, then: str | None) -> tuple[str, int]:
    """A run of `count` backslashes in a value, and the character after it (None: the
    value ends). Written: raw or escaped in up to three nested JSON strings (as many to eight
    times as many backslashes), percent-encoded, or as HTML references (`&#92;`). One
    bounded repetition for the run, and when the next character may be escaped, one for the
    run and that escape's backslashes together: two repetitions side by side could split a
    text's run of backslashes in up to eight ways each, multiplied from pair to pair, before
    failing on a hostile text."""
    most = count * _MAX_BACKSLASHES
    reference, reference_length = _html_reference("\\", ord("\\"))
    # Percent-encoded or as HTML references (`&#92;`): one fixed-count group each, whose
    # first character (`%`, `&`) no other alternative starts with.
    encoded = f"(?:%5[cC]){{{count}}}|(?:{reference}){{{count}}}"
    widest = max(most, count * reference_length)
    after = _spellings(then) if then is not None else None
    if after is None or not after.tails:
        return rf"(?:\\{{{count},{most}}}|{encoded})", widest
    # The escape's own run joins this one: `\\{count+1, most+8}` then the escape's tail.
    joined = rf"\\{{{count + 1},{most + _MAX_BACKSLASHES}}}"
    plain = "|".join(form for form, _ in after.plain)
    tails = "|".join(tail for tail, _ in after.tails)
    pattern = (
        rf"(?:\\{{{count},{most}}}(?:{plain})|{joined}(?:{tails})|(?:{encoded}){after.pattern()})"
    )
    return pattern, widest + after.longest()


@functools.lru_cache(maxsize=1024)
def _value(value: str) -> _Value:
    """Cached: a fan-out's children use the same secrets, and building a value's pattern
    costs tens of microseconds (the compiled patterns are kept by `re` anyway)."""
    parts: list[tuple[str, int]] = []
    chars = [(char, len(list(group))) for char, group in itertools.groupby(value)]
    index = 0
    while index < len(chars):
        char, count = chars[index]
        index += 1
        if char != "\\":
            parts.extend([_char(char)] * count)
            continue
        following = chars[index] if index < len(chars) else None
        if following is not None and _spellings(following[0]).tails:
            # The run's pattern holds the first of the characters after it.
            parts.append(_backslash_run(count, following[0]))
            parts.extend([_char(following[0])] * (following[1] - 1))
            index += 1
        else:
            parts.append(_backslash_run(count, None))
    runs = re.findall("[A-Za-z0-9]+", value)
    return _Value(
        pattern="".join(pattern for pattern, _ in parts),
        longest=sum(length for _, length in parts),
        anchor=max(runs, key=len, default=""),
    )


def _char(char: str) -> tuple[str, int]:
    spellings = _spellings(char)
    return spellings.pattern(), spellings.longest()


class Redactor:
    """Replaces known secret values (in every spelling it recognises) with `***`.

    Empty (false) until a value is added: then `scrub` returns its argument untouched, so a
    step without secrets pays nothing.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: dict[str, _Value] = {}
        self._patterns: dict[tuple[str, ...], re.Pattern[str]] = {}
        self._shortest = 0
        for value in values:
            self.add(value)

    def __bool__(self) -> bool:
        return bool(self._values)

    @property
    def longest(self) -> int:
        """Characters of the longest text redacted as one value (0 when empty)."""
        return max((value.longest for value in self._values.values()), default=0)

    def add(self, value: str) -> None:
        """Redact `value` (in every spelling) from now on."""
        if len(value) >= MIN_REDACTED_CHARS and value not in self._values:
            self._values[value] = _value(value)
            self._patterns.clear()
            self._shortest = min(map(len, self._values))

    def _compiled(self, present: tuple[str, ...]) -> re.Pattern[str]:
        pattern = self._patterns.get(present)
        if pattern is None:
            if len(self._patterns) >= _MAX_PATTERNS:
                self._patterns.clear()
            # Longest value first: a value that contains another must win, or its rest would
            # stay when the shorter one is replaced first.
            ordered = sorted(present, key=len, reverse=True)
            pattern = re.compile("|".join(self._values[value].pattern for value in ordered))
            self._patterns[present] = pattern
        return pattern

    def text(self, text: str) -> str:
        """`text` with every known value replaced by `***`."""
        if not self._values:
            return text
        return self._redact(text, tuple(self._values))

    def _redact(self, text: str, candidates: tuple[str, ...]) -> str:
        """`text` redacted of those of `candidates` (known values) it holds."""
        if len(text) < self._shortest:
            return text  # every spelling is at least as long as its value
        # Only the values whose anchor the text holds can be in it (module docstring).
        present = tuple(v for v in candidates if self._values[v].anchor in text)
        if not present:
            return text
        return self._compiled(present).sub(REDACTED, text)

    def scrub(self, value: Any) -> Any:
        """`value` with every string inside it redacted: object keys and values, list items,
        recursively (iteratively: outputs may be deep). Other types are returned as they are,
        and so is `value` itself when none of its strings holds a known value."""
        if not self._values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, dict | list):
            return value
        # One pass over all the strings first: the anchors are looked for once in their
        # whole text, not once per string, and most outputs hold no value at all.
        texts = "\0".join(_strings(value))  # no anchor holds NUL: none spans two strings
        candidates = tuple(v for v, known in self._values.items() if known.anchor in texts)
        if not candidates:
            return value
        root: list[Any] = [None]
        # (container the result goes into, its key or index, the value to scrub)
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            target, slot, item = stack.pop()
            if isinstance(item, str):
                target[slot] = self._redact(item, candidates)
            elif isinstance(item, dict):
                copy: dict[str, Any] = {}
                target[slot] = copy
                for key, child in item.items():
                    new_key = self._redact(key, candidates) if isinstance(key, str) else key
                    copy[new_key] = None
                    stack.append((copy, new_key, child))
            elif isinstance(item, list):
                items: list[Any] = [None] * len(item)
                target[slot] = items
                stack.extend((items, index, child) for index, child in enumerate(item))
            else:
                target[slot] = item
        return root[0]


def _strings(value: dict[Any, Any] | list[Any]) -> list[str]:
    """Every string in `value`: keys, values and items at any depth (iteratively)."""
    found: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(key for key in item if isinstance(key, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
