"""Secrets at call time: the values a GATEWAY step references, read and decrypted inside the
worker just before the call (docs/architecture.md, 'Secrets').

Only the names the vertex's `url`, `headers`, `query` and `body` reference are read, from its
run's tenant; they go into the step's expression context (`secrets`) and into its `Redactor`,
so everything the step records shows `***` instead. A missing secret fails the step with
`secret_not_found` and a worker that cannot decrypt one (no key, an invalid key, a key that is
not the one it was encrypted with) with `secret_unreadable`; both are terminal: an operator
sets the secret or gives the worker the key (the message names its id), then retries the run.
The message does not name the worker (a tenant reads it, and service ids are the operators'):
the "step failed" log line's `worker` does, which only admin keys are shown.
A missing secret is told first, also on a worker without a usable key (adding that it has
none): setting it is the fix that comes first, and a key alone would only lead to it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from engine.secret_cipher import SecretCipher, SecretUnreadable
from schemas.errors import FailureKind, StepFailure


class SecretTokens(Protocol):
    """The part of the store this needs (`engine.store.secrets_store.SecretStore`)."""

    async def read_secret_tokens(
        self, tenant_id: str, names: Collection[str]
    ) -> dict[str, str]: ...


def _listed(names: Collection[str]) -> str:
    return ", ".join(sorted(names))


async def resolve(
    tokens: SecretTokens,
    cipher: SecretCipher,
    tenant_id: str,
    names: Collection[str],
) -> dict[str, str]:
    """The values of the tenant's secrets `names`; raises StepFailure (`secret_not_found`,
    `secret_unreadable`) with a message that names the secret and the tenant. A missing
    secret is told before a worker's missing or invalid key (and names that too)."""
    this = "the worker that ran the step"
    stored = await tokens.read_secret_tokens(tenant_id, names)
    missing = sorted(set(names) - set(stored))
    if missing:
        name = missing[0]
        also = (
            ""
            if cipher.problem is None
            else f"; {this} cannot decrypt secrets either: {cipher.problem}"
        )
        raise StepFailure(
            FailureKind.SECRET_NOT_FOUND,
            f"tenant {tenant_id!r} has no secret {name!r}: set it with `schemabridge secrets "
            f"set {name} --tenant {tenant_id}` (or PUT /secrets/{name}), then retry the run" + also,
        )
    if cipher.problem is not None:
        raise StepFailure(
            FailureKind.SECRET_UNREADABLE,
            f"the step uses the secrets {_listed(names)} of tenant {tenant_id!r}, but {this} "
            f"cannot decrypt secrets: {cipher.problem}",
        )
    values: dict[str, str] = {}
    for name, token in stored.items():
        try:
            values[name] = cipher.decrypt(token)
        except SecretUnreadable as unreadable:
            raise StepFailure(
                FailureKind.SECRET_UNREADABLE,
                f"the secret {name!r} of tenant {tenant_id!r} cannot be decrypted by {this}: "
                f"{unreadable.message}",
            ) from None
    return values
