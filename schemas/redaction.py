"""Redaction: a secret's value replaced by `***` in everything a step records.

A step that uses secrets holds their values in memory while it calls its destination; what it
records afterwards (its output, its error with the answer's body excerpt, its log lines and
their attempt history) may show them again: a URL in an error message, a downstream that echoes
the request back. Everything the engine records of such a step goes through one `Redactor`
first (docs/architecture.md, 'Secrets').

A value is matched as one pattern (`_value`) in which each of its characters may be
written any way a request or an answer writes that character:

* as itself, or percent-encoded (its UTF-8 bytes as `%XX`, either case, or encoded once more
  as `%25XX`: a server that re-encodes a query string it echoes), and a space also as `+`.
  Which characters a client leaves unencoded differs by client and by part of the URL
  (yarl, which aiohttp sends every URL through, writes a `query` value's space as `+` and
  leaves `/ : @ ! $ ' ( ) * , ?` alone; a path segment keeps `%3F` but not `%40`), so every
  choice is accepted rather than a list of choices that must track the client's;
* JSON string escapes, as encoders write them: `\\uXXXX` (either case: Python, PHP, Gson's
  HTML-safe `\\u003d`, .NET's `\\u002B`; a surrogate pair beyond the BMP), `\\/` (PHP),
  `\\"`, `\\\\` and `\\n`-style escapes, nested up to three JSON strings deep (a body echoed
  inside a JSON answer that is itself quoted in another: up to 8 backslashes); such a JSON
  text shown in an HTML page (`\\&quot;`: the escape's `"` or `/` as a reference) or
  percent-encoded in a URL (`%5C%22`, `%5Cu00e9`: the backslashes as `%5C` or `%255C`);
* a non-ASCII character misdecoded: its UTF-8 bytes read as Latin-1 or Windows-1252, or
  `U+FFFD` or `?` in its place (`_misdecoded`), each such text maybe JSON-escaped
  (`_misdecoded_escaped`) or percent-encoded again;
* HTML and XML character references, as a downstream that echoes the request HTML-escaped
  writes them: decimal `&#39;` or hex `&#x27;` with up to six leading zeros (`&#039;`, PHP's
  quote) for any character, without its `;` where HTML reads it so (no digit or `;` after
  it), and the named references HTML5 has for ASCII punctuation (`_HTML_NAMES`); each maybe
  escaped once more (`&amp;#39;`). Each is a whole form of its character (`_html_reference`),
  never combined with the forms above (`&#x27;` written JSON-escaped or percent-encoded is
  not recognised).

ASCII letters and digits are written only as themselves, percent-encoded or as numeric
references: never JSON-escaped. A text without any letter's or digit's `%XX`, `%25XX` or
numeric reference (`_ENCODED_PLAIN`), which is most texts, holds them only as themselves, so
the longest run of them in a value (its anchor) is in every spelling of it there: such a text is
matched against a pattern that takes them as themselves only (`_Value.plain`), and only for
the values whose anchor it holds; a text without any is returned after one substring test
per value. Other texts are matched against every value's whole pattern.

The values' matches are found one value at a time, overlapping ones too, and every stretch
of text covered by one or more of them becomes one `***`: two values that overlap in a text
(one's end is the other's start) leave nothing of either. A value shorter than
`MIN_REDACTED_CHARS` is not redacted. What the matching cannot see is listed in
docs/security.md ('What is not protected'): a value transformed by the destination (hashed,
reversed, its case changed, percent-encoded three times, written with other named HTML
references than `_HTML_NAMES`, re-encoded some other way) or cut in pieces.
"""

from __future__ import annotations

import functools
import itertools
import re
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

REDACTED = "***"
"""What a secret's value is replaced with."""
MIN_REDACTED_CHARS = 4
"""Shorter texts are not redacted: replacing every `ab` of a body would make it unreadable and
say more about the value than it hides. Stored secrets are longer (at least 8 characters); a
URL's own `user:password@` written in a workflow may not be, and its 1 to 3 character password
is then not redacted (logged URLs never show it anyway)."""

