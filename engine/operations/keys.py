"""API keys: create (the secret shown once), list, revoke, and authenticate a request's key.

A key is `sbk_` followed by `secrets.token_urlsafe(32)` (256 random bits). It is bound either to
one tenant (that tenant's runs only) or to the admin role (every tenant, and the admin routes),
may expire, and can be revoked. The store keeps the SHA-256 of the whole secret, never the
secret: see `hash_secret` for why a fast hash is the right one here.

`authenticate` keeps the keys it found in memory (`RowCache`) under the change token of API
keys in Redis, which needs a Redis server shared by every process (with the embedded one it
reads the store on every call). `revoke` replaces the token before it returns (or, when Redis
does not take it, waits until every copy is too old to use), so a revoked key is refused by
every API process from the next request on; a key past its expiry is refused by the clock on
every call. A copy is at most `KEY_CACHE_MAX_AGE_S` old. Without the cache, the key's lookup
was a fifth of an API process's CPU per submission.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
from typing import TYPE_CHECKING

from engine.operations.boundary import store_boundary
from engine.operations.keys_views import (
    ApiKeyList,
    ApiKeyView,
    CreatedApiKey,
    KeyState,
    RevokedApiKey,
)
from engine.operations.row_cache import RowCache, shared_row_cache
from engine.store.keys import ApiKeyRecord, KeyRevocation
from engine.store.unreachable import store_unreachable
from schemas.clock import utc_moment
from schemas.close_names import close_names, did_you_mean
from schemas.errors import InvalidRequest, NotFound, Problem
from schemas.tenant_ids import SYSTEM_TENANT, TENANT_ID_RULE, is_tenant_id, reserved_words

if TYPE_CHECKING:
    from engine.runtime import Runtime

logger = logging.getLogger(__name__)

KEY_PREFIX = "sbk_"
"""Every secret starts with it, so a leaked key is recognisable (secret scanners, logs)."""
SECRET_BYTES = 32
"""Random bytes of a secret (256 bits)."""
MAX_SECRET_CHARS = 256
"""A presented key longer than this is refused without hashing it."""
MAX_NAME_CHARS = 200
MAX_EXPIRY_DAYS = 36_500.0
SECONDS_PER_DAY = 86_400.0
KEYS_TOPIC = "api-keys"
"""The change token `revoke` replaces (`engine.coordination.invalidations`)."""
KEY_CACHE_MAX_AGE_S = 5.0
"""A kept key is read again after this long: a revocation whose token Redis did not take (Redis
down at that moment) holds everywhere within it."""
KEY_CACHE_MAX_ROWS = 10_000


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of a key's secret.

    A slow password hash (bcrypt, scrypt, argon2) exists to make guessing low-entropy
    passwords expensive; a 256-bit random secret cannot be guessed however fast the hash is,
    so it would only add its ~100 ms to every request. SHA-256 is preimage-resistant, so the
    stored hashes do not reveal the secrets, and looking a key up by its hash needs no
    comparison of secrets in Python (no timing side channel).
    """
    return hashlib.sha256(secret.encode()).hexdigest()


def _state(record: ApiKeyRecord, now: float) -> KeyState:
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "live"


def _view(record: ApiKeyRecord, now: float) -> ApiKeyView:
    return ApiKeyView(
        id=record.id,
        name=record.name,
        role="admin" if record.tenant_id is None else "tenant",
        tenant=record.tenant_id,
        created_at=record.created_at,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
        state=_state(record, now),
    )


def _refuse(pointer: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        message, code="invalid_key", problems=[Problem(pointer, message, code="invalid_key")]
    )


def _check_role(tenant: str | None, admin: bool) -> None:
    if admin and tenant is not None:
        raise _refuse("/tenantId", "a key is bound to one tenant or to the admin role, not both")
    if not admin and tenant is None:
        raise _refuse("/tenantId", "give the tenant the key acts for, or make it an admin key")
    if tenant is not None and not is_tenant_id(tenant):
        raise _refuse(
            "/tenantId",
            f"a tenant id is {TENANT_ID_RULE}",
        )
    reserved = None if tenant is None else reserved_words(tenant)
    if reserved is not None:
        raise _refuse("/tenantId", reserved)


def _check_details(name: str | None, expires_in_days: float | None) -> None:
    if name is not None and not 0 < len(name) <= MAX_NAME_CHARS:
        raise _refuse("/name", f"a key's name must be 1 to {MAX_NAME_CHARS} characters")
    if expires_in_days is not None and not (
        math.isfinite(expires_in_days) and 0 < expires_in_days <= MAX_EXPIRY_DAYS
    ):
        raise _refuse(
            "/expiresInDays",
            f"a key expires after more than 0 and at most {MAX_EXPIRY_DAYS:.0f} days (or never, "
            "when none is given)",
        )


def _revocation_message(revocation: KeyRevocation) -> str:
    """'key … revoked', or 'key … was already revoked at … by …' (the time in UTC)."""
    record = revocation.record
    if revocation.changed:
        return f"key {record.id} revoked"
    when = utc_moment(record.revoked_at) if record.revoked_at is not None else "an unknown time"
    by = f" by {revocation.revoked_by}" if revocation.revoked_by else ""
    return f"key {record.id} was already revoked at {when}{by}: nothing to do"


