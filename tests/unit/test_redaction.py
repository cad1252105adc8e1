"""The redactor (schemas/redaction.py), the URL a log shows (vertices/gateway_request.py) and
the body excerpt cut after redaction (vertices/gateway_response.py)."""

from __future__ import annotations

import base64
import html
import json
import time
import xml.sax.saxutils
from urllib.parse import quote, quote_plus

import aiohttp
import pytest
import yarl

from schemas.redaction import REDACTED, Redactor
from tests.basic_auth import basic_credential
from vertices.gateway_request import url_for_log
from vertices.gateway_response import EXCERPT_CHARS, Answer, excerpt

SECRET = 'cnry_Q9v+Zt=Kx.7Lw~pA/é"x'


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET, ensure_ascii=False)[1:-1],
        quote(SECRET, safe=""),
        quote(SECRET),
        quote_plus(SECRET),
    ],
    ids=["raw", "json-ascii", "json", "percent", "path", "form"],
)
def test_every_encoding_of_a_value_is_redacted(form: str) -> None:
    assert Redactor([SECRET]).text(f"before {form} after") == f"before {REDACTED} after"


def test_the_forms_yarl_sends_a_value_encoded_as_one_component_in_are_redacted() -> None:
    """A GATEWAY encodes a URL value whole (`quote(v, safe="")`); aiohttp sends the URL through
    yarl, which decodes again what a path segment or a query value need not keep encoded.
    A destination that echoes its request line shows those forms."""
    value = 'p@ss w/rd?&=é"x+;'
    encoded = quote(value, safe="")
    sent = yarl.URL(f"http://h.example/a/{encoded}/b?k={encoded}")
    path_form = sent.raw_parts[2]
    query_form = sent.raw_query_string.removeprefix("k=")
    assert {path_form, query_form}.isdisjoint({encoded, quote(value)})  # they are other forms
    redactor = Redactor([value])
    assert redactor.text(sent.raw_path_qs) == f"/a/{REDACTED}/b?k={REDACTED}"


AWKWARD = [
    "correct horse/battery staple",
    'Sk-é/quote"&amp x+y%41~ZZTOP',
    "tok/En+base64==",
    "a&b=c#d?e%zz;f/g[h]",
    'it\'s "quoted" (maybe)*!$,',
    "pässwörd~ünï çé €",
    "emoji 🗝️ key:@end",
    "C:\\dir\\\\n+tab\t1",
    "é/é/é/é/",  # no ASCII letter or digit: no anchor
]
"""Values a URL, a form or a JSON string give meanings to: spaces, `/ + & = % # ? [ ]`,
quotes, `~ * ' ( )`, non-ASCII (beyond the BMP too), backslashes and control characters."""


def _sent(value: str) -> dict[str, str]:
    """How the HTTP client sends `value`, by where, asked of yarl (aiohttp's URL) itself: a
    `query` value (aiohttp passes `params` to `URL.extend_query`), and a value the gateway
    encoded whole into the url's path, query and `user:password@`."""
    encoded = quote(value, safe="")
    in_url = yarl.URL(f"http://u:{encoded}@h.example/a/{encoded}/b?k={encoded}")
    params = yarl.URL("http://h.example/").extend_query([("k", value)])
    return {
        "params": params.raw_query_string.removeprefix("k="),
        "path": in_url.raw_parts[2],
        "query": in_url.raw_query_string.removeprefix("k="),
        "password": in_url.raw_password or "",
        "url text": str(in_url),
    }


def _escaped(form: str) -> dict[str, str]:
    """`form` inside a JSON string as servers' encoders write it."""
    ascii_json = json.dumps(form)[1:-1]
    utf8_json = json.dumps(form, ensure_ascii=False)[1:-1]
    html_safe = {ord(c): f"\\u{ord(c):04x}" for c in "<>&='"}
    dotnet = {ord(c): f"\\u{ord(c):04X}" for c in "<>&'+`"}
    return {
        "as is": form,
        "python": ascii_json,
        "utf-8 json": utf8_json,
        "php": ascii_json.replace("/", "\\/"),
        "gson": utf8_json.translate(html_safe),
        ".net": "".join(
            f"\\u{ord(c):04X}" if 127 < ord(c) <= 0xFFFF else c for c in utf8_json
        ).translate(dotnet),
        "in a quoted body": json.dumps(json.dumps({"k": form}))[1:-1],
        "php, quoted twice": json.dumps(json.dumps({"k": form})).replace("/", "\\/")[1:-1],
    }


