"""The encryption of secrets at rest: Fernet keys from `SCHEMABRIDGE_SECRET_KEYS`.

Fernet (from `cryptography`) is AES-128-CBC with an HMAC-SHA256 over the whole token, so a
stored value can be neither read nor altered without the key. `SCHEMABRIDGE_SECRET_KEYS` holds
one or more keys, comma-separated (a MultiFernet): the first encrypts, every one decrypts, so
a new key can be put first while secrets written under the old one are still read; `rotate`
re-encrypts a token under the first key (docs/security.md, 'Rotating the encryption key').

The keys live in the environment of the processes that set secrets (the CLI, API processes)
and that use them (workers), never in the database: a copy of the database alone reveals no
secret.
"""

from __future__ import annotations

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
    key_count: int = 0

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
        return cls(MultiFernet(fernets), None, key_count=len(fernets))

    def _keys(self) -> MultiFernet:
        if self._fernet is None:
            raise SecretKeyError(self.problem or "no secret key", code=self.problem_code)
        return self._fernet

    def check(self) -> None:
        """Raise `SecretKeyError` unless the keys are usable."""
        self._keys()

    def encrypt(self, value: str) -> str:
        """The token of `value`, under the first key."""
        return self._keys().encrypt(value.encode()).decode("ascii")

    def decrypt(self, token: str) -> str:
        """The value of `token`; `SecretUnreadable` when no configured key decrypts it."""
        try:
            return self._keys().decrypt(token.encode("ascii")).decode()
        except (InvalidToken, UnicodeError) as exc:
            raise SecretUnreadable(
                f"none of the keys in {KEYS_SETTING} decrypts it: it was encrypted with a key "
                "that is no longer configured (put that key back after the first one, then run "
                "`schemabridge secrets rotate`)"
            ) from exc

    def rotate(self, token: str) -> str:
        """`token` re-encrypted under the first key; `SecretUnreadable` as `decrypt`."""
        try:
            return self._keys().rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeError) as exc:
            raise SecretUnreadable(f"none of the keys in {KEYS_SETTING} decrypts it") from exc
