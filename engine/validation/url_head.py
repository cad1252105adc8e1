"""Which `{{ }}` expressions of a GATEWAY `url` template make its scheme, host or port.

Those parts become the call's admission key when no `destination` is set (`scheme://host:port`,
vertices/gateway_request.py `destination_key`), and the key is shown in metrics, in the
destinations API and in Redis keys, so no secret may be there: the run refuses such a call
with `invalid_config`. This reads the template, not a rendered URL, with the same reading the
gateway renders by (`schemas.url_template`). The userinfo (`user:password@`) is not part of
the key: an expression followed by a literal `@` before the authority ends is in it, and may
be a secret (its value is percent-encoded when sent).
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.validation.common import Code
from engine.validation.graph import RawVertex, RawWorkflow
from schemas.errors import Problem
from schemas.expressions import (
    SECRETS_ROOT,
    ExpressionError,
    expression_spans,
    parse_template,
    secret_name,
)
from schemas.url_template import HEAD, url_layout


def url_head_problems(wf: RawWorkflow, vertex: RawVertex) -> Iterator[Problem]:
    """Secrets in the scheme, host or port of a GATEWAY's url while they make its admission
    key (no destination written out): the run would refuse the call (`build_request`)."""
    url, destination = vertex.config.get("url"), vertex.config.get("destination")
    if not isinstance(url, str):
        return
    if isinstance(destination, str) and destination.strip() and "{{" not in destination:
        return  # the key is the destination, whatever the host
    for source in head_expressions(url):
        if not source.startswith(SECRETS_ROOT):
            continue  # not `secrets.NAME` (and not compiled again: it may hold a legacy literal)
        try:
            [part] = parse_template("{{ " + source + " }}").parts
        except ExpressionError:
            continue  # reported as a syntax problem
        # Other reads of secrets are refused by the expression phase already.
        if not isinstance(part, str) and secret_name(part) is not None:
            yield Problem(
                wf.at("vertices", vertex.id, "config", "url"),
                f"The expression {{{{ {source} }}}} puts a secret in the url's scheme, host or "
                "port, which make the call's admission key unless a destination is written "
                "out, and the key is shown in metrics, the destinations API and Redis keys; "
                "read secrets in the url's path, query or user:password@, the headers or the "
                "body.",
                Code.SECRET_NOT_ALLOWED,
            )


def head_expressions(url: str) -> list[str]:
    """The stripped source of each expression in the scheme, host or port of `url`, a whole
    URL or a base URL included (`schemas.url_template`, which the gateway renders by)."""
    spans = zip(expression_spans(url), url_layout(url).places, strict=True)
    return [source for (_, _, source), place in spans if place in HEAD]
