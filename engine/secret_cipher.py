"""The encryption of secrets at rest: Fernet keys from `SCHEMABRIDGE_SECRET_KEYS`.

Fernet (from `cryptography`) is AES-128-CBC with an HMAC-SHA256 over the whole token, so a
stored value can be neither read nor altered without the key. `SCHEMABRIDGE_SECRET_KEYS` holds
one or more keys, comma-separated (a MultiFernet): the first encrypts, every one decrypts, so
a new key can be put first while secrets written under the old one are still read; `rotate`
re-encrypts a token under the first key (docs/security.md, 'Rotating the encryption key').

A stored token is `<key id>:<Fernet token>`: the key id (`key_id`, the first 8 hex digits of
the key's SHA-256) names the key that encrypted it, so a process that lacks that key can say
which key to give it rather than guess. Fernet tokens are url-safe base64 (no ":"), and a token
stored without an id (before ids were written) is still read.

The keys live in the environment of the processes that set secrets (the CLI, API processes)
and that use them (workers), never in the database: a copy of the database alone reveals no
secret.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from schemas.errors import SchemaBridgeError, Unavailable

KEYS_SETTING = "SCHEMABRIDGE_SECRET_KEYS"
MAKE_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)
"""The command that prints a new key (the `cryptography` package is installed with us)."""


class SecretKeyError(Unavailable):
    """No usable encryption key: none configured (`secret_key_missing`), or one that is not a
    Fernet key (`secret_key_invalid`). The message is one line that says how to make a key."""

    code = "secret_key_missing"


class SecretUnreadable(SchemaBridgeError):
    """No configured key decrypts the token: it was encrypted with a key that is no longer in
    `SCHEMABRIDGE_SECRET_KEYS` (or altered)."""

    code = "secret_unreadable"


def key_id(key: str) -> str:
    """The id of a key, safe to show: the first 8 hex digits of its SHA-256 (a one-way
    fingerprint: it tells keys apart, it cannot be turned back into the key)."""
    return hashlib.sha256(key.strip().encode()).hexdigest()[:8]


def _split(token: str) -> tuple[str | None, str]:
    """(key id or None, Fernet token) of a stored token."""
    head, sep, rest = token.partition(":")
    return (head, rest) if sep else (None, token)


def stored_key_id(token: str) -> str | None:
    """The key id a stored token (or its head, `<key id>:`) was encrypted with; None for a
    token stored before key ids were (a Fernet token has no colon)."""
    return _split(token)[0]


def _ordinal(position: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(position, f"{position}th")


@dataclass(frozen=True)
class SecretCipher:
    """Encrypts, decrypts and rotates secret values with the configured keys.

    Built from the setting's text by `from_setting`, which never raises: a process without a
    key (or with an invalid one) starts and works until something needs a secret, and that
    operation is refused with `problem`, one line with the fix.
    """

    _fernet: MultiFernet | None
    problem: str | None
    """Why no secret can be encrypted or decrypted here; None when the keys are usable."""
    problem_code: str = "secret_key_missing"
    key_ids: tuple[str, ...] = ()
    """The ids of the configured keys, the encrypting one first."""

    @property
    def key_count(self) -> int:
        return len(self.key_ids)

    @classmethod
    def from_setting(cls, text: str | None) -> SecretCipher:
        """The cipher for `SCHEMABRIDGE_SECRET_KEYS` (`text`: comma-separated keys)."""
        keys = [key.strip() for key in (text or "").split(",") if key.strip()]
        if not keys:
            return cls(
                None,
                f"no secret encryption key is configured: set {KEYS_SETTING} to a key made "
                f"with {MAKE_KEY}",
            )
        fernets: list[Fernet] = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.encode()))
            except ValueError:
                return cls(
                    None,
                    f"the {_ordinal(position)} key in {KEYS_SETTING} is not a Fernet key (32 "
                    f"url-safe base64-encoded bytes): make one with {MAKE_KEY}",
                    "secret_key_invalid",
                )
        return cls(MultiFernet(fernets), None, key_ids=tuple(key_id(key) for key in keys))

    def _keys(self) -> MultiFernet:
        if self._fernet is None:
            raise SecretKeyError(self.problem or "no secret key", code=self.problem_code)
        return self._fernet

    def check(self) -> None:
        """Raise `SecretKeyError` unless the keys are usable."""
        self._keys()

    def check_setting(self) -> None:
        """Raise `SecretKeyError` (`secret_key_invalid`) when the setting holds something
        that is not a key; no key at all passes (what needs none may go on without one)."""
        if self.problem is not None and self.problem_code == "secret_key_invalid":
            self._keys()

    def encrypt(self, value: str) -> str:
        """The token of `value`, under the first key (with that key's id)."""
        token = self._keys().encrypt(value.encode()).decode("ascii")
        return f"{self.key_ids[0]}:{token}"

    def decrypt(self, token: str) -> str:
        """The value of `token`; `SecretUnreadable` when no configured key decrypts it."""
        keys = self._keys()
        stored_id, fernet_token = _split(token)
        try:
            return keys.decrypt(fernet_token.encode("ascii")).decode()
        except (InvalidToken, UnicodeError) as exc:
            raise SecretUnreadable(self._unreadable(stored_id)) from exc

    def rotate(self, token: str) -> str:
        """`token` re-encrypted under the first key; `SecretUnreadable` as `decrypt`."""
        keys = self._keys()
        stored_id, fernet_token = _split(token)
        try:
            rotated = keys.rotate(fernet_token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeError) as exc:
            raise SecretUnreadable(self._unreadable(stored_id)) from exc
        return f"{self.key_ids[0]}:{rotated}"

    def _unreadable(self, stored_id: str | None) -> str:
        """Why a token does not decrypt here, and the fix: the key it needs, in the setting."""
        held = ", ".join(self.key_ids)
        if stored_id is not None and stored_id in self.key_ids:
            return (
                f"it does not decrypt with key {stored_id} of {KEYS_SETTING}, the key it was "
                "encrypted with: it was altered; set the secret again"
            )
        needed = f"key {stored_id}" if stored_id is not None else "the key it was encrypted with"
        return (
            f"it was encrypted with {needed}, which this process's {KEYS_SETTING} does not "
            f"hold (it holds {held}): add that key to {KEYS_SETTING} here, as on the process "
            "that set or rotated the secret (newest key first), and restart this process"
        )