@pytest.mark.parametrize("value", AWKWARD)
def test_every_way_the_client_sends_a_value_and_a_server_echoes_it_is_redacted(
    value: str,
) -> None:
    redactor = Redactor([value])
    leaks = []
    for where, sent in _sent(value).items():
        for style, text in _escaped(sent).items():
            redacted = redactor.text(f"<{text}>")
            if REDACTED not in redacted or text in redacted:
                leaks.append(f"{where}, {style}: {text!r} -> {redacted!r}")
    assert leaks == []


def _shown(form: str) -> dict[str, str]:
    """`form`, a JSON text, as an answer shows it in turn: in an HTML page (a debug or error
    page that prints the JSON it received) or percent-encoded in a URL (a link, a `Location`,
    a `state` parameter that carries it)."""
    return {
        "html.escape": html.escape(form),
        "xml": xml.sax.saxutils.escape(form, {'"': "&quot;"}),
        "php htmlspecialchars": html.escape(form).replace("&#x27;", "&#039;"),
        "percent": quote(form, safe=""),
        "form": quote_plus(form),
    }


@pytest.mark.parametrize("value", AWKWARD)
def test_a_json_echo_shown_in_a_page_or_a_url_is_redacted(value: str) -> None:
    """A security review's leak: a downstream that prints the JSON it echoes in an HTML page
    wrote a value's `"` as `\\&quot;` (the JSON escape, then the page's), and one that puts
    it in a URL wrote `\\u00e9` as `%5Cu00e9`; everything else of the value was shown."""
    redactor = Redactor([value])
    leaks = []
    for where, sent in {"raw": value, **_sent(value)}.items():
        for style, text in _escaped(sent).items():
            for shown_as, shown in _shown(text).items():
                redacted = redactor.text(f"<td>{shown}</td>")
                if REDACTED not in redacted or shown in redacted:
                    leaks.append(f"{where}, {style}, {shown_as}")
    assert leaks == []


def test_the_json_echo_the_review_saw_in_a_page_is_redacted() -> None:
    value = "S3cr3t-Tok/en+=é&<>\"'x"
    page = html.escape(json.dumps({"headers": {"Authorization": f"Bearer {value}"}}))
    assert "S3cr3t" not in Redactor([value]).text(f"<pre>{page}</pre>")
    assert Redactor([value]).text(quote(json.dumps(value)[1:-1])) == REDACTED


def test_percent_encoded_backslashes_before_an_escape_are_matched_in_linear_time() -> None:
    """The percent-encoded run is one repetition with the escape's own, like the raw run."""
    value = "key" + '\\"' * 12
    redactor = Redactor([value])
    pair = "%5C" * 9 + "%22"
    hostile = "key" + pair * 11 + "%5C" * 9 + "x"
    started = time.perf_counter()
    assert redactor.text(hostile) == hostile
    assert time.perf_counter() - started < 10.0
    widest = value
    for _ in range(3):
        widest = json.dumps(widest)[1:-1]
    widest = quote(quote(widest, safe=""), safe="")  # in a URL's query, echoed re-encoded
    assert redactor.text(f"<{widest}>") == f"<{REDACTED}>"
    assert len(widest) <= redactor.longest
    assert redactor.text("key" + pair * 12) == REDACTED


def test_the_review_spellings_are_redacted() -> None:
    """What a security review saw a downstream echo: a `query` value as aiohttp sends it
    (space as `+`, `/` kept), and a header value PHP's json_encode wrote (`\\/`)."""
    redactor = Redactor(["correct horse/battery staple", 'Sk-é/quote"&amp x+y%41~ZZTOP'])
    redactor.add("tok/En+base64==")
    assert redactor.text("/php?pw=correct+horse/battery+staple&x=1") == "/php?pw=***&x=1"
    assert redactor.text("pw=Sk-%C3%A9/quote%22%26amp+x%2By%2541~ZZTOP") == "pw=***"
    assert redactor.text('{"x-token":"tok\\/En+base64=="}') == '{"x-token":"***"}'
    assert redactor.text('{"t":"tok/En+base64\\u003d\\u003d"}') == '{"t":"***"}'


