"""What a tenant id may be: the one rule every place that takes one shares (a submission's
`tenantId`, an API key's tenant, a secret's tenant, an operator's tenant settings), so an id
one of them refuses can be named by none: no tenant that settings could never reach, and no
settings for a tenant no run could have."""

from __future__ import annotations

from schemas.errors import InvalidRequest

MAX_TENANT_CHARS = 200
"""The longest tenant id the store holds (its tenant columns are 200 characters)."""
TENANT_ID_RULE = f"1 to {MAX_TENANT_CHARS} characters, without spaces at either end or any '/'"
"""The rule in words, for refusals ("a tenant id is …"). No '/': a tenant's settings are
addressed by a path (`/tenants/{id}/limits`), where a '/' ends the id whatever its encoding,
and a secret by `<tenant>/<NAME>` (a new user's tour made tenant 'team/a', whose runs went
through and whose quota no command could then set)."""
_SPACE = r"\t-\r\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""Every character `str.strip` removes, spelt out: `\\s` means fewer of them in JSON
Schema's and pydantic's regular expressions than in Python's."""
TENANT_ID_PATTERN = rf"^[^{_SPACE}/]([^/]*[^{_SPACE}/])?$"
"""The rule's ends as a regular expression, for the API's schema (its length is said apart):
a client that generates ids from the schema then makes only ids the rule takes."""
SYSTEM_TENANT = "system"
"""The tenant of the engine's own runs (a deployment's `gradual_deploy` run): reserved, so no
API key acts for it and no submission creates a run in it. A key for it would list every
deployment's run, read its input and cancel it, which aborts the deployment: an admin's
action, done with a tenant key."""

SHOWN_CHARS = 60
"""The most of a refused id a message quotes."""


def is_tenant_id(value: object) -> bool:
    """Whether `value` is a tenant id (see `TENANT_ID_RULE`)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_TENANT_CHARS
        and value == value.strip()
        and "/" not in value
    )


def reserved_words(tenant_id: str) -> str | None:
    """Why `tenant_id` cannot be acted for (a key's tenant, a submission's), None when it
    can: only `SYSTEM_TENANT` is reserved."""
    if tenant_id != SYSTEM_TENANT:
        return None
    return (
        f"{SYSTEM_TENANT!r} is the tenant of the engine's own runs (deployments' "
        "gradual_deploy runs), reserved: choose another tenant id"
    )


def check_tenant_id(value: str) -> str:
    """`value` when it is a tenant id; else `InvalidRequest(code="invalid_tenant")` saying what
    one is, with `details.allowed` (the rule in words)."""
    if is_tenant_id(value):
        return value
    given = value if isinstance(value, str) else repr(value)  # a caller in Python may err
    shown = repr(given if len(given) <= SHOWN_CHARS else given[:SHOWN_CHARS] + "…")
    raise InvalidRequest(
        f"{shown} is not a tenant id: a tenant id is {TENANT_ID_RULE}",
        code="invalid_tenant",
        details={"allowed": TENANT_ID_RULE},
    )