class KeyOperations:
    """API keys: create, list, revoke, authenticate."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        # Through a database outage a key kept here still authenticates: /metrics, whose
        # `schemabridge_dependency_up{dependency="database"} 0` says the outage, and
        # /services need no database but the key's row, and answered 503 to every scraper
        # 5 s into it (every process then read as down, the outage never as such).
        self._cache: RowCache[ApiKeyRecord] = shared_row_cache(
            runtime,
            KEYS_TOPIC,
            max_age_s=KEY_CACHE_MAX_AGE_S,
            max_rows=KEY_CACHE_MAX_ROWS,
            outage=store_unreachable,
        )

    @store_boundary
    async def create(
        self,
        *,
        tenant: str | None = None,
        admin: bool = False,
        name: str | None = None,
        expires_in_days: float | None = None,
        actor: str | None = None,
    ) -> CreatedApiKey:
        """A new key for `tenant`, or an admin key (`admin=True`; exactly one of the two).

        `expires_in_days` (more than 0, at most 36,500) sets an expiry; None (the default):
        the key never expires. The answer carries the secret, which nothing can show again.
        `actor` (who creates it: `key:<id>`, `cli`) is recorded in the audit (`key.created`).
        Refuses with `InvalidRequest(code="invalid_key")`."""
        _check_role(tenant, admin)
        _check_details(name, expires_in_days)
        now = self._runtime.clock.now()
        secret = KEY_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
        record = ApiKeyRecord(
            id=secrets.token_hex(6),
            token_hash=hash_secret(secret),
            name=name,
            tenant_id=None if admin else tenant,
            created_at=now,
            expires_at=None if expires_in_days is None else now + expires_in_days * SECONDS_PER_DAY,
            revoked_at=None,
        )
        await self._runtime.store.create_api_key(record, actor=actor)
        return CreatedApiKey(key=secret, **_view(record, now).model_dump())

    @store_boundary
    async def list(self) -> ApiKeyList:
        """Every key, oldest first, revoked and expired ones included (never a secret)."""
        records = await self._runtime.store.list_api_keys()
        now = self._runtime.clock.now()
        return ApiKeyList(items=[_view(record, now) for record in records])

    async def _unknown_key(self, key_id: str) -> NotFound:
        """The refusal of an id no key has, naming the keys it may have been meant for: the
        one whose id it starts (a short id copied from elsewhere) or those close to it (a
        typo), and the route (and command) that lists them: a REST client has no CLI."""
        ids = [record.id for record in await self._runtime.store.list_api_keys()]
        given = key_id.strip().lower()
        started = [known for known in ids if given and known.startswith(given)]
        meant = started if len(started) == 1 else close_names(given, ids)
        hint = did_you_mean(meant) or "GET /keys (`schemabridge keys list`) shows the keys' ids"
        return NotFound(
            f"no API key with id {key_id!r}; {hint}",
            code="key_not_found",
            details={"meant": meant},
        )

    @store_boundary
    async def revoke(self, key_id: str, *, actor: str | None = None) -> RevokedApiKey:
        """Revoke a key now; it stops working at once everywhere. The audit records that
        `actor` did it and when (`key.revoked`). Revoking a revoked key changes nothing
        (`changed` False: its first revocation time and actor stay, no second event is
        written). Unknown id → `NotFound(code="key_not_found")`."""
        revocation = await self._runtime.store.revoke_api_key(key_id, actor=actor)
        if revocation is None:
            raise await self._unknown_key(key_id)
        # A key revoked already was announced when it was revoked: nothing to tell.
        if revocation.changed and not await self._runtime.invalidations.announce(KEYS_TOPIC):
            # Redis did not take the new token: API processes may still hold the key.
            # Return once their copies are too old to use, so that "revoked" holds then.
            logger.warning(
                "key %s revoked; Redis did not answer, so API processes may still hold it: "
                "waiting %g s, until their copies of it expire",
                key_id,
                KEY_CACHE_MAX_AGE_S,
            )
            await asyncio.sleep(KEY_CACHE_MAX_AGE_S)
        view = _view(revocation.record, self._runtime.clock.now())
        return RevokedApiKey(
            **view.model_dump(),
            changed=revocation.changed,
            revoked_by=revocation.revoked_by,
            message=_revocation_message(revocation),
        )

    @store_boundary
    async def authenticate(self, secret: str) -> ApiKeyView | None:
        """The live key whose secret this is; None when it is unknown, revoked or expired
        (callers answer all of them alike, so a caller learns nothing about other keys)."""
        if not secret.startswith(KEY_PREFIX) or len(secret) > MAX_SECRET_CHARS:
            return None
        token_hash = hash_secret(secret)
        record = await self._cache.get(
            token_hash, lambda: self._runtime.store.find_api_key(token_hash)
        )
        if record is None:
            return None
        if record.tenant_id == SYSTEM_TENANT:
            # Made before the tenant was reserved: it would act on the engine's own runs.
            logger.warning(
                "API key %s is for the reserved tenant %r and is refused; revoke it "
                "(`schemabridge keys revoke %s`)",
                record.id,
                SYSTEM_TENANT,
                record.id,
            )
            return None
        view = _view(record, self._runtime.clock.now())
        return view if view.state == "live" else None
