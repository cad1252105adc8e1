"""The REST access log of real `serve` and `api` processes (`--access-log all|changes|off`,
`SCHEMABRIDGE_ACCESS_LOG`): `serve` logs only what changed or failed by default, so the
monitor's polling reads do not flood its terminal; `api` logs every request by default (its
log is shipped); `off` and the old `--no-access-log` log none; a bad value is one line, exit
2."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.cli.exit_codes import ExitCode
from tests.conftest import Backend
from tests.e2e.rest_harness import process_env, schemabridge, service, upgraded
from tests.integration.operations_harness import single

UNREACHABLE = "http://127.0.0.1:9/never"
DOCUMENT = single("quiet", UNREACHABLE)


def embedded_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    return process_env(backend, tmp_path, auth="off", **settings)


def access_lines(log: str) -> list[dict[str, Any]]:
    """The access log's lines among a process's stderr (one JSON object a line)."""
    found = []
    for line in log.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if {"method", "route", "status"} <= record.keys():
                found.append(record)
    return found


def exercise(url: str) -> None:
    """What a monitor and an operator do: reads that succeed, a publish, a 404."""
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
        for path in ("/health", "/workflows", "/runs", "/ui/"):
            assert http.get(path).status_code == 200, path
        published = http.post("/workflows/validate", json=DOCUMENT)
        assert published.status_code == 200, published.text
        assert http.get("/runs/no-such-run").status_code == 404


def logged(args: list[str], env: dict[str, str], log: Path) -> list[tuple[str, str, int]]:
    """(method, path, status) of each access line `schemabridge ARGS` wrote for `exercise`
    (its stderr in `log`)."""
    with service(args, env, log) as running:
        exercise(running.wait_for_url())
        assert running.stop(signal.SIGTERM) == 0
    return [(r["method"], r["path"], r["status"]) for r in access_lines(running.stderr())]


def test_serve_logs_only_changes_and_errors_by_default(tmp_path: Path) -> None:
    lines = logged(["serve", "--port", "0"], embedded_env(tmp_path), tmp_path / "serve.log")
    assert lines == [
        ("POST", "/workflows/validate", 200),
        ("GET", "/runs/no-such-run", 404),
    ]


def test_api_logs_every_request_by_default(tmp_path: Path) -> None:
    env = upgraded(embedded_env(tmp_path))
    lines = logged(["api", "--port", "0"], env, tmp_path / "api.log")
    assert [(method, path) for method, path, _ in lines] == [
        ("GET", "/health"),
        ("GET", "/workflows"),
        ("GET", "/runs"),
        ("GET", "/ui/"),
        ("POST", "/workflows/validate"),
        ("GET", "/runs/no-such-run"),
    ]


@pytest.mark.parametrize(
    ("args", "settings"),
    [
        (["serve", "--port", "0", "--access-log", "off"], {}),
        (["serve", "--port", "0", "--no-access-log"], {}),
        (["api", "--port", "0", "--access-log", "OFF"], {}),
        (["api", "--port", "0"], {"access_log": "off"}),
    ],
)
def test_off_logs_nothing(args: list[str], settings: dict[str, str], tmp_path: Path) -> None:
    env = upgraded(embedded_env(tmp_path, **settings))
    assert logged(args, env, tmp_path / "service.log") == []


def test_the_environment_chooses_unless_the_option_does(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, access_log="all")
    everything = logged(["serve", "--port", "0"], env, tmp_path / "from-env.log")
    assert ("GET", "/health", 200) in everything
    chosen = logged(
        ["serve", "--port", "0", "--access-log", "changes"], env, tmp_path / "from-option.log"
    )
    assert ("GET", "/health", 200) not in chosen and ("GET", "/runs/no-such-run", 404) in chosen


@pytest.mark.parametrize(
    ("args", "settings", "line"),
    [
        (
            ["serve", "--access-log", "loud"],
            {},
            "error: --access-log 'loud': give all, changes or off",
        ),
        (
            ["api", "--access-log", "loud"],
            {},
            "error: --access-log 'loud': give all, changes or off",
        ),
        (["serve", "--access-log", ""], {}, "error: --access-log '': give all, changes or off"),
        (
            ["serve"],
            {"access_log": "loud"},
            "error: SCHEMABRIDGE_ACCESS_LOG 'loud': give all, changes or off",
        ),
        (
            ["serve", "--no-access-log", "--access-log", "all"],
            {},
            "error: --no-access-log and --access-log all: give one of them",
        ),
    ],
)
def test_a_bad_choice_is_one_line(
    args: list[str], settings: dict[str, str], line: str, tmp_path: Path
) -> None:
    """What was given and the choices, in the CLI's words (not click's "Invalid value …:
    Value error, …"), exit 2 (`ExitCode.USAGE`)."""
    refused = schemabridge(embedded_env(tmp_path, **settings), *args, "--port", "0")
    assert refused.returncode == ExitCode.USAGE, (refused.stdout, refused.stderr)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert lines == [line], refused.stderr


def test_no_access_log_overrides_a_bad_environment(tmp_path: Path) -> None:
    """`--no-access-log` is the operator's choice: the environment's is not read, bad or not."""
    env = upgraded(embedded_env(tmp_path, access_log="loud"))
    assert logged(["serve", "--port", "0", "--no-access-log"], env, tmp_path / "s.log") == []


def test_what_changes_keeps() -> None:
    from api.rest.middleware import SLOW_READ_S, notable

    assert notable("POST", 201, 0.01) and notable("DELETE", 200, 0.01)
    assert notable("GET", 404, 0.01) and notable("GET", 503, 0.01)
    assert not notable("GET", 200, 0.01) and not notable("HEAD", 200, 0.01)
    assert notable("GET", 200, SLOW_READ_S + 0.5), "a slow read is worth a line"
    assert not notable("GET", 200, 60, streamed=True), "an event stream lasts as it is watched"


def test_help_shows_the_choice_and_its_default(tmp_path: Path) -> None:
    """`--help` lists the choice and each command's default, not the hidden alias."""
    for command, default in (("serve", "changes"), ("api", "all")):
        shown = schemabridge(embedded_env(tmp_path), command, "--help")
        text = re.sub(r"[│\s]+", " ", shown.stdout)
        assert "--access-log" in text and f"else {default}" in text, text
        assert "--no-access-log" not in text
