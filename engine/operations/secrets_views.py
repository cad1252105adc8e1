"""What the secret operations return: names and metadata, never a value."""

from __future__ import annotations

from pydantic import Field

from engine.operations.views import View


class SecretView(View):
    """A stored secret as operators see it. Its value is never part of any answer."""

    name: str
    """What workflows write as `{{ secrets.NAME }}`."""
    tenant: str = Field(alias="tenantId")
    """The tenant whose runs can use it (`tenantId` on the wire, as every tenant is)."""
    created_at: float
    """Epoch seconds."""
    updated_at: float
    """Epoch seconds of the last time its value was set."""
    updated_by: str
    """Who last set it: `key:<id>` for a REST API key, `cli`."""


class StoredSecret(SecretView):
    """A secret just set."""

    created: bool
    """True when it did not exist before; False when its value was replaced."""


class SecretList(View):
    """Secrets by tenant, then name."""

    items: list[SecretView]


class SecretRef(View):
    """Which secret: its tenant and name."""

    tenant: str = Field(alias="tenantId")
    name: str


class RotationResult(View):
    """What `rotate` did."""

    rotated: int
    """Secrets now encrypted under the first key."""
    key_id: str
    """The id of that key (`engine.secret_cipher.key_id`): what a `secret_unreadable` names."""
    unreadable: list[SecretRef]
    """Secrets no configured key decrypts, left as they were."""
    missing_key_ids: list[str] = []
    """The ids of the keys those secrets were encrypted with that the setting does not hold
    (what to add to it); none for a secret stored before key ids were, or altered."""
