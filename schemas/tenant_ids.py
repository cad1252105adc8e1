"""What a tenant id may be: the one rule every place that takes one shares (a submission's
`tenantId`, an API key's tenant, a secret's tenant, an operator's tenant settings), so an id
one of them refuses can be named by none: no tenant that settings could never reach, and no
settings for a tenant no run could have.

The rule tightened once (spaces and control characters inside an id were allowed before; only
spaces at either end were refused). Ids stored under the older rule stay usable: a place that
only names a tenant (reading its settings, its secrets, a filter) takes any id the older rule
took (`is_tenant_ref`), and a place that can bring a tenant into being (a key, a run, a limit)
takes such an id only for a tenant that exists already (`engine.operations.tenant_checks`).
Refusals say the current rule either way: it is the one a new id must meet."""

from __future__ import annotations

from schemas.errors import InvalidRequest

MAX_TENANT_CHARS = 200
"""The longest tenant id the store holds (its tenant columns are 200 characters)."""
TENANT_ID_RULE = f"1 to {MAX_TENANT_CHARS} characters, without spaces or control characters"
"""The rule in words, for refusals ("a tenant id is …")."""
SHOWN_CHARS = 60
"""The most of a refused id a message quotes."""


def is_tenant_id(value: object) -> bool:
    """Whether `value` may be a new tenant's id (see `TENANT_ID_RULE`). A tenant id is a name
    shown in tables and typed on command lines: a space or a newline inside it breaks both
    (`isprintable` is false for every whitespace but the space, and for control characters)."""
    return (
        isinstance(value, str) and is_tenant_ref(value) and value.isprintable() and " " not in value
    )


def is_tenant_ref(value: object) -> bool:
    """Whether `value` may name an existing tenant: a tenant id, or an id the older rule took
    (1 to 200 characters, no whitespace at either end) and the store may hold."""
    return isinstance(value, str) and 0 < len(value) <= MAX_TENANT_CHARS and value == value.strip()


def tenant_id_refusal(value: object) -> InvalidRequest:
    """`InvalidRequest(code="invalid_tenant")` saying what a tenant id is, with
    `details.allowed` (the rule in words)."""
    given = value if isinstance(value, str) else repr(value)  # a caller in Python may err
    shown = repr(given if len(given) <= SHOWN_CHARS else given[:SHOWN_CHARS] + "…")
    return InvalidRequest(
        f"{shown} is not a tenant id: a tenant id is {TENANT_ID_RULE}",
        code="invalid_tenant",
        details={"allowed": TENANT_ID_RULE},
    )


def check_tenant_id(value: str) -> str:
    """`value` when it may be a new tenant's id; else `tenant_id_refusal(value)`."""
    if is_tenant_id(value):
        return value
    raise tenant_id_refusal(value)


def check_tenant_ref(value: str) -> str:
    """`value` when it may name an existing tenant (`is_tenant_ref`); else
    `tenant_id_refusal(value)`."""
    if is_tenant_ref(value):
        return value
    raise tenant_id_refusal(value)
