"""The encryption of secrets at rest (engine/secret_cipher.py): Fernet keys from the setting,
the first encrypts and all decrypt, rotation, and the one-line refusals."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from engine.secret_cipher import MAKE_KEY, SecretCipher, SecretKeyError, SecretUnreadable, key_id

VALUE = "s3cret-value-ü"


def test_a_value_round_trips_and_the_token_does_not_show_it() -> None:
    cipher = SecretCipher.from_setting(Fernet.generate_key().decode())
    token = cipher.encrypt(VALUE)
    assert VALUE not in token and VALUE.encode().hex() not in token
    assert cipher.decrypt(token) == VALUE
    assert cipher.encrypt(VALUE) != token  # a fresh IV each time


def test_the_first_key_encrypts_and_every_key_decrypts() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    token_old = SecretCipher.from_setting(old).encrypt(VALUE)
    both = SecretCipher.from_setting(f" {new} , {old} ")
    assert both.key_count == 2
    assert both.decrypt(token_old) == VALUE
    rotated = both.rotate(token_old)
    assert SecretCipher.from_setting(new).decrypt(rotated) == VALUE
    with pytest.raises(SecretUnreadable):
        SecretCipher.from_setting(old).decrypt(rotated)


def test_a_token_no_key_decrypts_is_unreadable_and_says_what_to_do() -> None:
    token = SecretCipher.from_setting(Fernet.generate_key().decode()).encrypt(VALUE)
    other = SecretCipher.from_setting(Fernet.generate_key().decode())
    with pytest.raises(SecretUnreadable) as caught:
        other.decrypt(token)
    assert "SCHEMABRIDGE_SECRET_KEYS" in caught.value.message
    with pytest.raises(SecretUnreadable):
        other.rotate(token)
    with pytest.raises(SecretUnreadable):
        other.decrypt("not a token")


@pytest.mark.parametrize(
    ("setting", "code"), [(None, "secret_key_missing"), (" , ", "secret_key_missing")]
)
def test_without_a_key_every_use_is_refused_with_how_to_make_one(
    setting: str | None, code: str
) -> None:
    cipher = SecretCipher.from_setting(setting)
    assert cipher.problem is not None and MAKE_KEY in cipher.problem
    for use in (cipher.check, lambda: cipher.encrypt(VALUE), lambda: cipher.decrypt("t")):
        with pytest.raises(SecretKeyError) as caught:
            use()
        assert caught.value.code == code
        assert "\n" not in caught.value.message and MAKE_KEY in caught.value.message


def test_an_invalid_key_is_named_by_its_position() -> None:
    good = Fernet.generate_key().decode()
    cipher = SecretCipher.from_setting(f"{good},not-a-key")
    assert cipher.problem_code == "secret_key_invalid"
    assert cipher.problem is not None and "2nd key" in cipher.problem
    assert "not-a-key" not in cipher.problem  # a key is never echoed
    with pytest.raises(SecretKeyError) as caught:
        cipher.encrypt(VALUE)
    assert caught.value.code == "secret_key_invalid"


def test_a_token_names_its_key_and_a_process_without_it_says_which_to_add() -> None:
    """After `secrets rotate` under a new key, a worker still on the old key alone must be told
    to add the new key (by its id), not to put an old key back and rotate."""
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    rotated = SecretCipher.from_setting(f"{new},{old}").rotate(
        SecretCipher.from_setting(old).encrypt(VALUE)
    )
    assert rotated.startswith(f"{key_id(new)}:")
    with pytest.raises(SecretUnreadable) as caught:
        SecretCipher.from_setting(old).decrypt(rotated)
    message = caught.value.message
    assert f"encrypted with key {key_id(new)}" in message
    assert f"it holds {key_id(old)}" in message
    assert "add that key to SCHEMABRIDGE_SECRET_KEYS" in message
    assert new not in message and old not in message  # ids, never the keys
    assert "put that key back" not in message


def test_a_token_without_a_key_id_is_still_read() -> None:
    key = Fernet.generate_key().decode()
    bare = Fernet(key.encode()).encrypt(VALUE.encode()).decode()  # as stored before key ids
    cipher = SecretCipher.from_setting(key)
    assert cipher.decrypt(bare) == VALUE
    assert cipher.rotate(bare).startswith(f"{key_id(key)}:")
    with pytest.raises(SecretUnreadable) as caught:
        SecretCipher.from_setting(Fernet.generate_key().decode()).decrypt(bare)
    assert "the key it was encrypted with" in caught.value.message


def test_an_altered_token_under_a_held_key_says_so() -> None:
    cipher = SecretCipher.from_setting(Fernet.generate_key().decode())
    token = cipher.encrypt(VALUE)
    with pytest.raises(SecretUnreadable) as caught:
        cipher.decrypt(token[:-4] + "AAAA")
    assert "altered" in caught.value.message
