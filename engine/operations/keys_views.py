"""What the API-key operations return (camelCase on the wire, like every view)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engine.operations.views import View

KeyRole = Literal["admin", "tenant"]
KeyState = Literal["live", "expired", "revoked"]


class ApiKeyView(View):
    """An API key as operators see it: never its secret."""

    id: str
    """Public id: what `keys revoke` takes and access logs name."""
    name: str | None
    role: KeyRole
    """`admin`: every tenant and the admin routes; `tenant`: one tenant's runs only."""
    tenant: str | None = Field(alias="tenantId")
    """The tenant of a tenant key; None for an admin key (`tenantId` on the wire, as every
    tenant is)."""
    created_at: float
    """Epoch seconds."""
    expires_at: float | None
    """Epoch seconds; None: never expires."""
    revoked_at: float | None
    """Epoch seconds of the revocation; None while the key is live."""
    state: KeyState
    """`live` (it authenticates), `expired` or `revoked` (it does not), as of the answer."""


class CreatedApiKey(ApiKeyView):
    """A key just created, with its secret."""

    key: str
    """The secret (`sbk_…`). Shown in this answer only: it is stored hashed and cannot be
    shown again."""


class RevokedApiKey(ApiKeyView):
    """A key after a revocation: `changed` False when it was revoked already (nothing was
    done; `revokedAt` is its first revocation)."""

    changed: bool
    revoked_by: str | None
    """Who revoked it (`key:<id>`, `cli`), as the audit says; None when unknown."""
    message: str
    """What happened, in words."""


class ApiKeyList(View):
    """Every key, oldest first, revoked and expired ones included."""

    items: list[ApiKeyView]
