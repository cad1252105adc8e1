"""Which `{{ }}` expressions of a GATEWAY `url` template make its scheme, host or port.

Those parts become the call's admission key when no `destination` is set (`scheme://host:port`,
vertices/gateway_request.py `destination_key`), and the key is shown in metrics, in the
destinations API and in Redis keys, so no secret may be there: the run refuses such a call
with `invalid_config`. This reads the template, not a rendered URL: an expression sits in the
head (scheme and authority) when no literal `/`, `?` or `#` comes before it other than the
`//` of `://`. The userinfo (`user:password@`) is not part of the key: an expression followed
by a literal `@` before the head ends is in it, and may be a secret.
"""

from __future__ import annotations

from schemas.expressions import expression_spans


def head_expressions(url: str) -> list[str]:
    """The stripped source of each expression in the scheme, host or port of `url`."""
    head: list[str] = []  # cleared by a literal `@` in the authority: they were userinfo
    authority = False
    position = 0
    for start, end, source in expression_spans(url):
        ended, authority = _scan(url[position:start], authority, head)
        if ended:
            return head
        head.append(source)
        position = end
    _scan(url[position:], authority, head)
    return head


def _scan(literal: str, authority: bool, head: list[str]) -> tuple[bool, bool]:
    """Read a literal stretch of the head: (whether the head ends in it, whether the
    authority has begun). A literal `@` in the authority makes `head` so far userinfo."""
    index = 0
    while index < len(literal):
        if not authority and literal.startswith("://", index):
            authority = True
            index += 3
            continue
        char = literal[index]
        if char in "/?#":
            return True, authority
        if char == "@" and authority:
            head.clear()
        index += 1
    return False, authority