def _numeric(text: str, style: str) -> str:
    """`text` with every character but an ASCII letter or digit as a numeric reference."""
    return "".join(c if c.isascii() and c.isalnum() else style.format(ord(c)) for c in text)


def _html_echoes(form: str) -> dict[str, str]:
    """`form` as downstreams that echo the request HTML-escaped write it: escapers of
    `& < > " '` (Python, PHP's htmlspecialchars, XML), and escapers that write every other
    character as a numeric reference too (`&#43;` for `+`)."""
    return {
        "html.escape": html.escape(form),
        "html.escape, quote=False": html.escape(form, quote=False),
        "xml (saxutils, &apos;)": xml.sax.saxutils.escape(form, {'"': "&quot;", "'": "&apos;"}),
        "php htmlspecialchars": html.escape(form).replace("&#x27;", "&#039;"),
        "html5 upper-case names": html.escape(form)
        .replace("&amp;", "&AMP;")
        .replace("&lt;", "&LT;")
        .replace("&quot;", "&QUOT;"),
        "decimal": _numeric(form, "&#{};"),
        "hex": _numeric(form, "&#x{:x};"),
        "HEX, padded": _numeric(form, "&#X{:04X};"),
    }


@pytest.mark.parametrize("value", AWKWARD)
def test_a_value_echoed_html_escaped_is_redacted(value: str) -> None:
    """A destination that shows the request in an HTML page (an error page, a debug echo)
    writes `& < > " '` as references, in the value as the client sent it (raw, in a URL, in
    a query); an escaper may write every other character as a numeric reference too."""
    redactor = Redactor([value])
    leaks = []
    for where, sent in {"raw": value, **_sent(value)}.items():
        for style, text in _html_echoes(sent).items():
            if where != "raw" and style in ("decimal", "hex", "HEX, padded"):
                continue  # a `%XX` whose `%` is a reference too: two encodings, not matched
            redacted = redactor.text(f"<td>{text}</td>")
            if REDACTED not in redacted or text in redacted:
                leaks.append(f"{where}, {style}")
    assert leaks == []


def test_the_html_references_a_review_named_are_redacted() -> None:
    value = "Ab+1&2'3\"4<5>6 7"
    redactor = Redactor([value])
    for text in [
        "Ab&#43;1&amp;2&#39;3&quot;4&lt;5&gt;6&#32;7",
        "Ab+1&amp;2&#x27;3&#34;4&#60;5&#x3e;6 7",
        "Ab&#x2B;1&#038;2&#0039;3&#x00022;4&lt;5&gt;6&#x20;7",
        'Ab+1&2&apos;3"4<5>6+7',  # a space also as `+`
    ]:
        assert redactor.text(f"[{text}]") == f"[{REDACTED}]", text
    # A value ending in `&` takes the whole reference, not its `&` alone.
    assert Redactor(["tok-en&"]).text("tok-en&amp;!") == f"{REDACTED}!"
    # What is not a reference of the character stays: a `;`-less one read as another
    # character, too many zeros, a name in the wrong case.
    for text in ["Ab&#431", "Ab&#000000043;1", "Ab&PLUS;1"]:
        assert Redactor(["Ab+1"]).text(text) == text


