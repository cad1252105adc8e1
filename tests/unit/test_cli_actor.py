"""Who a command on the database directly records as its actor: `cli:<user>@<host>`, the user
the operating system names for the process, as one printable word of bounded length."""

from __future__ import annotations

import socket

import pytest

from api.cli.direct import ACTOR_PART_CHARS, cli_actor


def test_the_actor_names_the_user_and_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "ana")
    assert cli_actor() == f"cli:ana@{socket.gethostname()}"


def test_a_user_name_with_spaces_or_control_characters_stays_one_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOGNAME", "ana maria\tops\x1b")
    user = cli_actor().removeprefix("cli:").rpartition("@")[0]
    assert user == "ana_maria_ops_"


def test_a_long_user_name_is_cut_so_the_actor_fits_its_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOGNAME", "u" * 500)
    actor = cli_actor()
    assert actor.startswith(f"cli:{'u' * ACTOR_PART_CHARS}@") and len(actor) <= 200
