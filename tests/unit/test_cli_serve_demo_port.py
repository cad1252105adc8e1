"""`serve --demo --demo-port`: the demo downstream on the port given, as `run --demo-port` does;
a port taken is refused (one line, exit 1) rather than moved, since the user chose it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app


def test_a_taken_demo_port_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCHEMABRIDGE_REDIS_URL", raising=False)
    database = f"sqlite:///{tmp_path / 'demo.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["serve", "--demo", "--demo-port", str(port), "--port", "0"]
        result = CliRunner().invoke(app, [*command, "--database", database])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"cannot start the demo downstream on 127.0.0.1:{port}" in text
    assert "pick another with --demo-port" in text


def test_a_demo_port_without_demo_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["serve", "--demo-port", "8765"])
    assert result.exit_code == 2
    assert "give it with --demo" in " ".join(result.output.split())


def test_a_taken_demo_port_is_said_before_the_database_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port, a check that costs nothing, comes before opening (and migrating) the
    database: given a database it cannot open too, the port is what it says."""
    monkeypatch.delenv("SCHEMABRIDGE_REDIS_URL", raising=False)
    unusable = f"sqlite:///{tmp_path / 'no-such-dir' / 'demo.db'}"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        command = ["serve", "--demo", "--demo-port", str(port), "--port", "0"]
        result = CliRunner().invoke(app, [*command, "--database", unusable])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"cannot start the demo downstream on 127.0.0.1:{port}" in text, text
    assert "SQLite" not in text, text
