"""Where each expression of a GATEWAY url template sits, read from its literal text
(`schemas.url_template`), and the two readers besides the gateway that share the answer:
validation's secrets-in-the-head check and a retry's breaker warnings."""

from __future__ import annotations

import pytest

from engine.operations.breaker_warnings import _known_key
from engine.validation.url_head import head_expressions
from schemas.definitions import GatewayConfig
from schemas.url_template import Place, url_layout

P = Place


@pytest.mark.parametrize(
    ("template", "places"),
    [
        ("{{ next }}", [P.WHOLE]),
        ("{{ base }}/o/{{ id }}?q={{ q }}#{{ f }}", [P.BASE, P.PATH, P.QUERY, P.FRAGMENT]),
        ("{{ base }}{{ id }}", [P.BASE, P.PATH]),
        ("{{ s }}://h.example/x", [P.SCHEME]),
        ("http{{ s }}://h.example/x", [P.SCHEME]),
        ("https://u:{{ pw }}@h.example/x", [P.USERINFO]),
        ("https://{{ u }}:{{ pw }}@{{ h }}:{{ port }}/", [P.USERINFO, P.USERINFO, P.HOST, P.PORT]),
        ("https://api.example.com:{{ port }}/v1", [P.PORT]),
        ("https://api.example.com{{ p }}", [P.HOST_LABEL]),
        ("https://{{ sub }}.example.com?x={{ x }}", [P.HOST_LABEL, P.QUERY]),
        ("http://[::1]:{{ port }}/", [P.PORT]),
        ("http://[{{ ip }}]/", [P.HOST]),  # brackets are no host text of the author's
        # Beside literal host text a value fills one label; alone, it is the whole host.
        ("https://api.example.{{ tld }}/v1", [P.HOST_LABEL]),
        ("https://api-{{ env }}.example.com/", [P.HOST_LABEL]),
        ("https://{{ a }}.{{ b }}/", [P.HOST_LABEL, P.HOST_LABEL]),
        ("https://{{ h }}.:8443/", [P.HOST_LABEL]),
        ("https://{{ h }}:8443/x", [P.HOST]),
        ("https://{{ h }}:{{ port }}", [P.HOST, P.PORT]),
        ("https://{{ a }}{{ b }}/", [P.HOST, P.HOST]),
        ("https://svc@{{ h }}/", [P.HOST]),  # the userinfo's text is not the host's
        ("https://u:{{ pw }}@api.{{ tld }}/", [P.USERINFO, P.HOST_LABEL]),
        ("https://{{ u }}@{{ h }}.example.com/", [P.USERINFO, P.HOST_LABEL]),
        ("https://h.example/a/{{ a }}?b={{ b }}&c=x/y?{{ c }}#g/{{ d }}?",
         [P.PATH, P.QUERY, P.QUERY, P.FRAGMENT]),
        ("https://h.example#{{ f }}", [P.FRAGMENT]),
        ("https://a@b@h.example:{{ port }}", [P.PORT]),  # the last `@` ends the userinfo
    ],
)  # fmt: skip
def test_each_expression_gets_the_place_its_literal_surroundings_give_it(
    template: str, places: list[Place]
) -> None:
    assert list(url_layout(template).places) == places


@pytest.mark.parametrize(
    ("template", "host", "origin"),
    [
        ("https://API.example.com:8443/{{ x }}", "api.example.com", "https://API.example.com:8443"),
        ("https://u:{{ pw }}@h.example/x", "h.example", "https://h.example"),
        ("https://h.example:{{ port }}/x", "h.example", None),
        ("http://[::1]:{{ port }}/", "::1", None),
        ("https://{{ sub }}.example.com/x", None, None),
        ("https://api.example.{{ tld }}:8443/x", None, None),
        ("{{ s }}://h.example/x", "h.example", None),
        ("{{ base }}/x", None, None),
        ("{{ next }}", None, None),
    ],
)
def test_a_literal_host_and_origin_are_known(
    template: str, host: str | None, origin: str | None
) -> None:
    layout = url_layout(template)
    assert (layout.literal_host, layout.literal_origin) == (host, origin)


@pytest.mark.parametrize(
    ("template", "scheme_host"),
    [
        ("https://API.example.com:8443/{{ x }}", "https://API.example.com"),
        ("http://127.0.0.1:{{ port }}/x", "http://127.0.0.1"),
        ("http://127.0.0.1:8{{ port }}/x", "http://127.0.0.1"),
        ("http://[::1]:{{ port }}/?q={{ q }}#{{ f }}", "http://[::1]"),
        ("http://[::1]/{{ a }}", "http://[::1]"),
        ("https://u:{{ pw }}@h.example:{{ port }}/x", "https://h.example"),
        ("http://10.0.0.1/a", "http://10.0.0.1"),
        ("https://{{ sub }}.example.com:{{ port }}/x", None),
        ("http://{{ host }}:8080/x", None),
        ("{{ s }}://h.example/x", None),
        ("{{ base }}/x", None),
        ("{{ next }}", None),
    ],
)
def test_a_literal_scheme_and_host_are_known_whatever_the_port(
    template: str, scheme_host: str | None
) -> None:
    assert url_layout(template).literal_scheme_host == scheme_host


def test_layouts_are_cached() -> None:
    assert url_layout("https://h.example/{{ a }}") is url_layout("https://h.example/{{ a }}")


@pytest.mark.parametrize(
    ("template", "head"),
    [
        ("https://u:{{ secrets.P }}@h.example/x", []),
        ("https://{{ u }}:{{ secrets.P }}@{{ h }}:{{ p }}/x", ["h", "p"]),
        ("https://api.example.com:{{ secrets.P }}/v1", ["secrets.P"]),
        ("https://api.example.com{{ secrets.P }}", ["secrets.P"]),
        ("https://{{ secrets.P }}.example.com/x", ["secrets.P"]),  # a host label is head too
        ("{{ base }}/x/{{ id }}", ["base"]),
        ("{{ next }}", ["next"]),
        ("https://h.example/{{ a }}?b={{ b }}", []),
    ],
)
def test_validation_reads_the_head_as_the_gateway_does(template: str, head: list[str]) -> None:
    assert head_expressions(template) == head


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://svc:{{ secrets.P }}@API.example.com/x", "https://api.example.com:443"),
        # A template that would not parse as a URL (`/` in the braces ends urlsplit's netloc).
        ("https://svc:{{ join('/', ['a']) }}@h.example:81/x", "https://h.example:81"),
        ("https://h.example/{{ id }}", "https://h.example:443"),
        ("https://h.example:{{ port }}/x", None),
        ("https://{{ h }}/x", None),
        ("https://{{ region }}.h.example/x", None),
        ("{{ base }}/x", None),
        ("https://h.example/x", "https://h.example:443"),
    ],
)
def test_a_retry_knows_the_destination_when_scheme_host_and_port_are_literal(
    url: str, key: str | None
) -> None:
    assert _known_key(GatewayConfig(url=url)) == key
