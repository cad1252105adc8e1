"""Secrets: set, list, delete and re-encrypt the values workflows reference as
`{{ secrets.NAME }}` (docs/architecture.md, 'Secrets').

A secret belongs to one tenant: only that tenant's runs read it, when a GATEWAY step that
references it runs (`engine.execution.step_secrets`). Values are encrypted here, before they
reach the store, with the first key of `SCHEMABRIDGE_SECRET_KEYS`; nothing returns a value,
and no refusal quotes one. Setting and rotating need a usable key (`SecretKeyError`,
`secret_key_missing` or `secret_key_invalid`, one line that says how to make one); listing and
deleting do not, so a secret whose key was lost can still be seen and removed with no key
configured. A malformed key is refused by every operation all the same (`secret_key_invalid`):
it is a mistake in this process's settings that the workers given it would fail on (and that
`api`, `serve` and `worker` refuse to start with), not a key that was lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.operations.boundary import store_boundary
from engine.operations.secrets_views import (
    RotationResult,
    SecretList,
    SecretRef,
    SecretView,
    StoredSecret,
)
from engine.secret_cipher import SecretCipher, SecretUnreadable, stored_key_id
from engine.store.secrets_store import SecretRecord, SecretStore
from schemas.counts import plural
from schemas.errors import InvalidRequest, NotFound, Problem
from schemas.secret_names import SECRET_NAME, SECRET_NAME_RULE
from schemas.tenant_ids import SYSTEM_TENANT, TENANT_ID_RULE, is_tenant_id

if TYPE_CHECKING:
    from engine.runtime import Runtime
    from engine.settings import Settings

MIN_VALUE_CHARS = 8
"""Shorter values are refused: the redactor could not tell them from ordinary text."""
SHORT_VALUE_REASON = (
    f"a secret's value must be at least {MIN_VALUE_CHARS} characters (shorter values cannot be "
    "told apart from ordinary text, so they could not be redacted)"
)
"""The refusal of a short value, with its reason (the REST model and the operations say it)."""
MAX_VALUE_CHARS = 16 * 1024
"""Longest value: a token or a certificate, not a document (at most 64 KiB of UTF-8)."""


def malformed_keys(settings: Settings) -> str | None:
    """Why `SCHEMABRIDGE_SECRET_KEYS` is set but unusable (one line with the fix), else None.
    Services refuse to start on it; no key at all is not a problem until a secret is used."""
    if settings.secret_keys is None:
        return None
    cipher = SecretCipher.from_setting(settings.secret_keys.get_secret_value())
    return cipher.problem if cipher.problem_code == "secret_key_invalid" else None


async def keys_missing(store: SecretStore, cipher: SecretCipher, process: str) -> str | None:
    """Why `process` (a worker about to start) would fail the steps that use stored secrets
    (one line with the fix), else None: secrets encrypted with a key its
    `SCHEMABRIDGE_SECRET_KEYS` does not hold (the api's or the CLI's list differs from its
    own), or no key at all while secrets exist. Tokens stored before key ids were are not
    judged (their key cannot be named)."""
    counts = await store.secret_key_ids()
    missing = {key: n for key, n in counts.items() if key is not None and key not in cipher.key_ids}
    if not missing:
        return None
    total = sum(missing.values())
    keys = f"{'key' if len(missing) == 1 else 'keys'} {', '.join(sorted(missing))}"
    held = ", ".join(cipher.key_ids) or "none"
    return (
        f"{process}: {plural(total, 'secret')} in the database {'is' if total == 1 else 'are'} "
        f"encrypted with {keys}, which this process's SCHEMABRIDGE_SECRET_KEYS does not hold "
        "(it holds "
        f"{held}): every step here that uses {'it' if total == 1 else 'them'} will fail "
        "secret_unreadable; give it the keys of the api and CLI that set secrets (newest "
        "first) and restart it"
    )


def _refuse(pointer: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        message, code="invalid_secret", problems=[Problem(pointer, message, code="invalid_secret")]
    )


def check_name(name: str) -> None:
    """Refuse a name that no `{{ secrets.NAME }}` could reference."""
    if not SECRET_NAME.fullmatch(name):
        raise _refuse("/name", f"{name[:130]!r} is not a secret name: {SECRET_NAME_RULE}")


def check_tenant(tenant: str) -> None:
    if not is_tenant_id(tenant):
        raise _refuse(
            "/tenantId",
            f"a tenant id is {TENANT_ID_RULE}",
        )


def _check_value(value: str) -> None:
    # Never quote the value in a refusal: it is a secret even when it is refused.
    if len(value) < MIN_VALUE_CHARS:
        raise _refuse("/value", SHORT_VALUE_REASON)
    if len(value) > MAX_VALUE_CHARS:
        raise _refuse("/value", f"a secret's value must be at most {MAX_VALUE_CHARS} characters")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise _refuse("/value", "a secret's value must be Unicode text (it has a lone surrogate)")
    if "\x00" in value:
        # No header can carry it and a call would fail only at run time: refuse it here.
        raise _refuse("/value", "a secret's value must not contain the NUL character (U+0000)")


def _view(record: SecretRecord) -> SecretView:
    return SecretView(
        name=record.name,
        tenant=record.tenant_id,
        created_at=record.created_at,
        updated_at=record.updated_at,
        updated_by=record.updated_by,
    )


class SecretOperations:
    """Secrets, per tenant: set, list, delete, rotate."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @store_boundary
    async def set(self, tenant: str, name: str, value: str, *, actor: str) -> StoredSecret:
        """Encrypt `value` and store it as `tenant`'s secret `name` (replacing its value if it
        has one); `actor` is who did it (`key:<id>`, `cli`). Refuses with `invalid_secret`
        (name, tenant or value) or `SecretKeyError` (no usable key)."""
        check_tenant(tenant)
        if tenant == SYSTEM_TENANT:
            # The engine's own runs (deployments') call nothing: a secret of theirs is never
            # used, and one set here was meant for a tenant whose runs reference it.
            raise _refuse(
                "/tenantId",
                f"{SYSTEM_TENANT!r} is the tenant of the engine's own runs, reserved: they make "
                "no calls, so no secret of it is ever used; set it for the tenant whose runs "
                "reference it",
            )
        check_name(name)
        _check_value(value)
        ciphertext = self._runtime.secret_cipher.encrypt(value)
        record, created = await self._runtime.store.put_secret(
            tenant, name, ciphertext, actor=actor
        )
        return StoredSecret(**_view(record).model_dump(), created=created)

    @store_boundary
    async def list(self, tenant: str | None = None) -> SecretList:
        """Every secret (of `tenant` when given): names and metadata, never a value. Needs
        no key, but refuses a malformed one (`SecretKeyError`, `secret_key_invalid`)."""
        self._runtime.secret_cipher.check_setting()
        if tenant is not None:
            check_tenant(tenant)
        records = await self._runtime.store.list_secrets(tenant)
        return SecretList(items=[_view(record) for record in records])

    @store_boundary
    async def delete(self, tenant: str, name: str, *, actor: str | None = None) -> SecretRef:
        """Delete `tenant`'s secret `name`; runs that reference it fail with
        `secret_not_found` from then on. The audit keeps that `actor` did it (`secret.deleted`).
        Unknown → `NotFound(code="secret_not_found")`. Needs no key, but refuses a malformed
        one (`SecretKeyError`, `secret_key_invalid`)."""
        self._runtime.secret_cipher.check_setting()
        check_tenant(tenant)
        check_name(name)
        if not await self._runtime.store.delete_secret(tenant, name, actor=actor):
            raise NotFound(f"tenant {tenant!r} has no secret {name!r}", code="secret_not_found")
        return SecretRef(tenant=tenant, name=name)

    @store_boundary
    async def rotate(self, *, actor: str | None = None) -> RotationResult:
        """Re-encrypt every secret under the first configured key (after a new key was put
        first in `SCHEMABRIDGE_SECRET_KEYS`); secrets no key decrypts are left and listed.
        The audit keeps that `actor` re-encrypted each one (`secret.rotated`)."""
        cipher = self._runtime.secret_cipher
        cipher.check()

        missing: set[str] = set()

        def rotate(token: str) -> str | None:
            try:
                return cipher.rotate(token)
            except SecretUnreadable:
                # The key it needs, when the token names one this process does not hold (a
                # token under a held key that does not decrypt was altered: no key helps).
                needed = stored_key_id(token)
                if needed is not None and needed not in cipher.key_ids:
                    missing.add(needed)
                return None

        rotated, unreadable = await self._runtime.store.rotate_secrets(
            rotate, actor=actor, key_id=cipher.key_ids[0]
        )
        refs = [SecretRef(tenant=tenant, name=name) for tenant, name in unreadable]
        return RotationResult(
            rotated=rotated,
            key_id=cipher.key_ids[0],
            unreadable=refs,
            missing_key_ids=sorted(missing),
        )