@pytest.mark.parametrize(
    ("value", "hostile"),
    [
        # Each `&` may be itself or the start of a reference: 12 of them, then a miss.
        ("key" + "&" * 12 + "!", "key" + "&amp;" * 12 + "?"),
        ("key" + "&#38;" * 12 + "!", "key" + "&#38;" * 12 + "&#38;#38;" * 11 + "?"),
        # Leading zeros: each NUL's reference may be zeros all the way; 7 zeros never match.
        ("key" + "\0" * 12 + "!", "key" + "&#0000000;" * 11 + "&#000000" * 40 + "?"),
        ("key" + "'" * 12 + "!", "key" + "&#x0000027;&#039;" * 6 + "&#x000000" * 500),
        # Backslashes as references beside their JSON escapes and the quote's reference.
        ("key" + '\\"' * 12 + "!", "key" + "&#92;&quot;\\\\&#34;" * 6 + "&#92;" * 300),
        # Letters and digits as references and percent-encoded once or twice, then a miss.
        ("key" + "a1" * 12 + "!", "key" + "&#97&#x31;%61%2531a&#49" * 4 + "&#x61" * 300),
        # A `;` may end a reference or be the value's own `;`.
        ("key" + ";" * 12 + "!", "key" + "&#59;&#59&semi;;" * 3 + "&#59" * 300 + "?"),
        # `%` as itself, `%25`, `%2525` and `&percnt;`: a `%25` is also a `%` and `25`.
        ("key%25" * 12 + "!", ("key%2525" + "%25" * 2 + "&percnt;25") * 3 + "%2525" * 300),
        # Every name of `/` beside its re-encoded and JSON forms.
        ("key" + "/" * 12 + "!", "key" + "&sol;&#47/%2F%252F\\/\\u002f" * 2 + "&sol" * 300),
        # A non-ASCII character misdecoded (`Ã©`), replaced, or raw beside its first half.
        ("key" + "é" * 12 + "!", "key" + "Ã©?\ufffd&#233" * 3 + "Ã" * 300),
        # References escaped twice beside once, and `&amp;` runs that are neither.
        ("key" + "'" * 12 + "!", "key" + "&amp;#39;&amp;apos;&#x27&amp;#x27" * 3 + "&amp;" * 300),
    ],
    ids=[
        "ampersands",
        "literal references",
        "zeros",
        "padded hex",
        "backslashes",
        "letters encoded",
        "semicolons",
        "percent signs",
        "slashes",
        "misdecoded",
        "escaped twice",
    ],
)
def test_html_references_are_matched_in_linear_time(value: str, hostile: str) -> None:
    redactor = Redactor([value])
    text = hostile * 50
    started = time.perf_counter()
    assert redactor.text(text) == text
    assert time.perf_counter() - started < 10.0  # linear; backtracking took 13 s or more
    assert redactor.text(f"<{html.escape(value)}>") == f"<{REDACTED}>"
    assert redactor.text(f"<{_numeric(value, '&#x{:06x};')}>") == f"<{REDACTED}>"


def test_the_longest_html_reference_is_within_longest() -> None:
    value = "é'&😀 x"
    widest = _numeric(value, "&#X000000{:X};")
    redactor = Redactor([value])
    assert redactor.text(f"<{widest}>") == f"<{REDACTED}>"
    assert len(widest) <= redactor.longest


def test_a_long_run_of_backslashes_is_matched_in_linear_time() -> None:
    """Each backslash of a value may be 1 to 8 in a text (nested JSON strings); matched one
    by one, a long run in a text could be split exponentially many ways before failing."""
    redactor = Redactor(["\\" * 12 + "tail-x"])
    text = "\\" * 20_000 + "tail-y"
    started = time.perf_counter()
    assert redactor.text(text) == text
    assert time.perf_counter() - started < 10.0  # linear; backtracking took 13 s or more
    assert redactor.text("\\" * 24 + "tail-x") == REDACTED


@pytest.mark.parametrize(("escaped", "json_tail"), [("-", "u002d"), ('"', '"'), ("/", "u002f")])
def test_backslashes_before_an_escapable_character_are_matched_in_linear_time(
    escaped: str, json_tail: str
) -> None:
    """A backslash run and the escape of the character after it are one repetition: as two
    side by side, each pair could split a text's 9 backslashes 8 ways, 8^pairs tries in all
    before failing (12 pairs: hours; 10 quote pairs took 13 s before the fix)."""
    value = "key" + ("\\" + escaped) * 12
    redactor = Redactor([value])
    pair = "\\" * 9 + json_tail
    hostile = "key" + pair * 11 + "\\" * 9 + "x"
    started = time.perf_counter()
    assert redactor.text(hostile) == hostile
    assert time.perf_counter() - started < 10.0  # linear; backtracking took 13 s or more
    # Every JSON spelling of the value is still found, whatever the nesting.
    for form in (value, json.dumps(value), json.dumps(json.dumps(value))):
        shown = redactor.text(f"<{form}>")
        assert REDACTED in shown and "key" not in shown and "\\" * 9 not in shown, shown
    assert redactor.text("key" + pair * 12) == REDACTED


