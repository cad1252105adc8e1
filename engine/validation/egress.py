"""Publication's part of the egress policy: a GATEWAY `url` whose scheme and host are written
literally is checked against the policy, whatever its port, path or query hold, so
`http://169.254.169.254/…`, `http://0x7f.1/` or `http://127.0.0.1:{{ input.port }}/` is
refused with a pointer before it is stored (docs/security.md, 'Egress policy').

Only IP literals (every spelling) and `localhost` names can be judged here: a host name's
addresses are only known when the call is made, and a URL built by an expression only then.
Both are checked again at call time on the address actually connected to, so this phase is an
early, clearer refusal, not the enforcement.
"""

from __future__ import annotations

from typing import Any

import yarl

from engine.validation.common import Code
from engine.validation.graph import RawWorkflow
from schemas.errors import Problem
from schemas.url_template import url_layout
from vertices.egress import ALLOWED_SCHEMES, EgressDenied, EgressPolicy


def literal_origin(url: str) -> str | None:
    """`scheme://host/` of `url` when neither the scheme nor the host holds a `{{ }}`
    expression (`http://10.0.0.1:80/a/{{ input.id }}` → `http://10.0.0.1/`, and so do
    `http://u:{{ secrets.P }}@10.0.0.1:80/` and `http://10.0.0.1:{{ input.port }}/`); else
    None. The port is left out: the policy judges addresses, and a templated port is known
    only at the call. Read as the gateway reads it (`schemas.url_template`)."""
    origin = url_layout(url).literal_scheme_host
    return None if origin is None else f"{origin}/"


def egress_problems(workflow: RawWorkflow, policy: EgressPolicy) -> list[Problem]:
    """A problem for each GATEWAY whose literal URL the policy refuses."""
    problems: list[Problem] = []
    for vertex in workflow.vertices.values():
        url = vertex.config.get("url") if isinstance(vertex.config, dict) else None
        origin = literal_origin(url) if isinstance(url, str) else None
        if vertex.type != "GATEWAY" or origin is None:
            continue
        problem = _refusal(origin, policy)
        if problem is not None:
            at = workflow.at("vertices", vertex.id, "config", "url")
            problems.append(Problem(at, problem, Code.EGRESS_DENIED))
    return problems


def _refusal(origin: str, policy: EgressPolicy) -> str | None:
    try:
        parsed: Any = yarl.URL(origin)
    except ValueError:
        return None  # not a URL at all: the schema says so
    if parsed.scheme.lower() not in ALLOWED_SCHEMES:
        return None  # the schema's pattern refuses it with its own words
    try:
        policy.check_url(parsed)
    except EgressDenied as denied:
        return (
            f"{denied.message[0].upper()}{denied.message[1:]}. The call would be refused at "
            "run time."
        )
    return None