_PLAIN = frozenset(string.ascii_letters + string.digits)
"""Characters no JSON encoder escapes and no URL or HTML escaper needs to: a text writes them
as themselves unless `_ENCODED_PLAIN` finds an encoded one in it."""
_ENCODED_PLAIN = re.compile(
    r"%(?:25)?(?:3[0-9]|[46][1-9a-fA-F]|[57][0-9aA])"
    r"|&(?:amp;)?#0*(?:4[89]|5[0-7]|6[5-9]|[78][0-9]|9[07-9]|1[01][0-9]|12[0-2])(?![0-9])"
    r"|&(?:amp;)?#[xX]0*(?:3[0-9]|[46][1-9a-fA-F]|[57][0-9aA])(?![0-9a-fA-F])"
)
"""Where a text may write an ASCII letter or digit otherwise than as itself: the `%XX` or
`%25XX` of bytes 0x30-0x39, 0x41-0x5A and 0x61-0x7A, and their numeric references (48-57,
65-90, 97-122, maybe escaped once more: `&amp;#97;`), so an HTML text's `&#39;` does not
make every value's pattern run on it."""
_MAX_BACKSLASHES = 8
"""A JSON escape's backslashes three strings deep: 1, 3 or 7 before an escaped character,
2, 4 or 8 for a backslash itself."""
_PERCENT_BACKSLASH = "%(?:25)?5[cC]"
_BACKSLASHES = rf"(?:\\{{1,{_MAX_BACKSLASHES}}}|(?:{_PERCENT_BACKSLASH}){{1,{_MAX_BACKSLASHES}}})"
"""The backslashes before a JSON escape's tail: as themselves, or each percent-encoded (once
or twice: `%5C`, `%255C`), as a URL that carries a JSON text writes them (`%5Cu00e9`,
`%5C%22`). Two alternatives that start with different characters, each one bounded
repetition, so a text's run is read one way."""
_BACKSLASHES_CHARS = len("%255C") * _MAX_BACKSLASHES
"""Characters of the longest text `_BACKSLASHES` matches."""
_SHORT_ESCAPES = {'"': '"', "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
"""The two-character JSON escapes (RFC 8259) by the character they stand for; a backslash's
own (`\\\\`) is `_backslash_run`'s."""
_HTML_NAMES: dict[str, tuple[str, ...]] = {
    "\t": ("Tab",),
    "\n": ("NewLine",),
    "!": ("excl",),
    '"': ("quot", "QUOT"),
    "#": ("num",),
    "$": ("dollar",),
    "%": ("percnt",),
    "&": ("amp", "AMP"),
    "'": ("apos",),
    "(": ("lpar",),
    ")": ("rpar",),
    "*": ("ast", "midast"),
    "+": ("plus",),
    ",": ("comma",),
    ".": ("period",),
    "/": ("sol",),
    ":": ("colon",),
    ";": ("semi",),
    "<": ("lt", "LT"),
    "=": ("equals",),
    ">": ("gt", "GT"),
    "?": ("quest",),
    "@": ("commat",),
    "[": ("lsqb", "lbrack"),
    "\\": ("bsol",),
    "]": ("rsqb", "rbrack"),
    "^": ("Hat",),
    "_": ("lowbar", "UnderBar"),
    "`": ("grave", "DiacriticalGrave"),
    "{": ("lcub", "lbrace"),
    "|": ("verbar", "vert", "VerticalLine"),
    "}": ("rcub", "rbrace"),
}
"""Every named character reference HTML5 has for an ASCII character (its punctuation, tab and
newline; `~`, space and letters have none), case-sensitive as HTML reads them: escapers write
`& < > " '` as `&amp; &lt; &gt; &quot; &apos;`, and a server that escapes more writes these.
The list is closed (a test holds it to HTML5's table); other characters' names (`&nbsp;`,
`&eacute;`) are not matched."""
_LEGACY_NAMES = frozenset({"amp", "AMP", "lt", "LT", "gt", "GT", "quot", "QUOT"})
"""The names of `_HTML_NAMES` HTML reads without their `;` too (`&amp` is `&`)."""
_MAX_ZEROS = 6
"""Leading zeros a numeric reference may carry (`&#039;`, PHP; `&#x0027;`): bounded, so a
reference is matched one way at a place, whatever zeros a hostile text holds."""


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
        escaped = [_BACKSLASHES_CHARS + length for _, length in self.tails]
        return max([length for _, length in self.plain] + escaped)


def _spellings(char: str, encoded_plain: bool = True) -> _Spellings:
    """How `char` is written: as itself, percent-encoded (once or twice), as an HTML character
    reference, JSON-escaped (nested up to three strings deep), and a space also as `+` (a
    form's, and yarl's query). An ASCII letter or digit: as itself, and when `encoded_plain`,
    percent-encoded or as a numeric reference."""
    code = ord(char)
    if char in _PLAIN:
        if not encoded_plain:
            return _Spellings(((char, 1),))
        return _Spellings(((char, 1), _percent(char), _html_reference(char, code)))
    plain = [
        # The reference first: a value ending in `&` then takes all of `&amp;`, not its `&`.
        _html_reference(char, code),
        (re.escape(char), 1),
        _percent(char),
        *_misdecoded(char),
    ]
    if code > 0xFFFF:  # a surrogate pair, as `json.dumps` and Java write it
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        tails = [(f"u{_hex(high, 4)}{_BACKSLASHES}u{_hex(low, 4)}", 5 + _BACKSLASHES_CHARS + 5)]
    else:
        tails = [(f"u{_hex(code, 4)}", 5)]
    tails.extend(_misdecoded_escaped(char))
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        tails.append((re.escape(short), 1))
        if short == char:
            # `\"` and `\/` keep their character, which a page or a URL that shows the JSON
            # text writes escaped in turn: `\&quot;` (an HTML page of a JSON echo), `%5C%22`.
            tails.extend([_html_reference(char, code), _percent(char)])
    if char == " ":
        plus = _spellings("+")
        plain.extend(plus.plain)
        tails.extend(plus.tails)
    return _Spellings(tuple(plain), tuple(tails))


def _misdecoded(char: str) -> list[tuple[str, int]]:
    """A non-ASCII `char` as a text shows it when the answer's charset is not the one its
    bytes are in: its UTF-8 bytes read as Latin-1 or Windows-1252 (`é` as `Ã©`: servers that
    label every text ISO-8859-1), and one character the decoder (`U+FFFD`) or a lossy
    transcoder (`?`) put in its place (`é` sent back in Latin-1 and read as UTF-8). Fixed
    texts, so each matches one way."""
    forms = [(re.escape(text), len(text)) for text in _misdecoded_texts(char)]
    # A misdecoded text percent-encoded again (a server that reads the query as Latin-1 and
    # re-encodes it as UTF-8 in a URL it echoes): `é` as `%C3%83%C2%A9`.
    forms += [_percent_text(text) for text in _misdecoded_texts(char) if not text.isascii()]
    return forms


def _misdecoded_texts(char: str) -> list[str]:
    """The texts `_misdecoded` takes for `char` (none for an ASCII character)."""
    if char.isascii():
        return []
    encoded = char.encode("utf-8", errors="surrogatepass")
    texts = {encoded.decode("latin-1"), encoded.decode("cp1252", errors="replace"), "\ufffd", "?"}
    return sorted(texts)


def _percent_text(text: str) -> tuple[str, int]:
    """`text`'s characters each as `_percent` writes it, one after the other."""
    parts = [_percent(c) for c in text]
    return "".join(p for p, _ in parts), sum(n for _, n in parts)


def _misdecoded_escaped(char: str) -> list[tuple[str, int]]:
    """`_misdecoded`'s texts of a non-ASCII `char` as a JSON encoder that escapes non-ASCII
    writes them (`é` read as Latin-1 is `Ã©`, which `json.dumps` and PHP's `json_encode`
    write `\\u00c3\\u00a9`): JSON escape tails, each character's escape after the first
    behind its own run of backslashes. Every character of such a text is non-ASCII, so an
    encoder that escapes one escapes them all; `?` is ASCII and written as itself."""
    texts = [text for text in _misdecoded_texts(char) if not text.isascii()]
    return [
        (
            f"{_BACKSLASHES}".join(f"u{_hex(ord(c), 4)}" for c in text),
            5 * len(text) + _BACKSLASHES_CHARS * (len(text) - 1),
        )
        for text in texts
        if all(ord(c) <= 0xFFFF for c in text)
    ]


def _percent(char: str) -> tuple[str, int]:
    """`char`'s UTF-8 bytes as `%XX`, each either case and each maybe encoded once more
    (`%25XX`: the `%` itself encoded, as a server that re-encodes a query string writes it).
    One level only: `%2525XX` is not matched."""
    encoded = char.encode("utf-8", errors="surrogatepass")
    return "".join(f"%(?:25)?{_hex(byte, 2)}" for byte in encoded), 5 * len(encoded)


def _html_reference(char: str, code: int) -> tuple[str, int]:
    """`char` as an HTML or XML character reference, as a downstream that echoes the request
    HTML-escaped writes it: decimal `&#39;` or hex `&#x27;` (`x` and the digits in either
    case, up to `_MAX_ZEROS` leading zeros; one code point beyond the BMP, not a surrogate
    pair), without its `;` when no digit follows (HTML reads `&#39 ` as `' `), and its
    `_HTML_NAMES`; each maybe escaped once more (`&amp;#39;`). One plain form: each begins
    with `&` and ends where HTML ends it (a lookahead, not a repetition, decides a `;`-less
    one), so it matches one way at a place and adds no backtracking."""
    decimal, hexadecimal = str(code), f"{code:x}"
    zeros = f"0{{0,{_MAX_ZEROS}}}"
    names = _HTML_NAMES.get(char, ())
    # A `;` after a reference is always its end, as HTML reads it, never the value's own
    # `;`: read both ways, each `&#59;` of a text could end where it starts or one later, and
    # a run of them would be split exponentially many ways before failing.
    forms = [
        f"#{zeros}{decimal}(?:;|(?![0-9;]))",
        f"#[xX]{zeros}{_hex(code, len(hexadecimal))}(?:;|(?![0-9a-fA-F;]))",
        *(f"{name}(?:;|(?!;))" if name in _LEGACY_NAMES else f"{name};" for name in names),
    ]
    longest = max(
        3 + _MAX_ZEROS + len(decimal),  # `&#` zeros digits `;`
        4 + _MAX_ZEROS + len(hexadecimal),
        *(2 + len(name) for name in names),
    )
    # `&amp;` first: the reference escaped once more (`&amp;#39;`), as a page that escapes a
    # text already escaped writes it. One level, like `%25XX`.
    return f"&(?:amp;)?(?:{'|'.join(forms)})", 4 + longest


@dataclass(frozen=True)
class _Value:
    whole: re.Pattern[str]
    """Every spelling of the value."""
    plain: re.Pattern[str]
    """Its spellings with each ASCII letter and digit as itself: all a text in which
    `_ENCODED_PLAIN` finds nothing can hold."""
    longest: int
    """Characters of the longest text `whole` matches."""
    anchor: str
    """The longest run of ASCII letters and digits in the value: in every spelling of it
    `plain` matches. Empty when it has none (its pattern then runs on every text)."""


def _backslash_run(count: int, then: str | None, encoded_plain: bool) -> tuple[str, int]:
    """A run of `count` backslashes in a value, and the character after it (None: the
    value ends). Written: raw or escaped in up to three nested JSON strings (as many to eight
    times as many backslashes), percent-encoded (once or twice), or as HTML references
    (`&#92;`, `&bsol;`). One bounded repetition for the run, and when the next character may
    be escaped, one for the run and that escape's backslashes together: two repetitions side
    by side could split a text's run of backslashes in up to eight ways each, multiplied from
    pair to pair, before failing on a hostile text."""
    most = count * _MAX_BACKSLASHES
    reference, reference_length = _html_reference("\\", ord("\\"))
    percent = _PERCENT_BACKSLASH
    # As HTML references: one fixed-count group, whose first character (`&`) no other
    # alternative starts with. Percent-encoded (`%5C`, `%255C`): like the raw run, as many
    # to eight times as many, since a URL may carry the JSON text that escaped them.
    referenced = f"(?:{reference}){{{count}}}"
    widest = max(most * len("%255C"), count * reference_length)
    after = _spellings(then, encoded_plain) if then is not None else None
    if after is None or not after.tails:
        return rf"(?:\\{{{count},{most}}}|(?:{percent}){{{count},{most}}}|{referenced})", widest
    # The escape's own run joins this one: `\\{count+1, most+8}` then the escape's tail,
    # raw or percent-encoded alike (never mixed in one run).
    joined = f"{{{count + 1},{most + _MAX_BACKSLASHES}}}"
    plain = "|".join(form for form, _ in after.plain)
    tails = "|".join(tail for tail, _ in after.tails)
    pattern = (
        rf"(?:\\{{{count},{most}}}(?:{plain})|\\{joined}(?:{tails})"
        rf"|(?:{percent}){{{count},{most}}}(?:{plain})|(?:{percent}){joined}(?:{tails})"
        rf"|{referenced}{after.pattern()})"
    )
    widest = max(widest, (most + _MAX_BACKSLASHES) * len("%255C"))
    return pattern, widest + after.longest()


@functools.lru_cache(maxsize=1024)
def _value(value: str) -> _Value:
    """Cached: a fan-out's children use the same secrets, and building and compiling a
    value's patterns costs tens of microseconds."""
    whole, longest = _pattern(value, encoded_plain=True)
    runs = re.findall("[A-Za-z0-9]+", value)
    return _Value(
        whole=re.compile(whole),
        plain=re.compile(_pattern(value, encoded_plain=False)[0]),
        longest=longest,
        anchor=max(runs, key=len, default=""),
    )


def _pattern(value: str, encoded_plain: bool) -> tuple[str, int]:
    """`value`'s pattern, and the characters of the longest text it matches."""
    parts: list[tuple[str, int]] = []
    chars = [(char, len(list(group))) for char, group in itertools.groupby(value)]
    index = 0
    while index < len(chars):
        char, count = chars[index]
        index += 1
        if char != "\\":
            parts.extend([_char(char, encoded_plain)] * count)
            continue
        following = chars[index] if index < len(chars) else None
        if following is not None and _spellings(following[0]).tails:
            # The run's pattern holds the first of the characters after it.
            parts.append(_backslash_run(count, following[0], encoded_plain))
            parts.extend([_char(following[0], encoded_plain)] * (following[1] - 1))
            index += 1
        else:
            parts.append(_backslash_run(count, None, encoded_plain))
    return "".join(pattern for pattern, _ in parts), sum(length for _, length in parts)


def _char(char: str, encoded_plain: bool) -> tuple[str, int]:
    spellings = _spellings(char, encoded_plain)
    return spellings.pattern(), spellings.longest()


_PLACEHOLDERS = frozenset("?\ufffd")
"""What a lossy decoder or transcoder writes for a character it cannot show (`_misdecoded`)."""


def _spans(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
    """Where `pattern` matches in `text`, overlapping matches too (a value `abab` in
    `ababab` at 0 and 2): one search from each match's next character, so as many searches
    as matches and no more positions tried than one scan of the text. A match made only of
    placeholders (`?`, U+FFFD) is not one: it shows nothing of the value, and a value of
    non-ASCII characters only would otherwise take every run of `?` in every text."""
    position = 0
    while (match := pattern.search(text, position)) is not None:
        if not _PLACEHOLDERS.issuperset(match.group()):
            yield match.span()
        position = match.start() + 1


def _unused(taken: dict[str, Any], key: str) -> str:
    """`key`, a redacted object key, made distinct from the keys already `taken`: two keys
    that redact alike (`token-***`) keep both their values (`token-***`, `token-*** #2`)."""
    candidate, number = key, 1
    while candidate in taken:
        number += 1
        candidate = f"{key} #{number}"
    return candidate


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each stretch covered by one or more of `spans` (sorted) as one `***`."""
    parts: list[str] = []
    cursor, (start, end) = 0, spans[0]
    for next_start, next_end in spans[1:]:
        if next_start < end:  # overlapping: one stretch
            end = max(end, next_end)
            continue
        parts += [text[cursor:start], REDACTED]
        cursor, start, end = end, next_start, next_end
    parts += [text[cursor:start], REDACTED, text[end:]]
    return "".join(parts)


class Redactor:
    """Replaces known secret values (in every spelling it recognises) with `***`.

    Empty (false) until a value is added: then `scrub` returns its argument untouched, so a
    step without secrets pays nothing.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: dict[str, _Value] = {}
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
            self._shortest = min(map(len, self._values))

    def text(self, text: str) -> str:
        """`text` with every known value replaced by `***`."""
        if not self._values:
            return text
        return self._redact(text, tuple(self._values))

    def _redact(self, text: str, candidates: tuple[str, ...], encoded: bool = True) -> str:
        """`text` redacted of those of `candidates` (known values) it holds; `encoded`
        False when `text` is known to hold no `_ENCODED_PLAIN` (a scrubbed output's strings
        are looked at together)."""
        if len(text) < self._shortest:
            return text  # every spelling is at least as long as its value
        values = self._values
        if encoded and _encoded_plain(text):
            patterns = [values[value].whole for value in candidates]
        else:
            # Only the values whose anchor the text holds can be in it (module docstring).
            patterns = [values[value].plain for value in candidates if values[value].anchor in text]
            if not patterns:
                return text
        spans = sorted(span for pattern in patterns for span in _spans(pattern, text))
        return _replaced(text, spans) if spans else text

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
        # A letter or digit written encoded anywhere: every value may be there.
        encoded = _encoded_plain(texts)
        candidates = tuple(
            v for v, known in self._values.items() if encoded or known.anchor in texts
        )
        if not candidates:
            return value
        root: list[Any] = [None]
        # (container the result goes into, its key or index, the value to scrub)
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            target, slot, item = stack.pop()
            if isinstance(item, str):
                target[slot] = self._redact(item, candidates, encoded)
            elif isinstance(item, dict):
                copy: dict[str, Any] = {}
                target[slot] = copy
                for key, child in item.items():
                    new_key = key
                    if isinstance(key, str):
                        new_key = self._redact(key, candidates, encoded)
                        if new_key != key:
                            new_key = _unused(copy, new_key)
                    copy[new_key] = None
                    stack.append((copy, new_key, child))
            elif isinstance(item, list):
                items: list[Any] = [None] * len(item)
                target[slot] = items
                stack.extend((items, index, child) for index, child in enumerate(item))
            else:
                target[slot] = item
        return root[0]


def _encoded_plain(text: str) -> bool:
    """Whether `text` may write an ASCII letter or digit encoded (`_ENCODED_PLAIN`). The
    substring tests first: most texts hold no `%`, `&#` or `;#` (`&amp;#97;`), and they cost
    a fraction of the search."""
    if "%" not in text and "&#" not in text and ";#" not in text:
        return False
    return _ENCODED_PLAIN.search(text) is not None


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