def test_a_text_without_any_value_is_returned_as_it_is() -> None:
    redactor = Redactor([SECRET, "correct horse/battery staple"])
    text = "a body that mentions neither value " * 30
    assert redactor.text(text) is text
    value = {"a": [text, {"b": "short"}]}
    assert redactor.scrub(value) is value


def test_longest_bounds_what_one_value_can_match() -> None:
    value = 'é"/ \\x-y'
    widest = value
    for _ in range(3):  # inside three nested JSON strings
        widest = json.dumps(widest)[1:-1]
    redactor = Redactor([value])
    assert redactor.text(f"<{widest}>") == f"<{REDACTED}>"
    assert len(widest) <= redactor.longest


def test_scrub_reaches_keys_values_and_items_at_any_depth() -> None:
    deep: object = SECRET
    for _ in range(3_000):  # deeper than Python's recursion limit
        deep = [deep]
    value = {"headers": {"x-echo": f"Bearer {SECRET}"}, SECRET: [1, None, True, deep]}
    scrubbed = Redactor([SECRET]).scrub(value)
    assert scrubbed["headers"] == {"x-echo": f"Bearer {REDACTED}"}
    assert scrubbed[REDACTED][:3] == [1, None, True]
    bottom = scrubbed[REDACTED][3]
    for _ in range(3_000):
        (bottom,) = bottom
    assert bottom == REDACTED
    assert value["headers"]["x-echo"] == f"Bearer {SECRET}"  # the argument is not changed


def test_two_keys_that_redact_alike_keep_both_values() -> None:
    value = {f"a-{SECRET}": 1, f"a-{SECRET}{SECRET}": 2, f"a-{REDACTED} #2": 3}
    scrubbed = Redactor([SECRET]).scrub(value)
    assert sorted(scrubbed.values()) == [1, 2, 3]
    assert f"a-{REDACTED}" in scrubbed and not any(SECRET in key for key in scrubbed)


def test_an_empty_redactor_changes_nothing_and_is_false() -> None:
    value = {"a": ["b"]}
    assert not Redactor()
    assert Redactor().scrub(value) is value


def test_the_longest_form_wins_over_one_it_contains() -> None:
    redactor = Redactor(["abcdefgh", "abcdefgh-and-more"])
    assert redactor.text("x abcdefgh-and-more y") == f"x {REDACTED} y"


def test_very_short_values_are_not_redacted() -> None:
    assert Redactor(["ab"]).text("abcabc") == "abcabc"


def test_a_basic_credential_is_what_a_client_sends_for_a_url_password() -> None:
    """The tests' oracle (tests/basic_auth.py) agrees with what aiohttp sends."""
    token = basic_credential("user", SECRET)
    assert base64.b64decode(token).decode("latin-1") == f"user:{SECRET}"
    assert aiohttp.encode_basic_auth("user", SECRET, encoding="latin-1") == f"Basic {token}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://user:pa55word@api.example.com:8443/v1/x?key=1#frag",
            "https://api.example.com:8443/v1/x",
        ),
        ("http://user@h/p", "http://h/p"),
        ("http://h/p?token=abc", "http://h/p"),
        ("http://a:b@c@h/p", "http://h/p"),
        ("http://h/p@q", "http://h/p@q"),
        ("http://[::1/x?y", "http://…"),
    ],
)
def test_a_logged_url_loses_its_credentials_and_query(url: str, shown: str) -> None:
    assert url_for_log(url) == shown


def _answer(body: str) -> Answer:
    return Answer(400, "Bad Request", {}, body.encode(), "utf-8")


def test_an_excerpt_is_redacted_before_it_is_cut() -> None:
    # The value straddles the excerpt's end: cutting first would leave its first half.
    body = "x" * (EXCERPT_CHARS - 5) + SECRET + "tail"
    shown = excerpt(_answer(body), Redactor([SECRET]))
    assert shown == "x" * (EXCERPT_CHARS - 5) + REDACTED + "tail"[: 5 - len(REDACTED)]
    assert SECRET[:5] not in shown
    assert excerpt(_answer(body)) == body[:EXCERPT_CHARS]
